"""pmfast.compiler.scalars: an entry holds 0-d values as numba scalars, not heap-allocated 0-d arrays."""

import math

import numba
import numpy as np
import pytest

import pmfast
from pmfast import compiler, nutpie_glue
from pmfast.compiler import native, scalars

compiler.setup()


@numba.njit
def _slots(x):
    f = native.stack_buffer(3, np.float64)
    b = native.stack_buffer(2, np.bool_)
    f[0] = x
    f[1] = 2.0 * x
    b[1] = x > 1.0
    b[0] = x < 1.0
    c = native.cell(f, 0)
    c[()] = c[()] + 1.0  # writes through to the slot
    column = f[1:2]  # views live in the frame: read them here
    return f[0], column.shape[0], column[0], c.ndim, native.cell(b, 1)[()], b[0:1][0]


def test_stack_buffer_and_cell_views():
    first, length, value, ndim, above, below = _slots(1.5)
    assert (first, length, value, ndim) == (2.5, 1, 3.0, 0)
    assert above and not below


def _reference_lane_sum(x):
    """The association :func:`scalars.lane_sum_function` promises, in Python: 32 partial sums over the
    whole blocks of 32, the first 8 of them over the whole blocks of 8 left; the 4 blocks of 8 partial
    sums added lane by lane pairwise, the 8 lanes pairwise; then the rest in order."""
    n, s, i = len(x), [0.0] * 32, 0
    for width in (32, 8):
        while i + width <= n:
            for k in range(width):
                s[k] += x[i + k]
            i += width
    b = [s[k] + s[k + 8] for k in range(8)], [s[k + 16] + s[k + 24] for k in range(8)]
    lanes = [p + q for p, q in zip(*b)]
    total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    for j in range(i, n):
        total += x[j]
    return total


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 31, 32, 33, 47, 85, 1001, 4997])
def test_lane_sum_has_a_fixed_association(n):
    import numba

    from pmfast.compiler.entry import entry_fastmath

    x = np.random.default_rng(n).normal(size=n) * np.logspace(0, 6, n)
    intrinsic = scalars.lane_sum_function()
    lane_sum = numba.njit(fastmath=entry_fastmath())(lambda v: intrinsic(v))  # as the entry calls it
    got = lane_sum(x)
    assert got == _reference_lane_sum(list(x))  # bit for bit
    assert got == pytest.approx(math.fsum(x), rel=1e-13, abs=1e-12)
    assert lane_sum(x[::2]) == _reference_lane_sum(list(x[::2]))  # strided views too


def _model():
    """Scalar parameters around a gather loop; ``tau``'s positivity check is a bool 0-d value."""
    import pymc as pm

    rng = np.random.default_rng(0)
    group = rng.integers(0, 12, 200)
    x = rng.normal(size=200)
    y = 0.5 + rng.normal(size=12)[group] * 0.3 + 0.8 * x + rng.normal(size=200) * 0.5
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=12)
        beta = pm.Normal("beta", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        xd = pm.Data("x", x)
        pm.Normal("y", a[group] + beta * xd, sigma, observed=y)
    return model


def _allocations_per_call(kernel, x, calls=20):
    from numba.core.runtime import _nrt_python, rtsys

    kernel(x)
    _nrt_python.memsys_enable_stats()
    try:
        before = rtsys.get_allocation_stats().alloc
        for _ in range(calls):
            kernel(x)
        return (rtsys.get_allocation_stats().alloc - before) / calls
    finally:
        _nrt_python.memsys_disable_stats()


@pytest.fixture(scope="module")
def kernels():
    """The model's stock function and its entries built with and without scalars."""
    model = _model()
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    fn, _ = pmfast.logp_dlogp_function(model, passes="all")
    mp = pytest.MonkeyPatch()
    built = {}
    for flag in ("0", "1"):
        mp.setenv("PMFAST_ENTRY_SCALARS", flag)
        built[flag] = nutpie_glue.logp_kernel(fn)
    mp.undo()
    return stock, x0, built, fn


def test_entry_holds_scalars_and_allocates_less(kernels):
    stock, x0, built, _ = kernels
    off, on = built["0"], built["1"]
    assert not off.entry.spec.scalars and on.entry.spec.scalars
    names = {n for n, _ in on.entry.spec.env}
    # the point's scalar entries, the scalar Composites, the loop's totals, the bool check, the sums
    assert {"_pm_scalar_indexed_elemwise_loop", "_pm_lane_sum"} <= names
    assert any(n.startswith("_pm_scalar_elemwise") for n in names)
    assert "_pm_bbuf" in on.entry.source and "subtensor(" not in on.entry.source.split("_pm_at = 0")[0].replace("subtensor_", "")
    a_off, a_on = _allocations_per_call(off, x0), _allocations_per_call(on, x0)
    assert a_on <= a_off - 10, (a_off, a_on)


def test_entry_with_scalars_matches_stock(kernels):
    stock, x0, built, _ = kernels
    rng = np.random.default_rng(1)
    for x in (x0, x0 + 0.3 * rng.normal(size=x0.shape)):
        ref_logp, ref_grad = stock(x)
        for kernel in built.values():
            code, logp, grad = kernel(x)
            assert code == 0
            np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12 * np.abs(ref_grad).max())


def test_entry_scalars_only_where_node_functions_are_inlined(kernels, monkeypatch):
    """A called node function would be one more function to compile: no scalar forms then."""
    stock, x0, _, fn = kernels
    monkeypatch.setenv("PMFAST_INLINE", "0")
    kernel = nutpie_glue.logp_kernel(fn)
    assert not kernel.entry.spec.scalars
    np.testing.assert_allclose(kernel(x0)[1], stock(x0)[0], rtol=1e-12)


def _put_pieces():
    import numba

    from pmfast.compiler.entry_native import put_piece
    from pmfast.compiler.native import data_pointer

    @numba.njit
    def put(out, pieces_a, piece_b, n_out):
        at = put_piece(data_pointer(out), 0, pieces_a, n_out)
        if at < 0:
            return at
        return put_piece(data_pointer(out), at, piece_b, n_out)

    return put


def test_put_piece_copies_any_layout_and_refuses_what_does_not_fit():
    put = _put_pieces()
    a = np.arange(10.0)
    b = np.arange(6, dtype=np.int64) * 3  # converted as out[j] = b[i] would
    out = np.full(8, -1.0)
    assert put(out, a[::2], b[:3], 8) == 8
    np.testing.assert_array_equal(out, [0, 2, 4, 6, 8, 0, 3, 6])
    out = np.full(8, -1.0)
    assert put(out, a[:5], b[:4], 8) == -1  # the second piece doesn't fit: nothing of it written
    np.testing.assert_array_equal(out, [0, 1, 2, 3, 4, -1, -1, -1])
    assert put(out, a[:0], b[:0], 8) == 0


def test_store_slot_and_cell_views():
    import numba

    from pmfast.compiler.entry_native import store_cell, store_slot
    from pmfast.compiler.native import stack_buffer

    @numba.njit
    def f(x, flag):
        buf = stack_buffer(3, np.float64)
        bbuf = stack_buffer(1, np.bool_)
        s = store_slot(buf, 1, x)
        c = store_cell(buf, 2, x * 2.0)
        b = store_cell(bbuf, 0, flag)
        return s.shape[0], s[0], c.ndim, c[()], buf[1] + buf[2], b[()]

    assert f(1.5, True) == (1, 1.5, 0, 3.0, 4.5, True)
    assert not f(-2.0, False)[5]
