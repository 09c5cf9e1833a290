"""pmfast's numba ``SpecifyShape``, ``Reshape`` and ``DimShuffle``: the same views and errors as
pytensor's, without the numba generic code theirs compile in every new process.

* ``SpecifyShape``: pytensor's asserts with an f-string message formatted in numba (``str(int)``,
  concatenation… ~1.3 s of hier_logistic's cold compile). Here a failed check raises
  :class:`SpecifyShapeError`, an ``AssertionError`` carrying the numbers, formatted in Python
  with pytensor's message, through one cached function shared with ``Split``
  (:func:`pmfast.compiler.raisers.shape_fail`).
* ``Reshape`` (to at least one axis): pytensor's ``np.reshape(np.ascontiguousarray(np.asarray(x)),
  ...)`` compiles three numba overloads in every process; here straight-line code with the same
  errors (:func:`reshape`).
* ``DimShuffle``: pytensor's calls numba's ``as_strided`` (its overloads: ~0.7 s of a cold
  process). Here an intrinsic builds the same view (:func:`pmfast.compiler.native.dimshuffle`).
"""

from __future__ import annotations

import numpy as np

from pmfast.compiler import generated, raisers
from pmfast.compiler.raisers import SpecifyShapeError  # noqa: F401  (raised by the jitted check)

#: Bump when the generated code changes (part of the cache keys; 9 continues the count of
#: ``pmfast.compiler.ops``, where this code was).
VERSION = 9


def _specify_shape_fail():
    """The jitted raise of a failed ``SpecifyShape`` check (:func:`pmfast.compiler.raisers.shape_fail`).

    One function for every model (its signature never changes), cached on disk by numba: the
    node functions call it instead of raising themselves, so they hold no ``raise`` with runtime
    arguments and an entry inlines them (:mod:`pmfast.compiler.inline`), instead of compiling a
    ``specify_shape`` per model and signature (~0.05 CPU s on a used machine).
    """
    return raisers.shape_fail()


def specify_shape(op, node):
    """``(numba function, key)`` of a ``SpecifyShape`` node: its checks, failing through :func:`_specify_shape_fail`."""
    from pytensor.tensor.type_other import NoneConst

    names = [f"shape_{i}" for i in range(len(node.inputs) - 1)]
    checks = [
        f"    if x.shape[{i}] != {name}[()]:\n        _pm_shape_fail(0, {i}, x.shape[{i}], _pm_i64({name}[()]))"
        for i, (name, inp) in enumerate(zip(names, node.inputs[1:], strict=True))
        if inp is not NoneConst
    ]
    src = f"def specify_shape(x, {', '.join(names)}):\n" + "\n".join(checks) + "\n    return x\n"
    env = {"_pm_shape_fail": _specify_shape_fail(), "_pm_i64": np.int64}
    return generated.build(__name__, "specify_shape", src, env, "pmfast_specify_shape_", (VERSION, src))


def dimshuffle(op, node):
    """``(numba function, key)`` of a ``DimShuffle`` node: the view built by :func:`pmfast.compiler.native.dimshuffle`."""
    from pmfast.compiler import native

    spec = native.dimshuffle_spec(op._new_order, op.drop)
    src = "def dimshuffle(x):\n    return _pm_dimshuffle(x, SPEC)\n"
    env = {"_pm_dimshuffle": native.dimshuffle, "SPEC": spec}
    return generated.build(__name__, "dimshuffle", src, env, "pmfast_dimshuffle_", (VERSION, spec, op.input_ndim))


def _reshape_source(ndim: int) -> str:
    """Source of ``reshape(x, shape)`` for ``ndim`` output axes (see :func:`reshape`)."""
    s = [f"s{k}" for k in range(ndim)]
    lines = ["c = _pm_ascontiguous1(x)"]
    lines += [f"{v} = shape[{k}]" for k, v in enumerate(s)]
    lines += ["neg = 0", "known = 1"]
    for v in s:
        lines += [f"if {v} < 0:", "    neg += 1", "else:", f"    known *= {v}"]
    lines += [
        "n = c.size",
        "if neg == 0:",
        "    if n != known:",
        "        raise ValueError('total size of new array must be unchanged')",
        "elif neg == 1:",
        "    if known == 0:",
        "        inferred = 0",
        "        ok = n == 0",
        "    else:",
        "        inferred = n // known",
        "        ok = n % known == 0",
        "    if not ok:",
        "        raise ValueError('total size of new array must be unchanged')",
    ]
    for v in s:
        lines += [f"    if {v} < 0:", f"        {v} = inferred"]
    lines += ["else:", "    raise ValueError('multiple negative shape values')"]
    lines.append(f"return _pm_c_reshape(c, ({''.join(v + ', ' for v in s)}))")
    return "def reshape(x, shape):\n" + "".join(f"    {line}\n" for line in lines)


def reshape(op, node):
    """``Reshape`` to ``ndim >= 1`` axes: pytensor's ``np.reshape(np.ascontiguousarray(np.asarray(x)),
    to_fixed_tuple(shape, ndim))`` without numba's generic code.

    Its three calls are ``@overload`` implementations numba compiles as functions of their own, in
    every process (hier_logistic on a used machine: ~0.4 CPU s for ``np.ascontiguousarray``,
    ``np.reshape`` and their allocator). Here the contiguous copy (or the array itself) is
    :func:`pmfast.compiler.arrays.ascontiguous1` (numba's own code, lowered in place), the
    ``-1`` inference and the size check are numba's ``normalize_reshape_value`` written out for
    ``ndim`` axes (same errors, same messages), and the view is
    :func:`pmfast.compiler.native.c_reshape` (numba's reshape of a C-contiguous array: the same
    shape and strides, sharing the memory). Called, not inlined
    (:data:`pmfast.compiler.inline.NEVER`): its source depends on ``ndim`` only, so its cached
    code serves every model.
    """
    from pmfast.compiler import arrays, native

    src = _reshape_source(op.ndim)
    env = {"_pm_ascontiguous1": arrays.ascontiguous1, "_pm_c_reshape": native.c_reshape}
    return generated.build(__name__, "reshape", src, env, "pmfast_reshape_", (VERSION, src, arrays.VERSION))
