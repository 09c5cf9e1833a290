"""``VmathElemwise``: an Elemwise whose scalar body calls pmfast.vmath, lowered so that LLVM vectorizes it.

Stock lowering (pytensor's ``_vectorized`` intrinsic) calls ``store_core_outputs``,
which calls the scalar body (a Composite function), which calls the kernels.
The kernels are ``alwaysinline``, so the body function grows by their size,
and LLVM's size threshold then keeps the body (or ``store_core_outputs``) out of
the loop: the loop makes a call per element and never vectorizes (measured:
``softplus`` over a vector 15 ns/element, the same kernel inlined 1.9 ns).
This lowering is the stock one with the store function and the scalar body
built by :func:`inlined_body`: every function of the chain compiled
``forceinline=True`` (LLVM ``alwaysinline``), so the loop holds the whole body.
Values are those of the stock lowering of the same scalar op (same scalar
functions, same fastmath flags): only inlining differs.

Why not the stock Composite function: pytensor wraps each inner node's function
in a disk-cached ``*args`` forwarder whose flags numba inherits from whichever
caller compiled it first (the cache key has no flags), so whether it is
inlined would depend on the order things were compiled in.
"""

from __future__ import annotations

import math
import os
from hashlib import sha256
from textwrap import indent

import numpy as np
from pytensor.tensor.elemwise import Elemwise

from pmfast.vmath import VERSION
from pmfast.vmath.ops import NAN_MARKED, kernels, libm_scalar_op

#: Part of the numba cache key; bump when this lowering changes.
LOWERING_VERSION = 12
#: The two departures from stock's lowering (switchable to measure each: bench/vmath_graphs.py).
INLINE_BODY = True
CONTIGUOUS_INPUTS = True
#: ndim >= 2 loops whose last axis is shorter than this run flattened (see :func:`_impl_source`)
FLAT_BELOW = 16
#: kernel -> loops over fewer elements than this run stock's libm loop instead, if the body calls
#: that kernel (decided at run time when the size is not static; ``vector_math`` declines nodes whose
#: static size is below it). LLVM widens the vmath loop 8 doubles at a time; the n mod 8 elements
#: left run in its scalar remainder, where an inlined erf is twice libm's cost (22 vs 12 ns), so
#: a short erf loop loses (31 elements: erf 1.11x, erfc 1.42x stock). The other kernels win from
#: 4 elements on (0.5-0.85x): stock's loop calls its body per element. Measured by
#: bench/vmath_crossover.py (docs/vmath.md); an empty dict: always the vmath loop. gammaln and
#: digamma cost ~45 ns one element at a time against libm's ~9 ns (vectorized ~5): a 30-element
#: Poisson loop was 1.17x, 40 elements 0.53x, 64 elements 0.52x, whatever n mod 8 (2026-12-06).
LIBM_BELOW = {"erf": 32, "erfc": 32, "gammaln": 64, "digamma": 64}


def libm_below(scalar_op) -> float:
    """Below how many elements a loop of ``scalar_op`` (a vmath body) is faster with libm (:data:`LIBM_BELOW`).

    Infinite for a body that calls such a kernel but cannot vectorize (:func:`vectorizable`): its
    loop runs one element at a time at any length.
    """
    below = max((LIBM_BELOW.get(k, 0) for k in kernels(scalar_op)), default=0)
    return below if vectorizable(scalar_op) else math.inf


def _vectorizable_ops() -> tuple[type, ...]:
    import pytensor.scalar.basic as ps

    names = ("Add", "Sub", "Mul", "TrueDiv", "Neg", "Abs", "Sqr", "Sqrt", "Reciprocal", "Maximum", "Minimum",
             "Switch", "LT", "GT", "LE", "GE", "EQ", "NEQ", "AND", "OR", "XOR", "Invert", "Cast", "Identity",
             "Second", "Sign", "Floor", "Ceil", "Trunc", "IsNan", "IsInf", "Clip")
    return tuple(getattr(ps, n) for n in names if hasattr(ps, n))


def vectorizable(scalar_op) -> bool:
    """Whether a loop of ``scalar_op`` can vectorize: its body (a Composite's inner graph, recursively)
    is arithmetic, comparisons, selects, casts, LLVM intrinsics that widen (sqrt, floor...) and vmath
    kernels only. Any other op (``arctan``, ``gammaln``, ``pow``, ``psi``...) is a libm or scipy call
    per element, which keeps LLVM from widening the loop."""
    from pytensor.scalar.basic import Composite

    from pmfast.vmath.ops import VmathOp

    if isinstance(scalar_op, Composite):
        return all(vectorizable(n.op) for n in scalar_op.fgraph.apply_nodes)
    return isinstance(scalar_op, (VmathOp, *_vectorizable_ops()))


class VmathElemwise(Elemwise):
    """An Elemwise with a pmfast.vmath scalar body, lowered with the body inlined into the loop."""


def inlined_body(scalar_op, node, **kwargs):
    """``(njit function, cache key)`` computing ``scalar_op`` (at scalar ``node``) with every function inlined.

    A Composite becomes one function over its inner graph, compiled
    ``forceinline=True`` with pytensor's fastmath flags, calling each inner
    node's numba function directly (nested Composites recursively); any other
    op is its stock numba function (the vmath kernels are ``forceinline``
    already). The key is pytensor's key of ``scalar_op`` tagged with this lowering.
    """
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, numba_typify
    from pytensor.link.utils import fgraph_to_python
    from pytensor.scalar.basic import Composite

    kwargs.pop("storage_map", None)
    fn, key = numba_funcify_and_cache_key(scalar_op, node=node, **kwargs)
    if not isinstance(scalar_op, Composite):
        return fn, key
    ir_inline = body_ir_inline()

    def convert(op, node=None, **kw):
        fn = inlined_body(op, node)[0]
        return _ir_version(fn) if ir_inline and not isinstance(op, Composite) else fn

    py_func = fgraph_to_python(
        scalar_op.fgraph,
        op_conversion_fn=convert,
        type_conversion_fn=lambda value, **kw: numba_typify(value, **kw),
        fgraph_name="vmath_body",
        squeeze_output=True,
    )
    body = numba_basic.numba_njit(py_func, forceinline=True)
    return body, None if key is None else sha256(str(("inlined", LOWERING_VERSION, key, ir_inline)).encode()).hexdigest()


def body_ir_inline() -> bool:
    """Whether a Composite's body inlines pytensor's scalar functions at numba's IR level
    (``PMFAST_VMATH_BODY_IR=0``: each called, compiled on its own; part of the body's key).

    Called, each (``mul``, ``add``, ``clip``…; one per signature) was a numba function compiled in
    every process, whose LLVM module the body linked and inlined (``forceinline``) anyway: 0.3-0.8 CPU s
    of a Gaussian process's cold compile, twice when the expand entry's bodies compiled them again in
    the worker. Inlined at numba's IR level they are typed and lowered as part of the body, with the
    body's flags, which are theirs (pytensor's fast-math flags; a function compiled without them keeps
    being called: :func:`pmfast.compiler.inline.scalar_inline_version`). pmfast.vmath's kernels stay
    called: jitted on import and cached per machine.
    """
    return os.environ.get("PMFAST_VMATH_BODY_IR", "1") != "0"


def _ir_version(fn):
    """``fn`` (a scalar op's numba function) as an ``inline="always"`` copy, unless it is pmfast's own or can't be."""
    from pmfast.compiler import inline

    inner = inline.inner_function(fn)
    if inner is None or getattr(inner.py_func, "__module__", "").startswith("pmfast."):
        return fn
    return inline.scalar_inline_version(fn) or fn


def _inlined_store(core_fn, nin: int, nout: int):
    """``store(i0, ..., o0, ...)``: ``o_k[...] = core_fn(i...)[k]``, compiled ``forceinline``."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch import basic as numba_basic

    ins = ", ".join(f"i{k}" for k in range(nin))
    outs = ", ".join(f"o{k}" for k in range(nout))
    tmps = ", ".join(f"t{k}" for k in range(nout))
    stores = "\n".join(f"o{k}[...] = t{k}" for k in range(nout))
    src = f"def store({ins}, {outs}):\n    {tmps} = core_fn({ins})\n{indent(stores, '    ')}\n"
    fn = compile_numba_function_src(src, "store", {"core_fn": core_fn})
    return numba_basic.numba_njit(fn, forceinline=True)


def _impl_source(node, contiguous: bool, flat_below: int, libm_below: int = 0, nan_fallback: bool = False,
                 layouts=None) -> str:
    """Source of ``impl(i0, i1, ...)``, the loop: pytensor's ``_vectorized`` on the inputs.

    A plain function of the node's inputs (no ``*args``, no overload), so pmfast's entries inline it
    (:mod:`pmfast.compiler.inline`) and numba compiles no function of its own for it. With
    ``layouts`` (numba's layout of each input; ``PMFAST_VMATH_PLAIN=0``), the source of the overload
    used before: ``impl(*inputs)``, only inputs not typed C-contiguous through ``ascontiguous1``, and
    broadcast inputs of a flat loop copied by ``np.ascontiguousarray(np.broadcast_to(a, shape))``.

    ``nan_fallback``: the body calls a kernel of :data:`~pmfast.vmath.ops.NAN_MARKED` (sin, cos:
    NaN beyond their range). When an output of the vectorized loop holds a NaN, ``impl`` returns
    stock's loop on the inputs instead (libm's values for the whole node). Both loops then write
    fresh outputs (``inplace_enc`` is empty), so the inputs are intact for the second one.

    ``libm_below``: when the output has fewer elements than this at run time, ``impl`` returns
    stock's loop (``libm_store``, the libm scalar body, on the inputs as given): stock's values
    exactly. Only emitted when the output's size is not static.

    ``contiguous``: every input of one or more axes goes through
    :func:`pmfast.compiler.arrays.ascontiguous1` (``np.ascontiguousarray``: the array itself when
    numba types it C-contiguous or it is at run time, else a copy), so the loop addresses them by
    shape, not by runtime strides, and LLVM vectorizes it (a strided 'A'-layout input, e.g.
    ``Squeeze(Dot)`` or ``x[:, 0]``, keeps it scalar). 0-d inputs stay as they are.

    ``flat_below``: for ndim >= 2, when the last axis is shorter than this (an ordinal
    model's (n, 4) cut-point differences, a (n, 1) column), the inputs are broadcast to
    the full shape and the loop runs over them flattened: the innermost loop is the one
    LLVM widens, and 4 elements do not fill a vector. Decided when compiling if the last
    axis has a static length, else at run time (two loops compiled). Inputs that span
    the whole shape are reshaped (a view); each other one is copied into a new C array of the
    full shape by a loop nest reading index 0 along its broadcastable axes (what
    ``np.ascontiguousarray(np.broadcast_to(a, shape))`` gives: those axes have static length 1, and
    the others were checked equal to the shape).

    numba compiles a generic overload as a function of its own, per signature, in every process
    (it caches user functions, not overloads): the source calls none (``np.broadcast_to``, its
    shape checks and ``np.ascontiguousarray`` were ~0.5-1 CPU s of an ordinal model's cold compile).
    """
    nin, nout = len(node.inputs), len(node.outputs)
    ndim = node.outputs[0].type.ndim
    names = [f"i{k}" for k in range(nin)] if layouts is None else [f"inputs[{k}]" for k in range(nin)]
    lines = [f"def impl({', '.join(names) if layouts is None else '*inputs'}):"]
    loop = "_vectorized({}, {}, {}, dtypes_enc, inplace_enc, True, (), ({}), core_shapes, None)"
    raw = "".join(f"{n}, " for n in names)
    outs = ["r"] if nout == 1 else [f"r[{o}]" for o in range(nout)]
    nan_check = [f"if {' or '.join(f'_has_nan({o})' for o in outs)}:",
                 f"    return {loop.format('libm_store', 'in_bc_enc', 'out_bc_enc', raw)}"] if nan_fallback else []
    if libm_below and ndim and None in node.outputs[0].type.shape:
        sizes = []
        for d in range(ndim):
            srcs = [k for k, i in enumerate(node.inputs) if not i.type.broadcastable[d]]
            if srcs:  # every non-broadcastable input has the output's length (no runtime broadcasting)
                sizes.append(f"{names[srcs[0]]}.shape[{d}]")
        lines += [f"    if {' * '.join(sizes) or '1'} < {int(libm_below)}:",
                  f"        return {loop.format('libm_store', 'in_bc_enc', 'out_bc_enc', raw)}"]
    loop = loop.format("store", "{}", "{}", "{}")
    for k, i in enumerate(node.inputs):
        wrap = contiguous and i.type.ndim and (layouts is None or layouts[k] != "C")
        lines.append(f"    a{k} = _pm_asc({names[k]})" if wrap else f"    a{k} = {names[k]}")
    args = "".join(f"a{k}, " for k in range(nin))
    last = node.outputs[0].type.shape[-1] if ndim else None
    flat = ndim >= 2 and flat_below and (last is None or last < flat_below)
    if flat:
        dims, checks = [], []
        for d in range(ndim):
            srcs = [k for k, i in enumerate(node.inputs) if not i.type.broadcastable[d]]
            dims.append(f"a{srcs[0]}.shape[{d}]" if srcs else "1")
            for k in srcs[1:]:  # no runtime broadcasting (stock's loop refuses it too)
                checks += [f"if a{k}.shape[{d}] != shape[{d}]:",
                           "    raise ValueError('Vectorized inputs have incompatible shapes')"]
        body = [f"shape = ({', '.join(dims)},)", *checks, f"size = {' * '.join(f'shape[{d}]' for d in range(ndim))}"]
        out_shape = node.outputs[0].type.shape

        def flat_arg(k, i):
            whole = i.type.ndim == ndim and all(not b or out_shape[d] == 1 for d, b in enumerate(i.type.broadcastable))
            if whole:
                return [], f"a{k}.reshape(size), "
            if layouts is not None:
                return [], f"np.ascontiguousarray(np.broadcast_to(a{k}, shape)).reshape(size), "
            # a copy of the full shape, read at 0 along the broadcastable axes (row-major, flat)
            fill = [f"b{k} = _pm_empty(size, _pm_dt{k})", "p = 0"]
            fill += ["    " * d + f"for j{d} in range(shape[{d}]):" for d in range(ndim)]
            item = ", ".join("0" if b else f"j{d}" for d, b in enumerate(i.type.broadcastable))
            fill += ["    " * ndim + f"b{k}[p] = a{k}[{item}]", "    " * ndim + "p += 1"]
            return fill, f"b{k}, "

        flat_args = ""
        for k, i in enumerate(node.inputs):
            fill, arg = flat_arg(k, i)
            body += fill
            flat_args += arg
        body.append(f"r = {loop.format('flat_bc_enc', 'flat_out_bc_enc', flat_args)}")
        body += nan_check
        body.append("return r.reshape(shape)" if nout == 1 else
                    f"return ({''.join(f'r[{o}].reshape(shape), ' for o in range(nout))})")
        if last is None:  # decided at run time: two loops compiled
            lines.append(f"    if {dims[-1]} < {flat_below}:")
            lines += [f"        {ln}" for ln in body]
        else:  # a static last axis decides now: one loop
            lines += [f"    {ln}" for ln in body]
    if not flat or last is None:
        if nan_check:
            lines.append(f"    r = {loop.format('in_bc_enc', 'out_bc_enc', args)}")
            lines += [f"    {ln}" for ln in nan_check] + ["    return r"]
        else:
            lines.append(f"    return {loop.format('in_bc_enc', 'out_bc_enc', args)}")
    return "\n".join(lines) + "\n"


def has_nan(a):
    """Whether the C-contiguous array ``a`` holds a NaN (an or-reduction LLVM widens)."""
    flat = a.reshape(a.size)
    found = False
    for i in range(flat.size):
        found |= flat[i] != flat[i]
    return found


_HAS_NAN = []


def _has_nan():
    """:func:`has_nan` jitted (IEEE comparisons: no ``nnan`` flag), once per process."""
    if not _HAS_NAN:
        from pytensor.link.numba.dispatch import basic as numba_basic

        _HAS_NAN.append(numba_basic.numba_njit(has_nan, fastmath=False, cache=True))
    return _HAS_NAN[0]


def _register_numba() -> None:
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    register_funcify_and_cache_key(VmathElemwise)(funcify)


def funcify(op, node, **kwargs):
    """``(numba function, cache key)`` of a ``VmathElemwise`` node: the loop of :func:`_impl_source`."""
    from numba.core.extending import overload
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, numba_njit
    from pytensor.link.numba.dispatch.vectorize_codegen import _vectorized, encode_literals, store_core_outputs
    from pytensor.scalar.basic import get_scalar_type

    from pmfast.compiler import arrays
    from pmfast.compiler.pure import jit_off

    scalar_node = op.scalar_op.make_node(*[get_scalar_type(dtype=i.type.dtype)() for i in node.inputs])
    nin, nout = len(node.inputs), len(node.outputs)
    inline, contiguous_inputs, below = INLINE_BODY, CONTIGUOUS_INPUTS, libm_below(op.scalar_op)
    nan_fallback = bool(kernels(op.scalar_op) & NAN_MARKED)
    inplace = () if nan_fallback else tuple(op.inplace_pattern.items())  # the fallback reads the inputs
    libm_op = libm_scalar_op(op.scalar_op)
    if jit_off():  # as plain Python: stock's Elemwise of the libm body (the kernels are jitted on import)
        stock = Elemwise(libm_op, inplace_pattern=op.inplace_pattern)
        return numba_funcify_and_cache_key(stock, node=stock.make_node(*node.inputs), **kwargs)
    libm_fn, libm_key = numba_funcify_and_cache_key(
        libm_op, node=libm_op.make_node(*scalar_node.inputs), **kwargs
    )  # stock's scalar body and store: stock's loop below libm_below
    if inline:
        scalar_fn, scalar_key = inlined_body(op.scalar_op, scalar_node, **kwargs)
        store = _inlined_store(scalar_fn, nin, nout)
    else:
        scalar_fn, scalar_key = numba_funcify_and_cache_key(op.scalar_op, node=scalar_node, **kwargs)
        store = store_core_outputs(scalar_fn, nin=nin, nout=nout)
    in_bc = tuple(i.type.broadcastable for i in node.inputs)
    out_bc = tuple(o.type.broadcastable for o in node.outputs)
    out_dtypes = tuple(o.type.dtype for o in node.outputs)
    in_bc_enc, out_bc_enc, dtypes_enc, inplace_enc = (
        encode_literals(v) for v in (in_bc, out_bc, out_dtypes, inplace)
    )
    core_shapes = ((),) * nout

    flat_bc_enc, flat_out_bc_enc = encode_literals(((False,),) * nin), encode_literals(((False,),) * nout)
    env = {"__name__": __name__, "np": np, "_vectorized": _vectorized, "store": store, "in_bc_enc": in_bc_enc,
           "out_bc_enc": out_bc_enc, "dtypes_enc": dtypes_enc, "inplace_enc": inplace_enc,
           "core_shapes": core_shapes, "flat_bc_enc": flat_bc_enc, "flat_out_bc_enc": flat_out_bc_enc,
           "libm_store": store_core_outputs(libm_fn, nin=nin, nout=nout), "_has_nan": _has_nan(),
           "_pm_asc": arrays.ascontiguous1, "_pm_empty": arrays.empty2,
           **{f"_pm_dt{k}": np.dtype(i.type.dtype).type for k, i in enumerate(node.inputs)}}
    flat_below = FLAT_BELOW if contiguous_inputs else 0
    plain = os.environ.get("PMFAST_VMATH_PLAIN", "1") != "0"
    if plain:
        src = _impl_source(node, contiguous_inputs, flat_below, below, nan_fallback)
        elemwise = numba_njit(compile_numba_function_src(src, "impl", env, env))
    else:
        src = "overload"

        def elemwise(*inputs):
            """Reference (Python) implementation; numba uses the overload."""
            Elemwise._check_runtime_broadcast(node, inputs)
            bc = np.broadcast_arrays(*inputs)
            outs = [np.empty(bc[0].shape, dtype=d) for d in out_dtypes]
            for idx in np.ndindex(bc[0].shape):
                vals = scalar_fn(*(a[idx] for a in bc))
                for out, v in zip(outs, vals if nout > 1 else (vals,), strict=True):
                    out[idx] = v
            return outs[0] if nout == 1 else outs

        @overload(elemwise)
        def ov_elemwise(*inputs):
            layouts = [getattr(t, "layout", None) for t in inputs]
            src = _impl_source(node, contiguous_inputs, flat_below, below, nan_fallback, layouts)
            return compile_numba_function_src(src, "impl", dict(env))

    if scalar_key is None or libm_key is None:
        return elemwise, None
    key = ("pmfast.VmathElemwise", VERSION, LOWERING_VERSION, inline, contiguous_inputs, FLAT_BELOW, below,
           libm_key, inplace, in_bc, node.outputs[0].type.shape, scalar_key, src)
    return elemwise, sha256(str(key).encode()).hexdigest()


_register_numba()
