"""The numba implementation of :class:`~pmfast.loops.op.IndexedElemwise`: its loop source
(:mod:`pmfast.loops.codegen`, :mod:`pmfast.loops.chunked`, the scalar body of
:mod:`pmfast.loops.body`) compiled and registered with ``register_funcify_and_cache_key``, and
the codegen switches it reads (``LAZY_SWITCH``, ``CHUNKED``; ``VERSION`` in every cache key).
"""

from __future__ import annotations

import logging
import os
from hashlib import sha256

import numpy as np

from pmfast.loops import blocks as loop_blocks
from pmfast.loops import threads as loop_threads
from pmfast.loops.body import BODY_VERSION, is_vmath, op_body, vectorizable
from pmfast.loops.chunked import CHUNKED_VERSION, chunkable, generate_chunked, kernel_returns, threadable
from pmfast.loops.codegen import generate_source, source_key
from pmfast.loops.op import IndexedElemwise

_log = logging.getLogger(__name__)

#: Part of every cache key of the generated numba code.
VERSION = "indexed_elemwise-2"

#: Evaluate the scalar Composite's Switch branches lazily when a branch owns an
#: expensive op (``pmfast.loops.body.scalar_body``); stock numba evaluates
#: both. Switch off to measure without it.
LAZY_SWITCH = True

#: Run 1-d loops whose body vectorizes (branch-free arithmetic and pmfast.vmath's kernels) in
#: the chunked form (:mod:`pmfast.loops.chunked`). Switch off to measure without it.
CHUNKED = True

#: Compile a chunked loop's kernel apart from its caller (:mod:`pmfast.loops.deferred`: on the
#: other core, linked into the caller at the end). Switch off to call the kernel's dispatcher.
DEFERRED = os.environ.get("PMFAST_DEFERRED_KERNELS", "1") != "0"


def will_vectorize(scalar_op) -> bool:
    """Will a loop over ``scalar_op`` run in the chunked, vectorized form
    (:func:`pmfast.loops.body.vectorizable`): branch-free arithmetic and pmfast.vmath ops only, at
    least one of the latter (``vector_math``, 49.3, has run when the reduction loops are built)?"""
    if not CHUNKED:
        return False
    from pmfast.loops.body import VECTOR_SAFE_OPS, _scalar_op_name, body_ops, is_vmath

    ops = body_ops(scalar_op)
    if not all(_scalar_op_name(op) in VECTOR_SAFE_OPS or is_vmath(op) for op in ops):
        return False
    return any(is_vmath(op) for op in ops)


#: Run a gather-free 1-d Elemwise whose body calls a scalar math function (libm's ``exp``,
#: ``log1p``, ``gammaln``...) as a loop too (:func:`calls_math`). Switch off to measure without it.
MATH_LOOPS = True


def calls_math(scalar_op) -> bool:
    """Does ``scalar_op``'s body call a scalar math function: an op that is neither branch-free
    arithmetic (:data:`~pmfast.loops.body.VECTOR_SAFE_OPS`), a pmfast.vmath kernel, nor an integer
    division that may raise?

    Such a body pays as a fused loop even where it does not vectorize: pytensor's Elemwise
    (stock's and pmfast's lowering alike) calls its scalar core once per element through a call
    LLVM does not inline, and every register is spilled around the math calls inside it; the loop
    splices the body into its own code (lazy Switches, the ``Sum`` of an output accumulated in
    place). hier_logistic's Bernoulli term with libm: the entry 1.17× → 0.94× the hand loop.
    """
    if not MATH_LOOPS:
        return False
    from pmfast.loops.body import MAY_RAISE, VECTOR_SAFE_OPS, _scalar_op_name, body_ops, is_vmath

    names = {_scalar_op_name(op) for op in body_ops(scalar_op) if not is_vmath(op)}
    return not names & MAY_RAISE and bool(names - VECTOR_SAFE_OPS)


try:
    from pmfast import __version__ as pmfast_version
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.basic import (
        numba_funcify_and_cache_key,
        numba_funcify_ensure_cache,
        register_funcify_and_cache_key,
    )
    import numba
    from pytensor import config
    from pytensor.scalar.basic import get_scalar_type

    import pmfast.vmath  # noqa: F401  (its kernels jitted now, never during a conversion with numba's jit replaced)
    from pmfast.compiler.arrays import VERSION as arrays_version
    from pmfast.compiler.pure import jit_off
    from pmfast.compiler.arrays import rewrite_source  # numpy's constructors without numba's generic code
    from pmfast.loops.stack import stack_array

    def vmath_version() -> str:
        from pmfast.vmath import VERSION as vmath_key

        return vmath_key

    def _node_fn(node, vector: bool):
        """A scalar node's numba function: pmfast.vmath's kernel itself (the cache wrapper
        pytensor puts around it is a call LLVM does not inline) in a vectorized loop, libm (the
        stock op it subclasses) in a scalar one, where the kernels are slower."""
        op = node.op
        if is_vmath(op):
            from pmfast.vmath import KERNELS
            from pmfast.vmath.ops import SUBSTITUTES

            if vector and not jit_off():  # jit off: the kernels (jitted on import) can't run as Python
                return KERNELS[op.kernel]
            stock = next(b for b in type(op).__mro__ if b in SUBSTITUTES)
            op = stock(op.output_types_preference, name=op.name)
        return numba_funcify_ensure_cache(op, node=node)[0]

    def loop_body(loop, node, vector: bool = False):
        """The loop's scalar body as statements (:func:`pmfast.loops.body.op_body`) and their
        globals. ``vector``: for the chunked form (every Switch a select)."""
        in_types = [get_scalar_type(dtype=node.inputs[r.array].type.dtype) for r in loop.reads]
        nout = getattr(loop.scalar_op, "nout", 1)
        outs = [f"o{k}" for k in range(nout)]
        body = op_body(loop.scalar_op, in_types, outs, lazy=LAZY_SWITCH and not vector)
        return body, body.env(lambda n: _node_fn(n, vector))

    def loop_form(loop, node):
        """``("chunked", body, env)`` when the loop can run vectorized, else ``("plain", body, env)``."""
        if CHUNKED and chunkable(loop):
            body, env = loop_body(loop, node, vector=True)
            if vectorizable(body):
                return "chunked", body, env
        body, env = loop_body(loop, node)
        return "plain", body, env

    @register_funcify_and_cache_key(IndexedElemwise)
    def numba_funcify_IndexedElemwise(op, node, **kwargs):
        loop = op.loop
        scalar_inputs = [get_scalar_type(dtype=node.inputs[r.array].type.dtype)() for r in loop.reads]
        scalar_node = loop.scalar_op.make_node(*scalar_inputs)
        scalar_fn, scalar_key = numba_funcify_and_cache_key(loop.scalar_op, node=scalar_node, **kwargs)
        env = {"np": np, "scalar_fn": scalar_fn, "stack_array": stack_array}
        form, body = "stock", None
        try:
            form, body, body_env = loop_form(loop, node)
            env.update(body_env)
        except Exception:  # never fail compilation: call the stock scalar function
            _log.debug("indexed_elemwise: inline scalar body declined", exc_info=True)
            form, body = "stock", None
        in_dtypes = [i.type.dtype for i in node.inputs]
        out_dtypes = [o.type.dtype for o in node.outputs]
        name = "indexed_elemwise_loop"
        # The loops are compiled without fast-math flags: measured on the seed, pytensor's
        # default set (contract/afn/arcp/nsz...) slows the gather/scatter loop by ~25%, and IEEE
        # order keeps scatters and sums deterministic. The scalar functions keep their own flags.
        threads = 1
        # a kernel compiled in another process exists only for compiled code (not under pytensor's
        # pure-python evaluation or NUMBA_DISABLE_JIT, where every function is plain Python)
        deferrable = DEFERRED and config.numba__cache and not jit_off()
        blocked = None
        if form == "chunked":
            body_dtypes = [o.type.dtype for o in scalar_node.outputs]
            threads = loop_threads.THREADS if threadable(loop) else 1
            if threads == 1 and deferrable and scalar_key is not None and loop_blocks.ENABLED:
                try:
                    blocked = _blocked(loop, node, in_dtypes, out_dtypes, name)
                except Exception:  # never fail compilation: the fused kernel
                    _log.debug("indexed_elemwise: block split declined", exc_info=True)
            if blocked is not None:
                entry_src, kernels = blocked
                src = entry_src + "".join(k[1] for k in kernels.values())
            else:
                sources = generate_chunked(loop, in_dtypes, out_dtypes, body, body_dtypes, name, threads)
                src = "".join(fsrc for _, fsrc in sources)
        else:
            src = generate_source(loop, in_dtypes, out_dtypes, func_name=name, body=body)
        if scalar_key is None:
            key = None
        else:
            from pmfast.loops.deferred import call_slots_enabled

            call_slots = call_slots_enabled()
            key = sha256(
                str(
                    (
                        "pmfast",
                        pmfast_version,
                        VERSION,
                        "IndexedElemwise",
                        source_key(loop, in_dtypes, out_dtypes),
                        sha256(src.encode()).hexdigest(),  # a codegen change never reuses a stale loop
                        tuple(str(t) for t in op.out_types),
                        scalar_key,
                        (form, BODY_VERSION, LAZY_SWITCH, CHUNKED_VERSION, vmath_version(), threads, arrays_version, DEFERRED, call_slots),
                        *((("blocks", loop_blocks.BLOCKS_VERSION, tuple(kernels)),) if blocked is not None else ()),
                    )
                ).encode()
            ).hexdigest()
        if blocked is not None:
            for bkey, (kname, ksrc, kenv, returns) in kernels.items():
                f = compile_numba_function_src(rewrite_source(ksrc, kenv), f"{BLOCK_KERNEL}_kernel", kenv, write_to_disk=True)
                env[kname] = _deferred_kernel(f, bkey, ksrc, returns)
            fn = compile_numba_function_src(rewrite_source(entry_src, env), name, env, write_to_disk=True)
        elif form == "chunked":
            env["prange"] = numba.prange
            for fname, fsrc in sources[:-1]:
                flags = {"parallel": True} if fname.endswith("_blocks") else {}
                if fname.endswith("_kernel") and threads == 1 and key is not None and deferrable:
                    # globals of its own, named after a module: numba can rebuild its environment
                    # from the cache in another process
                    kenv = {**env, "__name__": __name__}
                    f = compile_numba_function_src(rewrite_source(fsrc, kenv), fname, kenv, write_to_disk=True)
                    env[fname] = _deferred_kernel(f, key, fsrc, kernel_returns(loop, out_dtypes))
                    continue
                f = compile_numba_function_src(rewrite_source(fsrc, env), fname, env, write_to_disk=True)
                env[fname] = numba_basic.numba_njit(f, fastmath=False, error_model="numpy", **flags)
            fn = compile_numba_function_src(rewrite_source(sources[-1][1], env), name, env, write_to_disk=True)
        else:
            fn = compile_numba_function_src(rewrite_source(src, env), name, env, write_to_disk=True)
        jitted = numba_basic.numba_njit(fn, fastmath=False)
        return jitted, key

    #: the block kernels' function name (:mod:`pmfast.loops.blocks`)
    BLOCK_KERNEL = "indexed_elemwise_block"

    def _blocked(loop, node, in_dtypes, out_dtypes, name):
        """The block split of a chunked loop (:mod:`pmfast.loops.blocks`): ``(loop function source,
        {block key: (global name, kernel source, kernel globals, kernel returns)})``, or None when
        no block repeats (or a block has no cache key)."""
        from types import SimpleNamespace

        parts = loop_blocks.split(loop)
        if not parts:
            return None
        kernels: dict = {}
        names = []
        for block, sub in parts:
            sub_in = [in_dtypes[p] for p in block.positions]
            sub_out = [out_dtypes[k] for k in block.writes]
            sc_inputs = [get_scalar_type(dtype=sub_in[r.array])() for r in block.loop.reads]
            snode = sub.make_node(*sc_inputs)
            _, skey = numba_funcify_and_cache_key(sub, node=snode)
            if skey is None:
                return None
            body, benv = loop_body(block.loop, SimpleNamespace(inputs=[node.inputs[p] for p in block.positions]), vector=True)
            body_dtypes = [o.type.dtype for o in snode.outputs]
            ksrc = generate_chunked(block.loop, sub_in, sub_out, body, body_dtypes, BLOCK_KERNEL, 1)[0][1]
            bkey = sha256(
                repr(
                    ("pmfast", pmfast_version, VERSION, loop_blocks.BLOCKS_VERSION, ksrc, skey, tuple(sub_in), tuple(sub_out),
                     BODY_VERSION, CHUNKED_VERSION, vmath_version(), arrays_version)
                ).encode()
            ).hexdigest()
            if bkey not in kernels:
                kenv = {"np": np, "stack_array": stack_array, **benv, "__name__": __name__}
                kernels[bkey] = (f"{name}_b{len(kernels)}", ksrc, kenv, loop_blocks.returns(block, out_dtypes))
            names.append(kernels[bkey][0])
        if len(parts) < 2 or len(kernels) == len(parts):
            return None  # nothing repeats: the fused kernel compiles no more than the blocks would
        entry = loop_blocks.generate_entry(loop, in_dtypes, out_dtypes, [b for b, _ in parts], names, name)
        return entry, kernels

    def _deferred_kernel(py_func, loop_key: str, kernel_src: str, returns: list[str]):
        """The chunked kernel, cached under a key of its own (the worker hands it over through
        numba's cache), called through a :class:`~pmfast.loops.deferred.Deferred`: compiled in a
        forked worker while the caller compiles, linked into the caller when its library is
        finalised."""
        from numba.core import types

        from pmfast.compiler import cache
        from pmfast.linker import _with_stable_filename, compile_salt
        from pmfast.loops import deferred

        deferred.install()
        # numba names cache files after the source file: the generated source's temporary file
        # would give every process other files (found by the worker's parent only)
        py_func = _with_stable_filename(py_func)
        key = sha256(repr((loop_key, kernel_src, "fastmath=False", "error_model=numpy")).encode()).hexdigest()
        key = f"pmfast_kernel_{key}_{compile_salt()}"
        cache.register(py_func, key)
        dispatcher = numba_basic.numba_njit(py_func, fastmath=False, error_model="numpy", cache=True)
        restype = types.BaseTuple.from_types([numba.from_dtype(np.dtype(dt)) for dt in returns]) if returns else types.int64
        return deferred.Deferred(dispatcher, key, restype)

except ImportError:  # pragma: no cover - numba backend unavailable
    _log.debug("numba dispatch for IndexedElemwise not registered", exc_info=True)
