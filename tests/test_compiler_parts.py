"""pmfast.compiler.parts and handover: a big entry cut into parts called through addresses, compiled
on two processes; the same values as the whole entry and stock, whichever process compiled a part."""

from __future__ import annotations

import ctypes
import os

import numba
import numpy as np
import pytest
from numba.core import types

import pmfast
from pmfast import nutpie_glue
from pmfast.compiler import handover, part_calls, parts
from pmfast.loading import load_model


def test_plan_cuts_where_fewest_values_cross():
    # a chain a0 -> a1 -> ... where b is read across the middle: the cut avoids crossing it
    body = ["a0 = f(x)", "b = f(a0)", "a1 = f(a0)", "a2 = f(a1, b)", "a3 = f(a2)", "a4 = f(a3)", "a5 = f(a4)", "a6 = f(a5)"]
    env = {}
    old = parts.SPLIT_MIN, parts.PART_WEIGHT
    try:
        parts.SPLIT_MIN, parts.PART_WEIGHT = 0, 4 * parts.OPAQUE_WEIGHT
        cut = parts.plan(body, env, lambda name: 1, {"a6"})
        assert cut is not None and cut.bounds[0] == 0 and cut.bounds[-1] == len(body) and len(cut.bounds) == 3
        assert cut.bounds[1] >= 4  # not between b's definition and its read
        # a value that can't cross blocks every cut it would cross
        assert parts.plan(body, env, lambda name: None if name[0] == "a" else 1, {"a6"}) is None
        assert parts.plan(body, env, lambda name: None if name in ("a2", "a3") else 1, {"a6"}).bounds[1] not in (4, 5)
        parts.SPLIT_MIN = 10**9
        assert parts.plan(body, env, lambda name: 1, {"a6"}) is None
    finally:
        parts.SPLIT_MIN, parts.PART_WEIGHT = old


def _node(x, y):
    z = x * y
    for i in range(z.shape[0]):
        z[i] += 1.0
    return z


def scalar_core(a, b):
    return a * b + 1.0


def test_weights_count_what_the_lowering_emits():
    """An inlined node function weighs LLVM_PER_BYTECODE per bytecode instruction, a called one
    CALL_WEIGHT, straight-line scalar code one per instruction, anything else OPAQUE_WEIGHT."""
    from pmfast.compiler import inline

    env = {"node": numba.njit(_node), "core": numba.njit(scalar_core)}
    body = ["a = node(x, y)", "b = core(s, t)", "c = _pm_lane_sum(a)", "d = a.sum()"]
    bc, bc_core = inline.cost(env["node"]), inline.cost(env["core"])
    assert bc > 10 and bc_core > 1
    opaque = parts.OPAQUE_WEIGHT
    assert parts.weights(body, env) == [parts.LLVM_PER_BYTECODE * bc, bc_core, opaque, opaque]
    assert parts.weights(body, env, ("core",)) == [parts.CALL_WEIGHT, bc_core, opaque, opaque]
    assert parts.weights(body, env, ()) == [parts.CALL_WEIGHT, parts.CALL_WEIGHT, opaque, opaque]


def test_canon_gives_c_contiguous_writable_arrays():
    @numba.njit
    def f(a):
        return part_calls.canon(a), part_calls.canon(a.T), part_calls.canon(a[:, ::2]), part_calls.canon(2.5)

    a = np.arange(12.0).reshape(3, 4)
    same, t, strided, s = f(a)
    assert same.ctypes.data == a.ctypes.data  # a C-contiguous array is itself
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_array_equal(strided, a[:, ::2])
    assert t.flags.c_contiguous and strided.flags.c_contiguous and s == 2.5
    assert numba.typeof(t).layout == "C"
    ro = np.arange(3.0)
    ro.flags.writeable = False

    @numba.njit
    def g(a):
        b = part_calls.canon(a)
        b[0] = 7.0
        return b

    out = g(ro)
    assert out[0] == 7.0 and ro[0] == 0.0  # a read-only array is copied


def _part(a, k):
    if k < 0:
        raise ValueError("negative k")
    return part_calls.canon(a * k), a.sum() + k


def test_call_part_through_a_table_and_errors_propagate():
    part = numba.njit(_part)
    argtypes = (types.Array(types.float64, 1, "C"), types.int64)
    part.compile(argtypes)
    cres = part.overloads[argtypes]
    table = np.array([0, cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)], dtype=np.uint64)

    @numba.njit
    def caller(table_address, a, k):
        b, s = part_calls.call_part(table_address, 1, part, (a, k))
        return b[0] + s

    a = np.arange(1.0, 4.0)
    assert caller(table.ctypes.data, a, 2) == 2.0 + 6.0 + 2
    with pytest.raises(ValueError, match="negative k"):
        caller(table.ctypes.data, a, -1)


def _handed(x):
    return np.sqrt(x) * 2.0 + 1.0


def test_handover_adopts_what_the_worker_compiled(tmp_path):
    """The forked worker compiles and writes the jobs it takes; this process adopts them (same code)."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    fns = [numba.njit(_handed) for _ in range(4)]
    sig = (types.Array(types.float64, 1, "C"),)
    todo = [handover.Job(10 - i, f, sig, lambda f=f: f.compile(sig)) for i, f in enumerate(fns)]
    worker = handover.share(todo, first=lambda: fns[0].compile(sig))
    assert worker is not None
    worker.finish()
    assert all(sig in f.overloads for f in fns)
    x = np.linspace(0.0, 2.0, 5)
    for f in fns:
        np.testing.assert_array_equal(f(x), np.sqrt(x) * 2.0 + 1.0)
    # this process compiled fns[0] first; the worker took at least one of the others
    assert worker.adopted >= 1


def test_handover_refuses_addresses_it_cannot_vouch_for():
    assert handover._where(id(object())) is None  # the heap: nothing maps it to a file
    where = handover._where(ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value)
    assert where is not None and where[0].startswith("/")


@pytest.fixture(scope="module")
def kernels():
    """radon_intercept's stock function and its logp+grad entry whole and cut into parts."""
    model, _ = load_model("radon_intercept")
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    fn, _ = pmfast.logp_dlogp_function(model, passes="all")
    mp = pytest.MonkeyPatch()
    built = {"whole": nutpie_glue.logp_kernel(fn)}
    mp.setattr(parts, "SPLIT_MIN", 0)
    mp.setattr(parts, "PART_WEIGHT", 2500)
    built["parts"] = nutpie_glue.logp_kernel(fn)
    mp.undo()
    return stock, x0, built


def test_parts_match_the_whole_entry_and_stock(kernels):
    stock, x0, built = kernels
    assert not built["whole"].entry.parts and len(built["parts"].entry.parts) >= 3
    assert "_pm_part(" in built["parts"].entry.source
    rng = np.random.default_rng(3)
    for x in (x0, x0 + 0.3 * rng.normal(size=x0.shape)):
        ref_logp, ref_grad = stock(x)
        for kernel in built.values():
            code, logp, grad = kernel(x)
            assert code == 0
            np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12 * np.abs(ref_grad).max())


def test_parts_pass_scalars_and_rebuild_views(kernels):
    """0-d values held as scalars cross as scalars; a view of a stack slot is made again where read."""
    _, _, built = kernels
    specs = [p.spec for p in built["parts"].entry.parts]
    assert any(isinstance(t, types.Float) for s in specs for t in s.argtypes)
    assert all(isinstance(t, (types.Array, types.Number, types.Boolean)) for s in specs for t in s.argtypes)
    assert all(t.layout == "C" and t.mutable for s in specs for t in s.argtypes if isinstance(t, types.Array))
    # no part takes a stack view as an argument
    assert not any(name.endswith("_pm_view") for s in specs for name in s.inputs)


def test_parts_rebuild_views_of_the_inputs(kernels):
    """A view of the point (a parameter's slice or element) is made again by each part that reads
    it, never returned by one part to another."""
    _, _, built = kernels
    specs = [p.spec for p in built["parts"].entry.parts]
    seen, repeated = set(), set()
    for s in specs:
        for stmt in set(s.body):
            (repeated if stmt in seen else seen).add(stmt)
    point = built["parts"].entry.spec.inputs[0]
    targets = {stmt.split("=")[0].strip() for stmt in repeated if point in stmt.split("=", 1)[1]}
    assert targets, "no view of the point rebuilt in a second part"
    assert not targets & {o for s in specs for o in s.outputs}
    assert not targets & {i for s in specs for i in s.inputs}


def test_parts_compiled_by_the_worker_give_the_same_bits(tmp_path):
    """One model compiled twice in fresh processes, parts handed over by a worker or compiled here."""
    import subprocess
    import sys

    script = f"""
import hashlib, numpy as np, pmfast
from pmfast.compiler import callbacks, parts
parts.SPLIT_MIN, parts.PART_WEIGHT = 0, 2500
from pmfast.loading import load_model
model, _ = load_model("radon_intercept")
cm = pmfast.compile(model)
assert len(cm.kernels[0].parts) >= 3, cm.kernels[0].parts
x = np.linspace(-1, 1, cm.n_dim)
code, logp, grad = callbacks.logp_at(cm, x)
assert code == 0
print(hashlib.sha256(np.float64(logp).tobytes() + grad.tobytes()).hexdigest(), "worker" if "numba: worker" in cm.cpu_timings else "alone")
"""
    out = {}
    for flag in ("1", "0"):
        cache = tmp_path / flag
        env = {**os.environ, "PMFAST_PARALLEL_COMPILE": flag, "NUMBA_CACHE_DIR": str(cache / "numba"), "PYTENSOR_FLAGS": f"base_compiledir={cache}", "PMFAST_FALLBACK": "0"}
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]
        out[flag] = res.stdout.split()[-2:]
    assert out["1"][1] == "worker" and out["0"][1] == "alone"
    assert out["1"][0] == out["0"][0]


def test_a_view_of_a_stack_slot_s_view_is_made_again_where_read():
    """A dimshuffle of a scalar's stack-slot view is rebuilt by the part that reads it: returned across a
    cut it pointed into the returning part's frame (lkj_mvnormal cut in two gave a wrong gradient)."""
    import pytensor.tensor as pt

    body = ["c_pm_view = _pm_store_cell(buf, 0, c)", "d = dimshuffle_1(c_pm_view)", "e = elemwise(d, x)", "g = dimshuffle_2(e)"]
    c, x = pt.dscalar("c"), pt.dvector("x")
    d = c.dimshuffle("x")
    e = d * x
    var_of = {"d": d, "e": e, "g": e.dimshuffle(0, "x")}
    makers = parts._view_makers(body)
    assert set(makers) == {"c_pm_view"}
    views = parts._input_views([parts._assign(s) for s in body], body, var_of, {"x"}, set(makers))
    assert set(views) == {"d"}  # e computes (no view), so g views a computed value: it crosses
    assert views["d"][2] == ("c_pm_view",)
