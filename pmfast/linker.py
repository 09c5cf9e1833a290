"""pmfast's numba linker: pmfast's op implementations, chunked wide calls, one dispatcher per cache key.

``ChunkedNumbaLinker`` (every pmfast mode with a pass selected) is pytensor's
``NumbaLinker`` with four changes to code generation, all active only while
it converts a graph, and two to how the
graph function is compiled (see :meth:`ChunkedNumbaLinker.jit_compile`: it is
the final function itself, with no ``*args`` wrapper around it; and for big
graphs :func:`_lean_compiler` frees the lowering's garbage before LLVM
codegen, the peak of the compile):

* **pmfast's op implementations** (dispatched by :mod:`pmfast.compiler.ops`: Elemwise,
  DimShuffle, vector-shaped Dot, SpecifyShape) instead of pytensor's, for
  what they cost to compile; generated from source with only globals, numba
  caches them without pytensor's ``*args`` wrapper; and the scalar ``Psi``
  (pytensor's calls scipy through a function pointer: never cached). Every
  cache key this linker writes ends with :func:`compile_salt`.
* **Chunked calls.** CPython 3.11 compiles a call or tuple display with more
  than 30 items as ``BUILD_LIST`` + ``LIST_APPEND``… + ``CALL_FUNCTION_EX``, which
  numba lowers as a chain of one-element tuple concatenations (O(n²) IR). Every
  Python source that pytensor generates for numba (the graph function of
  ``fgraph_to_python`` — one call line per node —, Composite inner graphs, the
  Scan / OpFromGraph inner functions, op templates) is parsed, and each call
  with more than :data:`MAX_ARITY` positional arguments becomes
  ``f(*((a0, …, a23) + (a24, …) + …))`` and each such tuple display the same
  sum of ≤ :data:`CHUNK`-item tuples: ⌈n/24⌉ concatenations instead of n. This
  is the safety net for nodes that can't be split (Scan, wide Composites that
  must stay whole, wide graph outputs). Sources that need no chunking are
  left byte-identical. Cache keys of converted functions whose source was
  chunked get a ``_pmfast_chunked<N>`` suffix, so stock and chunked code never
  share numba cache entries.
* **One dispatcher per cache key.** pytensor creates a fresh numba dispatcher
  for every node, so sibling nodes with the same op and types (the chunks of a
  split Add, the per-variable pieces of a wide model) each go through numba's
  on-disk cache. Within one conversion, nodes whose (cacheable) key is equal
  and the same input and output types get the same dispatcher: numba's cache
  serves a (key, signature) pair the same compiled code anyway, so this changes
  nothing but the repeated cache loads and call-site typing.
* **Big graph functions are compiled ``optnone``** (numba's ``_dbg_optnone``:
  LLVM ``optnone noinline`` on that one function), from
  :data:`OPTNONE_MIN_NODES` nodes on. The graph function is a straight line
  of one call per node; with optimisation on, LLVM inlines node kernels into
  it and re-optimises the result, which costs compile time growing with the
  graph (−12 % compile CPU on the wide model at n=40). The kernels themselves
  stay fully optimised; the unoptimised glue costs per call (7.3 → 8.7 µs on
  a 7 µs, ~100-node model in one measurement), which is why small graphs
  (µs-scale evals) keep the stock behaviour. Its
  cache key gets a ``_pmfast_optnone<N>`` suffix. This is pytensor's function
  path only: the C-ABI entry nutpie calls for such a graph is optimised
  (:data:`pmfast.compiler.entry.BIG_ENTRY_INLINE_THRESHOLD`; an ``optnone``
  entry made hier_var's 1,900 node calls 1.47× stock).

The patches are applied to pytensor's module globals for the duration of
``fgraph_convert`` (and restored afterwards); compiling with another mode in
another thread at the same moment would see them too (the generated code is
equivalent; only its cache key differs).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import sys
import threading
import types

from pytensor.link.numba.linker import NumbaLinker

from pmfast.compiler.arity import MAX_ARITY
from pmfast.compiler.salt import compile_salt  # noqa: F401  (re-exported: pmfast.linker.compile_salt)

#: Items per chunk.
CHUNK = 24
#: Graph functions with at least this many nodes are compiled ``optnone``:
#: LLVM work on them grows with the graph, while the per-call cost of the
#: unoptimised glue only matters next to µs-scale kernels.
OPTNONE_MIN_NODES = 800
#: Cache-key suffix version: bump when the transformation changes.
VERSION = "1"

_lock = threading.RLock()


class _Chunker(ast.NodeTransformer):
    def __init__(self):
        self.changed = 0

    @staticmethod
    def _concat(elts):
        parts = [ast.Tuple(elts=list(elts[i : i + CHUNK]), ctx=ast.Load()) for i in range(0, len(elts), CHUNK)]
        expr = parts[0]
        for p in parts[1:]:
            expr = ast.BinOp(left=expr, op=ast.Add(), right=p)
        return expr

    def visit_Call(self, node):
        self.generic_visit(node)
        if len(node.args) > MAX_ARITY and not any(isinstance(a, ast.Starred) for a in node.args):
            node.args = [ast.Starred(value=self._concat(node.args), ctx=ast.Load())]
            self.changed += 1
        return node

    def visit_Tuple(self, node):
        self.generic_visit(node)
        if (
            isinstance(node.ctx, ast.Load)
            and len(node.elts) > MAX_ARITY
            and not any(isinstance(e, ast.Starred) for e in node.elts)
        ):
            self.changed += 1
            return self._concat(node.elts)
        return node


def chunk_source(src: str) -> tuple[str, int]:
    """``src`` with every call / tuple display of > MAX_ARITY items chunked; and how many were.

    A source with fewer than MAX_ARITY commas has no such site (n items take n - 1 commas)
    and is returned without being parsed: most node sources are a few lines.
    """
    if src.count(",") < MAX_ARITY:
        return src, 0
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src, 0
    chunker = _Chunker()
    tree = chunker.visit(tree)
    if not chunker.changed:
        return src, 0
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), chunker.changed



def call_args(call: ast.Call) -> list[ast.expr] | None:
    """A call's positional arguments, also when :func:`chunk_source` chunked them (``f(*((a, b) + (c,)))``)."""
    if not any(isinstance(a, ast.Starred) for a in call.args):
        return list(call.args)
    if len(call.args) != 1:
        return None
    out, todo = [], [call.args[0].value]
    while todo:
        e = todo.pop()
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            todo += [e.right, e.left]
        elif isinstance(e, ast.Tuple):
            out += e.elts
        else:
            return None
    return out

class _State:
    def __init__(self):
        self.chunked = 0  # number of chunked sources so far in this conversion
        self.dispatchers: dict = {}
        self.deduped = 0


def _salt(key, chunked: bool):
    if key is None:
        return key
    key = f"{key}_{compile_salt()}"
    return f"{key}_pmfast_chunked{VERSION}" if chunked else key


@contextlib.contextmanager
def _patched(state: _State, dedup: bool = True, optnone_fgraph=None):
    """Patch pytensor's source compilers / key functions in every module that imported them."""
    import numba
    import pytensor.link.numba.dispatch  # noqa: F401  (all dispatchers registered before we patch)
    import pytensor.link.utils as link_utils
    from pytensor import config
    from pytensor.link.numba import cache as nb_cache
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
    from pytensor.link.numba.dispatch import basic as nb_basic

    from pmfast.compiler import pure

    orig_cfs = link_utils.compile_function_src
    orig_cnfs = nb_cache.compile_numba_function_src
    orig_key = nb_basic.numba_funcify_and_cache_key
    orig_ensure = nb_basic.numba_funcify_ensure_cache

    def rewritten(src, global_env):
        """``(source, calls chunked)``: ``src`` with its wide calls chunked and numpy's constructors as intrinsics."""
        from pmfast.compiler import arrays

        new, n = chunk_source(src)
        state.chunked += n
        return arrays.rewrite_source(new, global_env), n

    def compile_function_src(src, function_name, global_env=None, local_env=None):
        new, _ = rewritten(src, global_env)
        return orig_cfs(new, function_name, global_env, local_env)

    def compile_numba_function_src(src, function_name, global_env=None, local_env=None, write_to_disk=False, cache_key=None):
        new, n = rewritten(src, global_env)
        return orig_cnfs(new, function_name, global_env, local_env, write_to_disk, _salt(cache_key, n > 0) if n else cache_key)

    def numba_funcify_and_cache_key(op, *args, **kwargs):
        from pmfast.compiler import ops

        before = state.chunked
        ours = ops.funcify_and_cache_key(op, kwargs.get("node"))
        if ours is None:
            ours = ops.scalar_funcify_and_cache_key(op, kwargs.get("node"))
        fn, key = ours if ours is not None else orig_key(op, *args, **kwargs)
        key = _salt(key, state.chunked > before)
        if optnone_fgraph is not None and op is optnone_fgraph:
            # the graph function is straight-line calls: don't let LLVM inline
            # every node's kernel into it and re-optimise the result
            fn = nb_basic.numba_njit(fn.py_func, _dbg_optnone=True)
            key = None if key is None else f"{key}_pmfast_optnone{VERSION}"
        return fn, key

    def numba_funcify_ensure_cache(op, *args, **kwargs):
        from pytensor.graph.fg import FunctionGraph

        from pmfast.compiler import node_direct, ops

        node = kwargs.get("node")
        ours = ops.funcify_and_cache_key(op, node) if config.numba__cache else None
        if ours is not None and ours[1] is not None:
            # generated from source with globals only: numba caches it as is (no *args wrapper)
            fn, key = ours
            key = _salt(key, False)
            CACHED_SRC_FUNCTIONS[fn.py_func] = f"{key}_fastmath{int(config.numba__fastmath)}"
            fn = nb_basic.numba_njit(fn.py_func, cache=True)
        else:
            fn, key = orig_ensure(op, *args, **kwargs)
            if key is not None and node_direct.enabled() and not isinstance(op, FunctionGraph):
                # the function pytensor's *args forwarder calls, cached as it is
                fn, key = node_direct.unwrap(fn, key, bool(config.numba__fastmath)) or (fn, key)
        if not dedup or key is None or node is None:
            return fn, key
        # numba's cache is keyed by (key, signature): some keys leave the arity
        # or types to the signature (MakeVector's is its dtype only), so ours
        # includes the node's input and output types.
        full = (
            key,
            bool(config.numba__fastmath),
            tuple(i.type for i in node.inputs),
            tuple(o.type for o in node.outputs),
        )
        if full in state.dispatchers:
            state.deduped += 1
            return state.dispatchers[full], key
        state.dispatchers[full] = fn
        return fn, key

    # keep singledispatch's attributes (``register``, ``dispatch``…) reachable,
    # in case a dispatcher module is imported (and registers) mid-conversion
    for wrapper, orig in (
        (numba_funcify_and_cache_key, orig_key),
        (numba_funcify_ensure_cache, orig_ensure),
        (compile_function_src, orig_cfs),
        (compile_numba_function_src, orig_cnfs),
    ):
        functools.update_wrapper(wrapper, orig)

    replacements = {
        id(orig_cfs): compile_function_src,
        id(orig_cnfs): compile_numba_function_src,
        id(orig_key): numba_funcify_and_cache_key,
        id(orig_ensure): numba_funcify_ensure_cache,
    }
    originals = {id(o): o for o in (orig_cfs, orig_cnfs, orig_key, orig_ensure)}
    attrs = ["compile_function_src", "compile_numba_function_src", "numba_funcify_and_cache_key", "numba_funcify_ensure_cache"]
    if numba.config.DISABLE_JIT:  # plain functions that pytensor can use as its own (pmfast.compiler.pure)
        pure.python_helpers()
        replacements[id(nb_basic.numba_njit)] = pure.plain_njit(nb_basic.numba_njit)
        originals[id(nb_basic.numba_njit)] = nb_basic.numba_njit
        attrs.append("numba_njit")
    patched: list[tuple[object, str, object]] = []
    with _lock:
        try:
            for name, mod in list(sys.modules.items()):
                if mod is None or not name.startswith(("pytensor.link", "pytensor.tensor.random", "pytensor.scan")):
                    continue
                for attr in attrs:
                    obj = getattr(mod, attr, None)
                    if obj is not None and id(obj) in replacements and obj is originals[id(obj)]:
                        setattr(mod, attr, replacements[id(obj)])
                        patched.append((mod, attr, obj))
            yield state
        finally:
            for mod, attr, obj in reversed(patched):
                setattr(mod, attr, obj)


def _with_stable_filename(py_func):
    """A copy of ``py_func`` whose code claims the file ``<string>``.

    ``fgraph_to_python`` compiles the graph function from a temporary file with
    a random name, and numba names cache files after the source file: the graph
    function itself would never be found in the cache by another process (the
    stock wrapper, compiled from ``<string>``, is). The cache entry is told
    apart by the key (pytensor's locator), as for every generated function.
    """
    code = py_func.__code__.replace(co_filename="<string>")
    new = types.FunctionType(code, py_func.__globals__, py_func.__name__, py_func.__defaults__, py_func.__closure__)
    new.__qualname__ = py_func.__qualname__
    new.__kwdefaults__ = py_func.__kwdefaults__
    if hasattr(py_func, "__source__"):
        new.__source__ = py_func.__source__
    return new


def _lean_compiler():
    """The numba compiler class of a big graph's function: its library frees the lowering's garbage first.

    numba lowers a function to LLVM IR through Python objects that form reference
    cycles; finalising the graph function (linking every kernel, optimising,
    emitting machine code) is where the peak memory of the whole compile is
    reached (:mod:`pmfast.compiler.library`, option ``release``). Used only for the
    final function of big graphs; the pipeline is otherwise numba's default.
    """
    from pmfast.compiler import library

    return library.compiler(release=True)


def _in_scope(dispatcher):
    """``dispatcher`` whose compiles (the lazy one on first call included) run in pmfast's compile scope.

    Not a dispatcher (pytensor's tests evaluate numba functions as pure Python with ``numba_njit``
    mocked to return the function itself): returned as it is, there is nothing to compile.
    """
    from pmfast.compiler.patching import compiling

    compile_ = getattr(dispatcher, "compile", None)
    if compile_ is None:
        return dispatcher

    def compile(sig):
        with compiling():
            return compile_(sig)

    dispatcher.compile = compile
    return dispatcher


class ChunkedNumbaLinker(NumbaLinker):
    """``NumbaLinker`` whose generated code never passes more than 30 items in one call or tuple display."""

    def __init__(
        self, *args, dedup: bool = True, optnone: bool = True, direct: bool = True, lean: bool = True, **kwargs
    ):
        from pmfast.compiler import symbols

        super().__init__(*args, **kwargs)
        symbols.install()  # its check acts inside make_all's compile scope
        self.dedup = dedup
        self.lean = lean
        self.optnone = optnone
        self.direct = direct
        self.stats: dict[str, int] = {}

    def make_all(self, *args, **kwargs):
        """pytensor's ``make_all`` inside pmfast's compile scope (:func:`pmfast.compiler.patching.compiling`),
        where code calling a symbol numba's JIT cannot resolve is a Python error, not an LLVM abort
        (:func:`pmfast.compiler.symbols.install`, done when the linker is made)."""
        from pmfast.compiler.patching import compiling

        with compiling():
            return super().make_all(*args, **kwargs)

    def fgraph_convert(self, fgraph, **kwargs):
        from pytensor import config
        from pytensor.link.numba.dispatch import basic as nb_basic

        from pmfast.compiler import node_dedup

        state = _State()
        big = len(fgraph.apply_nodes) >= OPTNONE_MIN_NODES
        patched = _patched(state, dedup=self.dedup, optnone_fgraph=fgraph if self.optnone and big else None)
        with patched, node_dedup.scope(self.optnone and big):
            if not self.direct:
                out = super().fgraph_convert(fgraph, **kwargs)
            elif config.numba__cache:
                # the patched key function (module attribute looked up now)
                out = nb_basic.numba_funcify_and_cache_key(fgraph, **kwargs)
            else:
                out = nb_basic.numba_funcify(fgraph, **kwargs), None
        self.stats = {"chunked_sites": state.chunked, "shared_dispatchers": state.deduped}
        return out

    def jit_compile(self, fn_and_cache):
        """The graph function itself is the final function (stock: a ``*args`` wrapper that calls it).

        Stock pytensor wraps the graph function in ``def f(*args): return
        jitable_func(*args)`` for its cache and compiles that wrapper as the
        final function. numba then finalises two libraries that each contain
        the whole program: the graph function's (all node kernels linked in,
        optimised, machine code emitted) and the wrapper's (the same module
        linked in again, re-optimised, machine code emitted again). Compiling
        the graph function directly as the final function does that once. It
        is cached under its own key (the graph's key, salted) through
        pytensor's cache locator, like the wrapper was.
        """
        if not self.direct:
            return super().jit_compile(fn_and_cache)
        from pytensor import config
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
        from pytensor.link.numba.dispatch.basic import numba_njit

        fn, key = fn_and_cache
        py_func = fn.py_func
        if key is not None:
            py_func = _with_stable_filename(py_func)
        options = {}
        if getattr(fn, "targetoptions", {}).get("_dbg_optnone"):
            # a big graph (see fgraph_convert): unoptimised, and lean on memory
            options["_dbg_optnone"] = True
            if self.lean:
                options["pipeline_class"] = _lean_compiler()
        if key is not None:
            CACHED_SRC_FUNCTIONS[py_func] = f"{key}_fastmath{int(config.numba__fastmath)}_pmfast_direct{VERSION}"
        return _in_scope(numba_njit(py_func, final_function=True, cache=key is not None, **options))
