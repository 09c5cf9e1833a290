"""pmfast.compiler.join, .split, .raisers and int64 0-d scalars: pytensor's Join/Split values and errors, inlined."""

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import pmfast
from pmfast import compiler
from pmfast.compiler import inline, join, raisers, split

compiler.setup()


def both(inputs, outputs):
    return (
        pytensor.function(inputs, outputs, mode=pmfast.get_mode(), on_unused_input="ignore"),
        pytensor.function(inputs, outputs, mode="NUMBA", on_unused_input="ignore"),
    )


def _nodes(fn, name):
    return [n for n in fn.maker.fgraph.toposort() if type(n.op).__name__ == name]


# --- Join of vectors ---------------------------------------------------------------------------


@numba.njit
def _concat3(a, b, c):
    return join.concat_vectors((a, b, c))


@numba.njit
def _concat1(a):
    return join.concat_vectors((a,))


def test_concat_vectors_matches_numpy_for_any_layout_and_empty_pieces():
    a = np.arange(10.0)
    cases = [
        (a, a[::2], a[:0]),  # C, strided A, empty
        (a[:0], a[:0], a[:0]),
        (a[3:4], a[::-3], a[1:]),  # one element, negative stride, contiguous slice
        (a[::2][:1], a[::3][:0], a[::2]),  # strided pieces of one and no element
    ]
    for pieces in cases:
        got = _concat3(*pieces)
        np.testing.assert_array_equal(got, np.concatenate(pieces))
        assert got.flags.c_contiguous and got.dtype == np.float64
    flags = np.array([True, False, True])
    np.testing.assert_array_equal(_concat3(flags, flags[::2], flags[:0]), np.concatenate([flags, flags[::2], flags[:0]]))
    ints = np.arange(7, dtype=np.int32)
    np.testing.assert_array_equal(_concat3(ints[::3], ints, ints[:2]), np.concatenate([ints[::3], ints, ints[:2]]))


def test_concat_vectors_copies_even_one_piece():
    a = np.arange(4.0)
    out = _concat1(a)
    out[0] = 99.0
    assert a[0] == 0.0


def test_join_of_vectors_matches_stock():
    x, y, z = pt.dvector("x"), pt.dvector("y"), pt.dvector("z")
    ours, stock = both([x, y, z], [pt.concatenate([x, y[::2], z]) * 2.0, pt.concatenate([z, x], axis=-1) + 1.0])
    assert all(join.joins_vectors(n) for n in _nodes(ours, "Join"))
    rng = np.random.default_rng(0)
    for sizes in ((3, 4, 0), (0, 0, 0), (1, 7, 2)):
        args = [rng.normal(size=n) for n in sizes]
        for a, b in zip(ours(*args), stock(*args), strict=True):
            np.testing.assert_array_equal(a, b)


def test_join_declines_what_it_does_not_implement():
    x, y = pt.dvector("x"), pt.dvector("y")
    m = pt.dmatrix("m")
    axis = pt.lscalar("axis")
    declined = [
        pt.join(axis, x, y),  # runtime axis
        pt.concatenate([x, pt.lvector("k")]),  # mixed dtypes: numpy casts
        pt.join(axis, m, m),  # matrices along a runtime axis
        pt.concatenate([m, pt.lmatrix("km")]),  # matrices of mixed dtypes
        pt.concatenate([m > 0, m > 1]),  # bools
        pt.join(0, *[x] * 30),  # wider than a plain call
    ]
    for out in declined:
        node = out.owner
        assert type(node.op).__name__ == "Join"
        assert join.funcify(node.op, node) is None
    node = pt.concatenate([x, y]).owner
    assert join.funcify(node.op, node) is not None
    node = pt.concatenate([m, m], axis=-1).owner  # matrices along a constant axis: join.array_axis
    assert join.array_axis(node) == 1 and join.funcify(node.op, node) is not None


# --- Split ------------------------------------------------------------------------------------


def _numba_slice_types(x, axis):
    index = (slice(None),) * axis + (slice(1, 2),)

    @numba.njit
    def by_numba(v):
        return v[index]

    @numba.njit
    def by_intrinsic(v):
        return split.slice_axis(v, axis, 1, 2)

    return by_numba, by_intrinsic


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("layout", ["C", "F", "A"])
def test_slice_axis_is_numbas_slice(layout, axis):
    base = np.arange(24.0).reshape(4, 6)
    x = {"C": base, "F": np.asfortranarray(base), "A": base[:, ::2]}[layout]
    by_numba, by_intrinsic = _numba_slice_types(x, axis)
    want, got = by_numba(x), by_intrinsic(x)
    np.testing.assert_array_equal(got, want)
    assert by_intrinsic.nopython_signatures[0].return_type == by_numba.nopython_signatures[0].return_type
    assert np.shares_memory(got, x)


def test_split_is_inlined_and_raises_through_the_shared_raiser():
    x, sizes = pt.dvector("x"), pt.lvector("sizes")
    ours, stock = both([x, sizes], [p * 1.0 for p in pt.split(x, sizes, n_splits=2)])
    (node,) = _nodes(ours, "Split")
    fn, _ = split.funcify(node.op, node)
    assert inline.should_inline("Split", fn)
    assert fn.py_func.__globals__["_pm_fail"] is raisers.shape_fail()
    # pytensor checks for negative sizes first, then their sum
    for sizes_, message in (([5, -1], "Split sizes cannot be negative"), ([1, 1], "Split sizes sum to 2; expected 4")):
        for f in (ours, stock):
            with pytest.raises(ValueError, match=message):
                f(np.ones(4), np.array(sizes_))
    with pytest.raises(ValueError, match="Length of splits is not equal to n_splits"):  # pytensor's perform's message
        ours(np.ones(4), np.array([1, 1, 2]))
    for sizes_ in ([0, 4], [4, 0], [2, 2]):
        for a, b in zip(ours(np.arange(4.0), np.array(sizes_)), stock(np.arange(4.0), np.array(sizes_)), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_shared_raiser_raises_each_ops_error():
    from pmfast.compiler.shape_ops import SpecifyShapeError

    fail = raisers.shape_fail()
    with pytest.raises(SpecifyShapeError, match=r"SpecifyShape: dim 1 of input has shape 4, expected 3\."):
        fail(raisers.SPECIFY_SHAPE, 1, 4, 3)
    with pytest.raises(split.SplitSizeError, match="Split sizes sum to 5; expected 4"):
        fail(raisers.SPLIT, 5, 4, 0)
    with pytest.raises(ValueError, match="Split sizes cannot be negative"):
        fail(raisers.SPLIT, 5, 4, 1)


# --- an entry with all of them: a random walk's logp (Join, Split, int64 0-d values) ----------------


@pytest.fixture(scope="module")
def walk():
    import pymc as pm

    from pmfast import nutpie_glue

    rng = np.random.default_rng(0)
    with pm.Model(coords={"time": np.arange(9)}) as model:  # a data length: symbolic, as in stoch_vol
        y = pm.Data("y", rng.normal(size=9), dims="time")
        sigma = pm.Exponential("sigma", 10.0)
        s = pm.GaussianRandomWalk("s", mu=0.0, sigma=sigma, init_dist=pm.Normal.dist(0.0, 1.0), dims="time")
        pm.Normal("obs", s, 1.0, observed=y, dims="time")
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    fn, _ = pmfast.logp_dlogp_function(model, passes="all")
    return stock, x0, fn, nutpie_glue.logp_kernel(fn)


def test_walk_entry_inlines_join_and_split_and_holds_int_scalars(walk):
    from pmfast.compiler import entry, entry_spec

    _, _, fn, kernel = walk
    ops = set(_op.__class__.__name__ for _op in (n.op for n in fn.maker.fgraph.apply_nodes))
    assert {"Join", "Split"} <= ops
    spec = kernel.entry.spec
    env = {**entry_spec.graph_function(fn.vm.jit_fn).__globals__, **dict(spec.env)}
    plan = entry._inline_plan(spec, env)
    called = {name for stmt, op in zip(spec.body, spec.ops) if op in ("Join", "Split") for name in [stmt.split("= ")[1].split("(")[0]]}
    assert called and called <= set(plan)
    assert "_pm_ibuf" in kernel.entry.source  # the walk's length arithmetic is held as int64 scalars


def test_walk_entry_matches_stock(walk):
    stock, x0, _, kernel = walk
    rng = np.random.default_rng(1)
    for x in (x0, x0 + 0.3 * rng.normal(size=x0.shape)):
        ref_logp, ref_grad = stock(x)
        code, logp, grad = kernel(x)
        assert code == 0
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12 * np.abs(ref_grad).max())


def test_int64_elemwise_held_as_scalars_unless_it_computes_floats_too():
    """A mixed Composite's float outputs would take the entry's fast-math flags instead of its core's."""
    import pytensor.scalar as ps
    from pytensor.tensor.elemwise import Elemwise

    from pmfast.compiler import scalars

    xs, ns = ps.float64("x"), ps.int64("n")
    x, n = pt.dscalar("x"), pt.lscalar("n")
    ints = Elemwise(ps.Composite([ns], [ns + 1, ns * 2]))(n)[0].owner
    mixed = Elemwise(ps.Composite([xs, ns], [ns + 1, xs * 2.0]))(x, n)[0].owner
    floats = Elemwise(ps.Composite([xs, ns], [xs + ns, xs * 2.0]))(x, n)[0].owner
    assert scalars._kind(ints, None) == "elemwise"
    assert scalars._kind(floats, None) == "elemwise"
    assert scalars._kind(mixed, None) is None
