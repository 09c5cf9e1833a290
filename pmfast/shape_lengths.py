"""ShapeFeature's static lengths built from one prototype constant per length, not by ``constant()`` each time.

pytensor's ``ShapeFeature`` (attached from ``ShapeOpt`` to the end of the rewrites) records a
shape tuple for every variable it imports. For each axis whose static length is known,
``set_shape`` and ``shape_ir`` call ``constant(length, dtype="int64")``: numpy conversion, two
new ``TensorType`` (numpy's Python-level ``dtype.__str__``), a shape check, and later the new
constant's merge signature (a masked-array sum) when it meets the merge feature or a shape
comparison. ``set_shape`` then asserts, for every axis of static length 1, that the entry
equals ``lscalar_one`` (a signature comparison). On hier_var (8 groups): ~20,000 constants,
about half of ``ShapeFeature.on_import``.

:func:`set_shape` and :func:`shape_ir` build the constant with :func:`_length`: the first one
per length and feature by pytensor's ``constant``, the others by ``Constant.__init__`` with that
one's type and data (an int64 ``()`` type, a 0-d int64 array) and its signature. Every call
still returns a new constant, as pytensor's does, so the rewritten graph is the same object for
object (the merge feature sees as many constants as before); the data array they share is never
written (pytensor refuses to destroy a constant). The assertion is dropped where it is a
tautology: an axis of static length 1 gets a constant 1, which equals ``lscalar_one``.
Everything else (``None`` shapes, tuples of the wrong length, non-static axes through
``unpack``, the reverse index) is pytensor's code path unchanged.

Compile-scoped (:func:`pmfast.compiler.patching.scoped`); ``PMFAST_SHAPE_LENGTHS=0`` restores
pytensor's methods inside the compile too.
"""

from __future__ import annotations

import os

from pytensor.graph.basic import Constant
from pytensor.tensor.basic import constant
from pytensor.tensor.variable import TensorConstant

from pmfast.compiler.patching import scoped


def enabled() -> bool:
    """Whether the cached lengths are used (``PMFAST_SHAPE_LENGTHS=0``: pytensor's constants)."""
    return os.environ.get("PMFAST_SHAPE_LENGTHS", "1") != "0"


def _length(feature, n):
    """A new int64 constant of static length ``n``, as ``constant(n, dtype="int64")`` makes it.

    The first call per length and feature goes through pytensor's ``constant`` and keeps the
    result's type, data and merge signature; later calls build a ``TensorConstant`` from those
    by ``Constant.__init__`` (what ``TensorConstant.__init__`` ends with, after checking the
    data's shape against the type's and cloning the type to it: both are ``()`` here). Each call
    returns a distinct constant, as pytensor's does, so the graph's constants are the same
    objects-for-objects (the merge feature merges what it merged before).
    """
    cache = feature.__dict__.get("_pmfast_lengths")
    if cache is None:
        cache = feature.__dict__["_pmfast_lengths"] = {}
    proto = cache.get(n)
    if proto is None:
        c = constant(n, dtype="int64")
        c.signature()  # pmfast.compiler.constants keeps it on the constant
        cache[n] = (c.type, c.data, c.__dict__.get("_pmfast_signature"))
        return c
    ttype, data, signature = proto
    c = TensorConstant.__new__(TensorConstant)
    Constant.__init__(c, ttype, data, None)
    if signature is not None and c.data is data:
        c.__dict__["_pmfast_signature"] = signature
    return c


def install() -> None:
    """Replace ``ShapeFeature.set_shape`` and ``shape_ir`` inside pmfast's compile (idempotent)."""
    from pytensor.tensor.rewriting.shape import ShapeFeature

    if getattr(ShapeFeature.set_shape, "_pmfast", False):
        return
    original_set_shape = ShapeFeature.set_shape
    original_shape_ir = ShapeFeature.shape_ir

    def set_shape(self, r, s, override=False):
        if s is None or not isinstance(s, tuple | list) or not enabled():
            return original_set_shape(self, r, s, override)
        rtype = r.type
        ndim = rtype.ndim
        if ndim != len(s):
            return original_set_shape(self, r, s, override)  # pytensor's error
        if not override:
            assert r not in self.shape_of, "r already in shape_of"
        static = getattr(rtype, "shape", None)
        shape_vars = []
        for i in range(ndim):
            n = None if static is None else static[i]
            shape_vars.append(_length(self, n) if n is not None else self.unpack(s[i], r))
        self.shape_of[r] = tuple(shape_vars)
        index = self.shape_of_reverse_index
        for sv in shape_vars:
            index.setdefault(sv, set()).add(r)

    def shape_ir(self, i, r):
        static = getattr(r.type, "shape", None)
        if static is not None and static[i] is not None and enabled():
            return _length(self, static[i])
        return original_shape_ir(self, i, r)

    ShapeFeature.set_shape = scoped(original_set_shape, set_shape)
    ShapeFeature.shape_ir = scoped(original_shape_ir, shape_ir)
