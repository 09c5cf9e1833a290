"""pmfast's linear algebra destroys an input exactly where stock's numba implementation does.

An op whose ``overwrite_*`` prop is set (pytensor's inplace rewrites set it where the input is not
needed afterwards) may work in that input's memory; pytensor 2.38.3's numba code does for
``Cholesky`` on a C- or F-contiguous input, the solves on an F-contiguous right-hand side, and
``LUFactor`` on an F-contiguous input, the general ``Solve`` on a C- or F-contiguous ``a`` and an
F-contiguous ``b``. pmfast's functions must give the same values and leave each
input intact or not as stock's, for every layout (pytensor's ``tests/link/numba/test_slinalg.py``
asserts this too).
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.io import In
from pytensor.tensor.slinalg import Cholesky, CholeskySolve, LUFactor, Solve, SolveTriangular

import pmfast

#: name: (op builder from the overwrite flag, b_ndim or 0 for a one-input op[, the destroyable input: the last one])
OPS = {
    "cholesky_lower": (lambda ow: Cholesky(lower=True, overwrite_a=ow), 0),
    "cholesky_upper": (lambda ow: Cholesky(lower=False, overwrite_a=ow), 0),
    "solve_triangular_2": (lambda ow: SolveTriangular(lower=True, b_ndim=2, overwrite_b=ow), 2),
    "solve_triangular_upper_unit_2": (lambda ow: SolveTriangular(lower=False, unit_diagonal=True, b_ndim=2, overwrite_b=ow), 2),
    "solve_triangular_1": (lambda ow: SolveTriangular(lower=False, b_ndim=1, overwrite_b=ow), 1),
    "cho_solve_2": (lambda ow: CholeskySolve(lower=True, b_ndim=2, overwrite_b=ow), 2),
    "cho_solve_upper_2": (lambda ow: CholeskySolve(lower=False, b_ndim=2, overwrite_b=ow), 2),
    "cho_solve_1": (lambda ow: CholeskySolve(lower=True, b_ndim=1, overwrite_b=ow), 1),
    "lu_factor": (lambda ow: LUFactor(overwrite_a=ow), 0),
    "solve_a_2": (lambda ow: Solve(assume_a="gen", b_ndim=2, overwrite_a=ow), 2, 0),
    "solve_b_2": (lambda ow: Solve(assume_a="gen", b_ndim=2, overwrite_b=ow), 2),
    "solve_b_1": (lambda ow: Solve(assume_a="gen", b_ndim=1, overwrite_b=ow), 1),
}


def _destroyable(name: str) -> int:
    spec = OPS[name]
    return spec[2] if len(spec) > 2 else (0 if spec[1] == 0 else 1)


@functools.lru_cache(maxsize=None)
def _functions(name: str, overwrite: bool):
    """(stock's, pmfast's) function of the op, its destroyable input marked mutable."""
    make, b_ndim = OPS[name][:2]
    op = make(overwrite)
    a = pt.matrix("a")
    if b_ndim == 0:
        ins, outs = [In(a, mutable=overwrite)], op(a)
    else:
        b = pt.matrix("b") if b_ndim == 2 else pt.vector("b")
        ins, outs = [In(a, mutable=overwrite and _destroyable(name) == 0), In(b, mutable=overwrite and _destroyable(name) == 1)], op(a, b)
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    fns = []
    for mode in ("NUMBA", pmfast.get_mode("all")):
        fn = pytensor.function(ins, outs, mode=mode, accept_inplace=True)
        (node,) = [n for n in fn.maker.fgraph.apply_nodes if type(n.op) is type(op)]
        assert node.op.destroy_map == op.destroy_map
        fns.append(fn)
    return tuple(fns)


def _layouts(x):
    """``x`` C-contiguous, F-contiguous and strided (same values)."""
    wide = np.zeros((x.shape[0], 2 * x.shape[1]) if x.ndim == 2 else 2 * x.shape[0])
    strided = wide[:, ::2] if x.ndim == 2 else wide[::2]
    strided[...] = x
    return {"C": np.array(x, order="C"), "F": np.array(x, order="F"), "strided": strided}


def _inputs(name, n, k, rng):
    b_ndim = OPS[name][1]
    s = rng.normal(size=(n, n))
    s = s @ s.T + n * np.eye(n)
    if name.startswith("cholesky"):
        return [s]
    if name == "lu_factor":
        return [rng.normal(size=(n, n)) + n * np.eye(n)]
    if name.startswith("solve_"):
        return [rng.normal(size=(n, n)) + n * np.eye(n), rng.normal(size=(n, k) if b_ndim == 2 else n)]
    lower = "upper" not in name
    a = sl.cholesky(s, lower=lower) if name.startswith("cho_solve") else (np.tril(s) if lower else np.triu(s))
    return [a, rng.normal(size=(n, k) if b_ndim == 2 else n)]


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "keep"])
@pytest.mark.parametrize("name", list(OPS))
@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 6), k=st.sampled_from([1, 3]), seed=st.integers(0, 2**16))
def test_destroys_and_computes_as_stock(name, overwrite, n, k, seed):
    stock, ours = _functions(name, overwrite)
    values = _inputs(name, n, k, np.random.default_rng(seed))
    d = _destroyable(name)
    for layout, x in _layouts(values[d]).items():
        results, destroyed = [], []
        for fn in (stock, ours):
            arg = x.copy(order="K") if layout != "strided" else _layouts(values[d])["strided"]
            out = fn(*values[:d], arg, *values[d + 1:])
            results.append([np.array(o) for o in out])
            destroyed.append(not np.array_equal(arg, values[d]))
        for got, ref in zip(results[1], results[0], strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12, err_msg=layout)
        assert destroyed[1] == destroyed[0], (layout, destroyed)
        assert not destroyed[0] or overwrite
