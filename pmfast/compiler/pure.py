"""Pure-python versions of the intrinsics pmfast's generated code calls: one mechanism, here.

numba evaluates nothing of an intrinsic in Python (calling one raises ``NotImplementedError: … not
usable in pure-python``), so a graph function pmfast generated could not run as plain Python: not
under ``NUMBA_DISABLE_JIT=1`` (a user debugging a model), nor in pytensor's own test suite, which
runs every numba function once more with ``numba.njit`` replaced by the identity
(``compare_numba_and_py(..., eval_obj_mode=True)``). Stock pytensor's op implementations are plain
Python with numba overloads behind them; pmfast's call intrinsics directly, for compile time.

:class:`Intrinsic` is numba's intrinsic (the same typing, the same code generation, registered the
same way) that can carry a numpy equivalent: calling it from Python runs that instead of raising.
Nothing about compiled code changes: numba never calls ``__call__``. An intrinsic gets its
Python version beside its definition::

    @intrinsic(prefer_literal=True)
    def dimshuffle(typingctx, x, spec): ...

    @dimshuffle.python
    def _(x, spec): ...

and :func:`with_python` gives one of pytensor's intrinsics (``_vectorized``, which pmfast's
Elemwise calls directly) a Python version the same way. Each Python version computes what the
compiled code computes (same values, shapes, dtypes, views where the compiled code returns views,
same exception types and messages), checked against the compiled path by
``tests/test_pure_python.py``.

:func:`jit_off` tells pmfast's code generation whether the numba functions it makes will run as
plain Python (``NUMBA_DISABLE_JIT=1``, or pytensor's ``numba_njit`` replaced by a function returning
its argument). Then pmfast skips what only exists for compiled code (a kernel compiled in another
process) and, where its own code is a numba function jitted on import (``pmfast.vmath``'s kernels
and ``psi``: dispatchers whatever the replacement, which can't be called while numba's typing is
replaced), uses stock's scalar implementation; and it never keeps a function made meanwhile for
later compiles (a raiser, an inline copy).

With ``NUMBA_DISABLE_JIT=1`` stock pytensor 2.38.3 evaluates no numba function at all (its linker
reads the ``py_func`` of what ``numba.njit`` returns: ``AttributeError``). pmfast's linker then
converts with :func:`plain_njit` and installs :func:`python_helpers` (both in the patch registry),
so that a model's functions run as plain Python: what a user debugging a model expects.

This module imports nothing of pmfast's (it stands at the bottom, next to
:mod:`pmfast.compiler.patching`).
"""

from __future__ import annotations

import numpy as np
from numba.core.extending import _Intrinsic


class Intrinsic(_Intrinsic):
    """numba's intrinsic with an optional pure-python version, run when it is called from Python."""

    def __init__(self, name, defn, prefer_literal=False, py=None, **kwargs):
        super().__init__(name, defn, prefer_literal=prefer_literal, **kwargs)
        self._py = py

    def python(self, fn):
        """Decorator: ``fn`` is this intrinsic's pure-python version (returns ``fn``)."""
        self._py = fn
        return fn

    def __call__(self, *args, **kwargs):
        if self._py is None:
            return super().__call__(*args, **kwargs)
        return self._py(*args, **kwargs)

    def _reduce_states(self):
        return dict(super()._reduce_states(), py=self._py)

    @classmethod
    def _rebuild(cls, uuid, name, defn, py=None):
        try:
            return cls._memo[uuid]
        except KeyError:
            llc = cls(name=name, defn=defn, py=py)
            llc._register()
            llc._set_uuid(uuid)
            return llc


def intrinsic(*args, **kwargs):
    """``numba.extending.intrinsic``, making an :class:`Intrinsic` (``py=``: its Python version)."""

    def make(func):
        llc = Intrinsic(getattr(func, "__name__", str(func)), func, **kwargs)
        llc._register()
        return llc

    if args:  # used bare (``@intrinsic``) or called on the definition (``intrinsic(defn, py=...)``)
        return make(*args)
    return make


def with_python(intr, py) -> Intrinsic:
    """An :class:`Intrinsic` typed and lowered by ``intr``'s own definition and options, running ``py``
    when called from Python (for intrinsics of other packages that pmfast's generated code calls)."""
    llc = Intrinsic(intr._name, intr._defn, prefer_literal=intr._prefer_literal, py=py, **intr._ctor_kwargs)
    llc._register()
    return llc


def _probe():
    return None


_probed: list = [None, False]  # [pytensor's numba_njit when last probed, whether it made a plain function]


def jit_off() -> bool:
    """Whether numba functions made now through pytensor's ``numba_njit`` are plain Python functions."""
    import numba

    if numba.config.DISABLE_JIT:
        return True
    from numba.core.dispatcher import Dispatcher
    from pytensor.link.numba.dispatch import basic

    njit = basic.numba_njit
    if _probed[0] is not njit:
        _probed[:] = [njit, not isinstance(njit(_probe), Dispatcher)]
    return _probed[1]


def _vectorized_py(core, input_bc, output_bc, output_dtypes, inplace, allow_core_scalar, constants, inputs, core_shapes, size):
    """pytensor's ``_vectorized`` loop as numpy: the same iteration shape and its checks (same
    messages), outputs allocated (or taken in place from inputs), ``core`` called per batch index
    with the inputs' core items (scalars where ``allow_core_scalar``) and 0-d or core views of the
    outputs, as the compiled loop does."""
    import base64
    import pickle

    import numpy as np

    def decode(s):
        return pickle.loads(base64.decodebytes(s.encode()))

    input_bc, output_bc, output_dtypes, inplace = map(decode, (input_bc, output_bc, output_dtypes, inplace))
    inputs = [np.asarray(x) for x in inputs]
    ndim = len(input_bc[0])
    shape = list(size) if size is not None else [None] * ndim
    for i in range(ndim):
        for j, (bc, x) in enumerate(zip(input_bc, inputs, strict=True)):
            length = x.shape[i]
            if bc[i]:
                if length != 1:
                    raise ValueError(f"Vectorized input {j} is expected to have shape 1 in axis {i}")
            elif shape[i] is None:
                shape[i] = length
            elif length != shape[i]:
                if length == 1:
                    raise ValueError(
                        f"Incompatible vectorized shapes for input {j} and axis {i}. Input {j} has shape 1, "
                        "but is not statically known to have shape 1, and thus not broadcastable."
                    )
                raise ValueError(f"Vectorized input {j} has an incompatible shape in axis {i}.")
    shape = [1 if s is None else s for s in shape]
    in_place = dict(inplace)
    outputs = []
    for k, (bc, dtype, core_shape) in enumerate(zip(output_bc, output_dtypes, core_shapes, strict=True)):
        if k in in_place:
            outputs.append(inputs[in_place[k]])
        else:
            batch = [1 if b else n for n, b in zip(shape, bc, strict=True)]
            outputs.append(np.empty((*batch, *core_shape), dtype=dtype))
    for idx in np.ndindex(*shape):
        args = list(constants)
        for bc, x in zip(input_bc, inputs, strict=True):
            at = tuple(0 if b else n for n, b in zip(idx, bc, strict=True))
            args.append(x[at] if allow_core_scalar and x.ndim == ndim else x[(*at, ...)])
        for bc, out in zip(output_bc, outputs, strict=True):
            args.append(out[(*(0 if b else n for n, b in zip(idx, bc, strict=True)), ...)])
        core(*args)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


_VECTORIZED: list = []


def vectorized():
    """pytensor's ``_vectorized`` intrinsic (its typing and code generation) with a Python version."""
    if not _VECTORIZED:
        from pytensor.link.numba.dispatch.vectorize_codegen import _vectorized

        _VECTORIZED.append(with_python(_vectorized, _vectorized_py))
    return _VECTORIZED[0]


def plain_njit(numba_njit):
    """pytensor's ``numba_njit`` for ``NUMBA_DISABLE_JIT=1``, whose plain functions have a ``py_func``.

    With the jit disabled, ``numba.njit`` returns the function itself, and pytensor's linker reads the
    ``py_func`` of what ``numba_njit`` returns (stock pytensor fails there: ``AttributeError``).
    This gives the plain function a ``py_func`` that is itself, as pytensor's test suite does for its
    pure-python evaluation; pmfast's linker uses it while it converts a graph with the jit disabled.
    """

    def mark(fn):
        if not hasattr(fn, "py_func"):
            fn.py_func = fn
        return fn

    def plain(*args, **kwargs):
        if args and callable(args[0]):
            return mark(numba_njit(*args, **kwargs))
        decorate = numba_njit(*args, **kwargs)
        return lambda fn: mark(decorate(fn))

    return plain


def _numpy_dtype(typ):
    """A numpy dtype from a numba type, a numpy dtype or a numpy scalar type."""
    from numba.core import types

    if isinstance(typ, types.NumberClass):
        typ = typ.dtype
    return np.dtype(str(typ)) if isinstance(typ, types.Type) else np.dtype(typ)


def _direct_cast_py(val, typ):
    return _numpy_dtype(typ).type(val)


def _tuple_setitem_py(tup, idx, val):
    return (*tup[:idx], val, *tup[idx + 1 :])


_helpers: list = []


def python_helpers() -> None:
    """With ``NUMBA_DISABLE_JIT=1``: pytensor's intrinsics that its node functions call at run time
    (``direct_cast``, ``tuple_setitem``) given Python versions, in pytensor's module (once).

    The same intrinsics for numba (typing and code generation are theirs, :func:`with_python`); in
    such a process nothing is compiled anyway. pytensor's own test suite replaces them the same way
    for its pure-python evaluation.
    """
    if _helpers:
        return
    from pytensor.link.numba.dispatch import basic

    for name, py in (("direct_cast", _direct_cast_py), ("tuple_setitem", _tuple_setitem_py)):
        current = getattr(basic, name)
        if isinstance(current, _Intrinsic) and not isinstance(current, Intrinsic):
            setattr(basic, name, with_python(current, py))
    _helpers.append(True)
