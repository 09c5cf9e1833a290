"""ShapeFeature's static lengths as one int64 constant per length and feature, not a new constant per dimension.

pytensor's ``ShapeFeature`` (attached from ``ShapeOpt`` to the end of the rewrites) records a
shape tuple for every variable it imports. For each axis whose static length is known,
``set_shape`` and ``shape_ir`` call ``constant(length, dtype="int64")``: a new ``TensorType``
(numpy's Python-level ``dtype.__str__``) and a new ``TensorConstant``, whose merge signature
(a masked-array sum) is computed again when the constant meets the merge feature or a shape
comparison. ``set_shape`` then asserts, for every axis of static length 1, that the entry
equals ``lscalar_one`` (a signature comparison). On hier_var (8 groups) that was ~20,000
constants and ~46% of ``ShapeFeature.on_import``.

:func:`set_shape` and :func:`shape_ir` take the constant from a dict on the feature
(``length -> TensorConstant``), built by the same ``constant(length, dtype="int64")`` call the
first time: equal type (``int64``, shape ``()``), equal data, no name, so every comparison
pytensor makes between shape entries (``equals``/signatures, ``get_scalar_constant_value``,
``equal_computations``, the merge feature's signature keys) answers as before; an entry is
a shape *expression*, never destroyed in place. The assertion is dropped where it is a
tautology: an axis of static length 1 gets ``constant(1)``, which equals ``lscalar_one``.
Everything else (``None`` shapes, tuples of the wrong length, non-static axes through
``unpack``, the reverse index) is pytensor's code path unchanged. The cache lives on the
feature instance, so no constant is shared between two function graphs (the reason
pytensor gives ``lscalar_one`` per feature).

Compile-scoped (:func:`pmfast.compiler.patching.scoped`); ``PMFAST_SHAPE_LENGTHS=0`` restores
pytensor's methods inside the compile too.
"""

from __future__ import annotations

import os

from pmfast.compiler.patching import scoped


def enabled() -> bool:
    """Whether the cached lengths are used (``PMFAST_SHAPE_LENGTHS=0``: pytensor's constants)."""
    return os.environ.get("PMFAST_SHAPE_LENGTHS", "1") != "0"


def _length(feature, n):
    """The feature's int64 constant for static length ``n`` (made by pytensor's ``constant`` once)."""
    cache = feature.__dict__.get("_pmfast_lengths")
    if cache is None:
        cache = feature.__dict__["_pmfast_lengths"] = {}
    c = cache.get(n)
    if c is None:
        from pytensor.tensor.basic import constant

        c = cache[n] = constant(n, dtype="int64")
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
