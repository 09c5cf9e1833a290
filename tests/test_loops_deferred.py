"""Deferred kernel calls (pmfast/loops/deferred.py): typed by prediction, compiled in a forked
worker (or here), linked into the caller when its library is finalised."""

from __future__ import annotations

import os
import uuid

import numba
import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba.core import types

import pmfast.loops.dispatch as dispatch
from pmfast.compiler import cache, parallel
from pmfast.loops import deferred, worker
from pmfast.loops.chunked import kernel_returns
from pmfast.loops.op import IndexedElemwise
from pmfast.loops.spec import ALL, ANY, INC, SET, STORE, SUM, Gather, IndexedLoop, Read, Write
from pmfast.mode import get_mode
from pmfast.vmath.ops import VmathExp

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _composite():
    """``(exp(a) * b, exp(a) > b)`` with pmfast.vmath's exp: a body the chunked form runs."""
    a, b = ps.float64("a"), ps.float64("b")
    e = VmathExp(ps.upgrade_to_float, name="vmath_exp")(a)
    return ps.Composite([a, b], [e * b, e > b])


#: write kinds of output 0 (float64) and output 1 (bool); ``inc``/``set`` scatter into input 3
#: through the index array input 2
FLOAT_WRITES = {
    SUM: (Write(0, SUM), pt.dscalar),
    STORE: (Write(0, STORE), pt.dvector),
    INC: (Write(0, INC, buffer=3, axes=(Gather(2),)), pt.dvector),
    SET: (Write(0, SET, buffer=3, axes=(Gather(2),)), pt.dvector),
}
BOOL_WRITES = {
    ALL: (Write(1, ALL), lambda: pt.scalar(dtype="bool")),
    ANY: (Write(1, ANY), lambda: pt.scalar(dtype="bool")),
    STORE: (Write(1, STORE), lambda: pt.vector(dtype="bool")),
}


def _node(w0: str, w1: str):
    """An IndexedElemwise over ``x[i0]`` and ``v[idx[i0]]`` with the given write kinds."""
    loop = IndexedLoop(_composite(), (Read(0), Read(1, (Gather(2),))), (FLOAT_WRITES[w0][0], BOOL_WRITES[w1][0]))
    op = IndexedElemwise(loop, [FLOAT_WRITES[w0][1]().type, BOOL_WRITES[w1][1]().type])
    inputs = [pt.dvector("x"), pt.dvector("v"), pt.lvector("idx"), pt.dvector("buf")][: loop.n_inputs]
    return inputs, op.make_node(*inputs)


def _data(n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(size=n), rng.normal(size=m), rng.integers(0, m, n), rng.normal(size=m)


def _compiled(w0, w1):
    inputs, node = _node(w0, w1)
    return pytensor.function(inputs, node.outputs, mode=get_mode("none")), node


def _args(node, n, seed):
    return _data(n, 7, seed)[: len(node.inputs)]


def _reference(node, args):
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, [np.copy(a) for a in args], storage)
    return [s[0] for s in storage]


def _kernel(node) -> deferred.Deferred:
    fn = dispatch.numba_funcify_IndexedElemwise(node.op, node)[0]
    kernel = fn.py_func.__globals__["indexed_elemwise_loop_kernel"]
    assert isinstance(kernel, deferred.Deferred)
    return kernel


@SETTINGS
@given(st.sampled_from(sorted(FLOAT_WRITES)), st.sampled_from(sorted(BOOL_WRITES)), st.sampled_from([0, 1, 255, 700]), st.integers(0, 2**16))
def test_predicted_return_type_holds_for_every_write(w0, w1, n, seed):
    fn, node = _compiled(w0, w1)
    assert dispatch.loop_form(node.op.loop, node)[0] == "chunked"
    args = _args(node, n, seed)
    for got, want in zip(fn(*args), _reference(node, args)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    # the loop function compiled afresh (the pytensor function may have come from the cache)
    loop_fn = dispatch.numba_funcify_IndexedElemwise(node.op, node)[0]
    loop_fn.compile(tuple(numba.typeof(a) for a in args))
    kernel = loop_fn.py_func.__globals__["indexed_elemwise_loop_kernel"]
    returns = kernel_returns(node.op.loop, [o.type.dtype for o in node.outputs])
    assert [str(t) for t in (kernel.restype if returns else [kernel.restype])] == (returns or ["int64"])
    compiled = list(kernel.dispatcher.overloads.values())
    assert compiled and all(c.signature.return_type == kernel.restype for c in compiled)


@pytest.fixture
def direct(monkeypatch):
    """Compile the loops with the kernel's dispatcher called directly (the reference)."""

    def compile_direct(w0, w1):
        monkeypatch.setattr(dispatch, "DEFERRED", False)
        try:
            return _compiled(w0, w1)[0]
        finally:
            monkeypatch.setattr(dispatch, "DEFERRED", True)

    return compile_direct


@pytest.mark.parametrize("w0, w1", [(SUM, ALL), (INC, ANY), (STORE, STORE)])
def test_deferred_call_gives_the_direct_calls_values(w0, w1, direct):
    fast, node = _compiled(w0, w1)
    assert isinstance(_kernel(node), deferred.Deferred)
    ref = direct(w0, w1)
    args = _args(node, 1000, 5)
    for got, want in zip(fast(*args), ref(*args)):
        np.testing.assert_array_equal(got, want)


def _spy_forks(monkeypatch):
    monkeypatch.setattr(worker, "spare_core", lambda: True)  # fork whatever the machine's load
    forks = []
    fork = parallel.fork

    def spy(fn):
        child = fork(fn)
        forks.append(child)
        return child

    monkeypatch.setattr(parallel, "fork", spy)
    return forks


def _fresh_kernel(restype=None, name="k"):
    """A cached ``sum(x[r0:r1])`` kernel under a fresh key, called through a Deferred."""
    src = f"def {name}(r0, r1, x):\n    s = np.float64(0)\n    for i in range(r0, r1):\n        s += np.float64(x[i])\n    return (np.float64(s),)\n"
    env = {"np": np, "__name__": __name__}
    exec(compile(src, "<string>", "exec"), env)
    key = f"pmfast_test_deferred_{uuid.uuid4().hex}"
    cache.register(env[name], key)
    dispatcher = numba.njit(env[name], cache=True, no_cpython_wrapper=True)
    deferred.install()
    return deferred.Deferred(dispatcher, key, restype or types.UniTuple(types.float64, 1))


def test_two_argument_types_resolve_separately(monkeypatch):
    forks = _spy_forks(monkeypatch)
    k = _fresh_kernel()

    @numba.njit
    def caller(a, b):
        return k(0, a.size, a)[0] + 2 * k(0, b.size, b)[0]

    a, b = np.arange(5.0), np.arange(7, dtype=np.float32)
    assert caller(a, b) == a.sum() + 2 * b.astype(float).sum()
    assert len(k.dispatcher.overloads) == 2
    names = {k.placeholder(sig) for sig in k.dispatcher.overloads}
    assert len(names) == 2 and names == {k.placeholder(sig) for sig in list(k.dispatcher.overloads)}
    if parallel.enabled():
        assert len([c for c in forks if c is not None]) == 1  # one worker for both
    assert worker.Worker.current is None


def test_without_fork_the_kernel_compiles_here(monkeypatch):
    monkeypatch.setenv("PMFAST_PARALLEL_COMPILE", "0")
    forks = _spy_forks(monkeypatch)
    k = _fresh_kernel()

    @numba.njit
    def caller(a):
        return k(1, a.size, a)[0]

    assert caller(np.arange(6.0)) == 15.0
    assert forks == [None] or not forks


def test_a_failed_worker_leads_to_a_compile_here(monkeypatch):
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(parallel, "enabled", lambda: True)  # earlier tests may leave threads running

    def fail(r, w, registry):
        raise RuntimeError("worker fails")

    monkeypatch.setattr(worker, "_serve", fail)
    forks = _spy_forks(monkeypatch)
    k = _fresh_kernel()

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    assert caller(np.arange(4.0)) == 6.0
    assert forks and forks[0] is not None and forks[0].status is not None and forks[0].status != 0


def test_a_wrong_prediction_is_an_error():
    k = _fresh_kernel(restype=types.UniTuple(types.float32, 1))

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    with pytest.raises(Exception, match="predicted"):
        caller(np.arange(4.0))


def test_the_placeholder_name_is_deterministic():
    k = _fresh_kernel()
    sig = (types.int64, types.int64, types.float64[::1])
    assert k.placeholder(sig) == k.placeholder(tuple(sig))
    assert k.placeholder(sig) != k.placeholder((types.int64, types.int64, types.float32[::1]))
    assert k.placeholder(sig).startswith("_pmfast_deferred_")


def test_an_unresolved_placeholder_fails_clearly():
    stub = deferred._Unresolved()
    with pytest.raises(RuntimeError, match="resolve"):
        stub._get_module_for_linking()


def test_the_forwarder_fallback_links_the_same_call(monkeypatch):
    """If the caller's module already declared the kernel's symbol, the placeholder is defined as an
    always-inlined call of it instead of renamed (the linked path, ``PMFAST_DEFERRED_LINK=1``)."""
    monkeypatch.setenv("PMFAST_DEFERRED_LINK", "1")
    monkeypatch.setattr(deferred, "_has_function", lambda module, name: True)
    k = _fresh_kernel()

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    assert caller(np.arange(5.0)) == 10.0


def _defines(library, name: str) -> bool:
    return any(fn.name == name and not fn.is_declaration for fn in library._final_module.functions)


@pytest.mark.parametrize("link", ["0", "1"])
def test_the_callee_is_called_by_symbol_unless_linked(monkeypatch, link):
    """By default the caller declares the placeholder (defined process-wide as the callee's address)
    and holds none of the callee's code; ``PMFAST_DEFERRED_LINK=1`` links the callee as before."""
    monkeypatch.setenv("PMFAST_DEFERRED_LINK", link)
    monkeypatch.setenv("PMFAST_PARALLEL_COMPILE", "0")
    k = _fresh_kernel()

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    assert caller(np.arange(5.0)) == 10.0
    library = next(iter(caller.overloads.values())).library
    (sig,) = list(k.dispatcher.overloads)
    kernel = k.dispatcher.overloads[sig].fndesc.mangled_name
    name = k.placeholder(sig)
    declared = {fn.name for fn in library._final_module.functions if fn.is_declaration}
    if link == "1":  # linked (and maybe inlined): nothing left to resolve
        assert name not in declared and kernel not in declared
        assert not any(isinstance(f, deferred.External) for f in library._reload_init)
    else:
        assert not _defines(library, kernel)
        assert name in declared
        assert deferred.External(k, sig) in library._reload_init


_CACHED_CALLER = """
import sys
import numba, numpy as np
from numba.core import types
from pmfast.compiler import cache
from pmfast.loops import deferred

def kernel(r0, r1, x):
    s = np.float64(0)
    for i in range(r0, r1):
        s += np.float64(x[i]) * 2
    return (np.float64(s),)

cache.register(kernel, sys.argv[1])
deferred.install()
k = deferred.Deferred(numba.njit(kernel, cache=True, no_cpython_wrapper=True), sys.argv[1], types.UniTuple(types.float64, 1))

@numba.njit(cache=True)
def caller(a):
    return k(0, a.size, a)[0] + 1.0

print(caller(np.arange(6.0)), caller.stats.cache_hits.get(caller.signatures[0], 0) if caller.signatures else 0,
      len(k.dispatcher.overloads))
"""


def test_a_cached_caller_defines_its_callee_when_loaded(tmp_path):
    """A caller loaded from numba's cache in a fresh process (its callee not compiled there yet)
    defines the placeholder before its code is linked: the callee is loaded from its own cache."""
    import subprocess
    import sys

    script = tmp_path / "cached_caller.py"
    script.write_text(_CACHED_CALLER)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PMFAST_PARALLEL_COMPILE": "0", "PMFAST_DEFERRED_LINK": "0"}
    key = f"pmfast_test_deferred_{uuid.uuid4().hex}"
    runs = [subprocess.run([sys.executable, str(script), key], env=env, capture_output=True, text=True, cwd=tmp_path) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    first, second = (r.stdout.split() for r in runs)
    assert first[0] == second[0] == "31.0"
    assert first[1] == "0" and second[1] == "1"  # compiled, then loaded from the cache
    assert second[2] == "1"  # the callee was loaded (by the caller's reload) before the caller ran


def test_spare_core_reads_the_runnable_tasks(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open

    def fake(running):
        def open_(path, *a, **k):
            if path == "/proc/loadavg":
                p = tmp_path / "loadavg"
                p.write_text(f"0.5 0.5 0.5 {running}/90 123\n")
                return real_open(p, *a, **k)
            return real_open(path, *a, **k)

        return open_

    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(builtins, "open", fake(1))
    assert worker.spare_core()  # this process alone
    monkeypatch.setattr(builtins, "open", fake(2))
    assert not worker.spare_core()  # another task busy on the other core


def _zoo_model(name):
    from pmfast import models

    sizes = {"wide_additive": {"n": 12}, "hier_var": {"n_groups": 1}, "bradley_terry_np": {"n_matches": 5000}, "irt_2pl_np": {"n_persons": 60}}
    return models.load(name)(**sizes.get(name, {}))


def _zoo_names():
    from pmfast import models

    return sorted(models.ZOO)


@pytest.mark.slow
@pytest.mark.parametrize("name", _zoo_names())
def test_every_zoo_kernel_returns_what_was_predicted(name):
    """Each chunked loop of each zoo model, its loop function compiled afresh: the kernel (compiled
    or loaded from the cache) is checked against the prediction at resolution (TypeError)."""
    import pmfast

    fast, x0 = pmfast.logp_dlogp_function(_zoo_model(name), passes="all")
    nodes = [n for n in fast.maker.fgraph.toposort() if isinstance(n.op, IndexedElemwise)]
    chunked = [n for n in nodes if dispatch.loop_form(n.op.loop, n)[0] == "chunked"]
    if not chunked:
        pytest.skip("no chunked loop")
    from pytensor.compile.sharedvalue import SharedVariable

    point = [v for v in fast.maker.fgraph.inputs if not isinstance(v, SharedVariable)]
    assert len(point) == 1  # the point; the shared data come with their values
    wanted = [i for n in chunked for i in n.inputs]
    flat = pytensor.function(point, wanted, mode="FAST_COMPILE", on_unused_input="ignore", accept_inplace=True)(x0)
    k = 0
    for node in chunked:
        these = flat[k : k + len(node.inputs)]
        k += len(node.inputs)
        loop_fn = dispatch.numba_funcify_IndexedElemwise(node.op, node)[0]
        loop_fn.compile(tuple(numba.typeof(np.asarray(v)) for v in these))
        # the loop's kernel, or its blocks' kernels (pmfast.loops.blocks)
        kernels = [v for v in loop_fn.py_func.__globals__.values() if isinstance(v, deferred.Deferred)]
        assert kernels
        for kernel in kernels:
            assert all(c.signature.return_type == kernel.restype for c in kernel.dispatcher.overloads.values())


def _handover_with(monkeypatch, busy: float, first):
    """Run ``first`` in this process while a handover worker (pmfast.compiler.handover.share) takes one
    job that keeps it busy ``busy`` seconds; returns the forks made (the spy's list)."""
    import time

    from pmfast.compiler import handover

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    monkeypatch.setattr(parallel, "enabled", lambda: True)  # earlier tests may leave threads running
    forks = _spy_forks(monkeypatch)
    idle = numba.njit(lambda x: x)
    shared = handover.share([handover.Job(1, idle, (types.float64,), lambda: time.sleep(busy))], first=first)
    assert shared is not None and handover.sharing()
    shared.finish()
    assert not handover.sharing() and worker.Worker.current is None
    return forks


def test_the_handover_worker_takes_deferred_compiles(monkeypatch):
    """While a handover worker shares the compile, a typed deferred call is sent to it, not to a third
    process; compiled there, this process loads it from numba's cache."""
    import time

    k = _fresh_kernel()
    sig = (types.int64, types.int64, types.float64[::1])

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    def first():
        k.request(sig)
        time.sleep(1.0)  # the idle worker takes it meanwhile
        assert caller(np.arange(5.0)) == 10.0

    forks = _handover_with(monkeypatch, 0.0, first)
    assert len(forks) == 1  # the handover worker only
    assert k.dispatcher.stats.cache_hits[sig] == 1 and not k.dispatcher.stats.cache_misses[sig]


def test_a_busy_worker_s_deferred_compile_is_taken_back(monkeypatch):
    """A request the worker has not started when this process needs it is compiled here (claimed):
    this process does not wait for the worker's part; the worker then skips it."""
    import time

    k = _fresh_kernel()
    sig = (types.int64, types.int64, types.float64[::1])

    @numba.njit
    def caller(a):
        return k(0, a.size, a)[0]

    t0 = []

    def first():
        t0.append(time.monotonic())
        assert caller(np.arange(6.0)) == 15.0
        t0.append(time.monotonic())

    forks = _handover_with(monkeypatch, 4.0, first)
    assert len(forks) == 1
    assert k.dispatcher.stats.cache_misses[sig] == 1  # compiled here
    assert t0[1] - t0[0] < 3.5  # not after the worker's 4 s job
