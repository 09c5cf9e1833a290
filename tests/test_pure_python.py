"""pmfast's numba code runs as plain Python, with the values of its compiled code.

Three ways numba functions run as Python: a user's ``NUMBA_DISABLE_JIT=1``; pytensor's test suite
evaluating every numba function once more with numba's jit replaced by the identity
(``compare_numba_and_py(..., eval_obj_mode=True)``); and pmfast's intrinsics called from Python
(:mod:`pmfast.compiler.pure`). Each intrinsic's Python version is checked against its compiled code
(hypothesis over shapes, dtypes, values and the errors), pmfast's op implementations under the
replaced jit against the same graph compiled, and a model's logp and gradient under
``NUMBA_DISABLE_JIT=1`` against stock.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pmfast.compiler import pure

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Intrinsics without a Python version, and why.
NO_PYTHON = {
    "pmfast.compiler.native.call_native3": "calls compiled code at an address: nothing to run as Python",
    "pmfast.compiler.native.call_native4": "calls compiled code at an address: nothing to run as Python",
    "pmfast.compiler.lapack.call": "calls LAPACK through raw pointers; pmfast's linear algebra declines when the jit is off (pytensor's runs)",
}


def _intrinsic_modules() -> list[str]:
    """pmfast's modules whose source makes intrinsics."""
    found = []
    for path in sorted((ROOT / "pmfast").rglob("*.py")):
        if "intrinsic" in path.read_text() and path.name != "pure.py":
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_every_intrinsic_has_a_python_version():
    from numba.core.extending import _Intrinsic

    seen = {}
    for name in _intrinsic_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, _Intrinsic) and getattr(value, "__module__", name) == name:
                seen[f"{name}.{attr}"] = value
    assert {"pmfast.compiler.native.dimshuffle", "pmfast.compiler.arrays.full3", "pmfast.vmath._bits.fma",
            "pmfast.compiler.entry_native.store_cell"} <= set(seen)
    foreign = [k for k, v in seen.items() if not isinstance(v, pure.Intrinsic)]
    assert not foreign, f"made by numba's intrinsic, not pmfast.compiler.pure's: {foreign}"
    missing = [k for k, v in seen.items() if v._py is None and k not in NO_PYTHON]
    assert not missing, f"intrinsics without a Python version: {missing}"


def test_intrinsic_sources_use_pure_intrinsic():
    """No module makes an intrinsic with numba's decorator (factories such as ``horner`` included)."""
    for name in _intrinsic_modules():
        tree = ast.parse((ROOT / Path(*name.split("."))).with_suffix(".py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("numba.extending", "numba.core.extending"):
                assert "intrinsic" not in {a.name for a in node.names}, name


# ---------------------------------------------------------------- intrinsics: Python vs compiled

_jitted: dict = {}


def _compiled(call: str, names: dict):
    """An njit function ``f(*args)`` returning ``call`` (literal arguments are written into ``call``)."""
    key = (call, tuple(sorted((k, id(v)) for k, v in names.items())))
    if key not in _jitted:
        n = call.count("{}")
        args = [f"a{k}" for k in range(n)]
        src = f"def f({', '.join(args)}):\n    return {call.format(*args)}\n"
        env = dict(names, np=np)
        exec(src, env)
        _jitted[key] = numba.njit(env["f"]), names  # the names kept alive: their ids stay theirs
    return _jitted[key][0]


def _python(call: str, names: dict):
    n = call.count("{}")
    env = dict(names, np=np)
    exec(f"def f({', '.join(f'a{k}' for k in range(n))}):\n    return {call.format(*(f'a{k}' for k in range(n)))}\n", env)
    return env["f"]


def _outcome(fn, args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # the error is part of the behaviour compared
        return "raised", (type(exc), str(exc))


def _same_value(a, b, views_of=()):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_value(x, y, views_of)
        return
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), (a, b)
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(b, a)
        for base in views_of:
            assert np.shares_memory(a, base) == np.shares_memory(b, base), "a view in one, a copy in the other"
        return
    assert np.asarray(a).dtype == np.asarray(b).dtype or (isinstance(a, float) and isinstance(b, float)), (a, b)
    np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def _check(call, names, args, views_of=(), values=True):
    compiled = _outcome(_compiled(call, names), args)
    python = _outcome(_python(call, names), args)
    assert compiled[0] == python[0], (compiled, python)
    if compiled[0] == "raised":
        assert compiled[1] == python[1]
    elif values:
        _same_value(compiled[1], python[1], views_of)
    else:  # uninitialised memory: type, shape and layout only
        a, b = compiled[1], python[1]
        assert (a.dtype, a.shape, a.flags.c_contiguous) == (b.dtype, b.shape, b.flags.c_contiguous)


DTYPES = ("float64", "float32", "int64", "int32", "int8", "uint8", "uint64", "bool")


@st.composite
def arrays(draw, min_dims=0, max_dims=3, dtypes=DTYPES, max_side=4):
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = np.asarray((rng.normal(size=shape) * 50).astype(dtype))
    if x.ndim and draw(st.booleans()):
        x = np.asfortranarray(x)
    if x.ndim and draw(st.booleans()):  # strided view
        x = np.repeat(x, 2, axis=0)[::2]
    return x


@st.composite
def dimshuffles(draw):
    x = draw(arrays(max_side=3))
    if x.ndim and draw(st.booleans()):  # a length-1 axis to drop
        axis = draw(st.integers(0, x.ndim - 1))
        shape = list(x.shape)
        shape[axis] = draw(st.sampled_from([1, 1, 2]))
        x = np.resize(x, shape).astype(x.dtype)
    axes = list(range(x.ndim))
    drop = draw(st.lists(st.sampled_from(axes), unique=True)) if axes else []
    kept = draw(st.permutations([a for a in axes if a not in drop]))
    order = list(kept)
    for _ in range(draw(st.integers(0, 2))):
        order.insert(draw(st.integers(0, len(order))), "x")
    spec = ",".join(map(str, order)) + "|" + ",".join(map(str, drop))
    return x, spec


@SETTINGS
@given(dimshuffles())
def test_dimshuffle(case):
    from pmfast.compiler import native

    x, spec = case
    _check(f'_f({{}}, "{spec}")', {"_f": native.dimshuffle}, (x,), views_of=(x,))


@SETTINGS
@given(st.sampled_from(DTYPES), st.integers(0, 2**32 - 1))
def test_dimshuffle_of_a_scalar(dtype, seed):
    from pmfast.compiler import native

    value = np.array(np.random.default_rng(seed).normal() * 9).astype(dtype)[()]
    _check('_f({}, "x,x|")', {"_f": native.dimshuffle}, (value,))


#: Scalars every target dtype represents (numba wraps or truncates a value out of range, numpy raises
#: or saturates: neither is a behaviour pmfast's code relies on).
SCALARS = st.one_of(
    st.integers(0, 100),
    st.floats(0, 100),
    st.booleans(),
    st.sampled_from(DTYPES).flatmap(lambda d: st.integers(0, 100).map(lambda v: np.array(v).astype(d)[()])),
)


@SETTINGS
@given(SCALARS, st.sampled_from(("float64", "float32", "int64", "int16", "uint32", "bool")))
def test_array_constructors_of_scalars(value, dtype):
    from pmfast.compiler import arrays

    names = {f"_{k}": v for k, v in arrays.NAMES.items()} | {"_dt": np.dtype(dtype).type}
    _check("__pm_asarray1({})", names, (value,))
    _check("__pm_array1({})", names, (value,))
    _check("__pm_array2({}, _dt)", names, (value,))
    _check("__pm_full3((2, 3), {}, _dt)", names, (value,))
    _check("__pm_full3(3, {}, _dt)", names, (value,))
    _check("__pm_tuple_array(({}, {}), _dt)", names, (value, value))


@SETTINGS
@given(arrays(), st.sampled_from(("float64", "int32", "bool")))
def test_array_constructors_of_arrays(x, dtype):
    from pmfast.compiler import arrays

    names = {f"_{k}": v for k, v in arrays.NAMES.items()} | {"_dt": np.dtype(dtype).type}
    _check("__pm_asarray1({})", names, (x,), views_of=(x,))
    _check("__pm_copy1({})", names, (x,), views_of=(x,))
    _check("__pm_ascontiguous1({})", names, (x,), views_of=(x,))
    _check("__pm_empty2({}.shape, _dt)", names, (x,), values=False)
    _check("__pm_empty1({}.shape)", names, (x,), values=False)


@SETTINGS
@given(st.lists(st.integers(0, 5), min_size=1, max_size=3), st.sampled_from(DTYPES))
def test_empty_and_stack_buffers(shape, dtype):
    from pmfast.compiler import native
    from pmfast.loops.stack import stack_array

    names = {"_empty": native.empty, "_buf": native.stack_buffer, "_stack": stack_array, "_dt": np.dtype(dtype).type}
    _check("_empty({}, _dt)", names, (tuple(shape),), values=False)
    _check("_empty({}, _dt)", names, (shape[0],), values=False)
    compiled = _compiled(f"_buf({shape[0]}, _dt).shape[0] + _stack({shape[0]}, _dt).shape[0]", names)()
    assert compiled == _python(f"_buf({shape[0]}, _dt).shape[0] + _stack({shape[0]}, _dt).shape[0]", names)()


@SETTINGS
@given(arrays(min_dims=1), st.data())
def test_slice_axis(x, data):
    from pmfast.compiler.split import slice_axis

    axis = data.draw(st.integers(0, x.ndim - 1))
    stop = data.draw(st.integers(0, x.shape[axis]))
    start = data.draw(st.integers(0, stop))
    _check(f"_f({{}}, {axis}, {{}}, {{}})", {"_f": slice_axis}, (x, start, stop), views_of=(x,))


@SETTINGS
@given(st.lists(arrays(min_dims=1, max_dims=1, dtypes=("float64",), max_side=6), min_size=1, max_size=4))
def test_concat_vectors(pieces):
    from pmfast.compiler.join import concat_vectors

    pieces = [p[::2] if k % 2 else p for k, p in enumerate(pieces)]  # strided pieces too
    call = "_f((" + "".join("{}, " for _ in pieces) + "))"
    _check(call, {"_f": concat_vectors}, tuple(pieces), views_of=tuple(pieces))


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from(DTYPES), st.integers(0, 2**32 - 1))
def test_reshape_cell_and_views(shape, dtype, seed):
    from pmfast.compiler import native

    x = (np.random.default_rng(seed).normal(size=int(np.prod(shape))) * 9).astype(dtype)
    names = {"_reshape": native.c_reshape, "_cell": native.cell, "_view": native.array_view, "_ptr": native.data_pointer,
             "_dt": np.dtype(dtype).type}
    _check("_reshape({}, " + str(tuple(shape)) + ")", names, (x,), views_of=(x,))
    _check("_cell({}, {})", names, (x, len(x) - 1), views_of=(x,))
    if dtype == "float64":
        _check("_view(_ptr({}), {}, _dt)", names, (x, tuple(reversed(shape))), views_of=(x,))


@SETTINGS
@given(st.integers(1, 5), st.integers(1, 5), st.sampled_from("nt"), st.booleans(), st.integers(0, 2**32 - 1))
def test_blas_dgemv(m, n, trans, fortran, seed):
    from pmfast.compiler import native

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, n))
    a = np.asfortranarray(a) if fortran else a
    # the matrix as BLAS reads it: column-major, leading dimension lda
    lda = m if fortran else n
    rows, cols = (m, n) if fortran else (n, m)
    x = rng.normal(size=cols if trans == "n" else rows)

    def run(f):
        y = np.full(rows if trans == "n" else cols, np.nan)
        f(a, x, y)
        return y

    call = f'_g("{trans}", {rows}, {cols}, _p({{}}), {lda}, _p({{}}), _p({{}}))'
    names = {"_g": native.blas_dgemv, "_p": native.data_pointer}
    np.testing.assert_allclose(run(_python(call, names)), run(_compiled(call, names)), rtol=1e-13)


@SETTINGS
@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=30), st.integers(0, 3))
def test_entry_glue(values, at):
    from pmfast.compiler import entry_native, native

    x = np.array(values, dtype="float64")
    names = {"_sum": entry_native.lane_sum, "_cell": entry_native.store_cell, "_slot": entry_native.store_slot,
             "_put": entry_native.put_piece, "_ptr": native.data_pointer}
    _check("_sum({})", names, (x,))
    if len(x):
        for call in ("_cell({}, {}, 2.5)", "_slot({}, {}, 2.5)"):
            a, b = x.copy(), x.copy()
            _same_value(_compiled(call, names)(a, len(x) - 1), _python(call, names)(b, len(x) - 1))
            np.testing.assert_array_equal(a, b)
    a, b = np.zeros(12), np.zeros(12)
    assert _compiled("_put(_ptr({}), {}, {}, 12)", names)(a, at, x) == _python("_put(_ptr({}), {}, {}, 12)", names)(b, at, x)
    np.testing.assert_array_equal(a, b)


FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@SETTINGS
@given(FLOATS, FLOATS, FLOATS, st.booleans(), st.integers(-(2**62), 2**62))
def test_vmath_bits(a, b, c, cond, i):
    from pmfast.vmath import _bits

    names = {"_fma": _bits.fma, "_int": _bits.as_int, "_float": _bits.as_float, "_sel": _bits.select,
             "_p": _bits.horner((1.0, -0.5, 0.25, 1e-3)), "_q": _bits.piecewise_horner([(1.0, 2.0, 3.0), (0.5, -1.0)])}
    for call, args in (("_fma({}, {}, {})", (a, b, c)), ("_int({})", (a,)), ("_float({})", (i,)),
                       ("_sel({}, {}, {})", (cond, a, b)), ("_sel({}, {}, {})", (cond, i, a)), ("_p({})", (a,)),
                       ("_q({}, 0)", (a,)), ("_q({}, 1)", (a,))):
        compiled, python = _compiled(call, names)(*args), _python(call, names)(*args)
        np.testing.assert_array_equal(np.asarray(python), np.asarray(compiled), err_msg=call)


def test_fma_rounds_once():
    from pmfast.vmath import _bits

    a = 1.0 + 2.0**-30
    assert _bits.fma(a, a, -1.0) != a * a - 1.0  # the product's low bits survive
    assert _bits.fma(a, a, -1.0) == numba.njit(lambda a: _bits.fma(a, a, -1.0))(a)


@SETTINGS
@given(st.data())
def test_vectorized_loop(data):
    """pytensor's ``_vectorized`` as pmfast's Elemwise calls it: Python version against the compiled loop."""
    from pytensor.link.numba.dispatch.vectorize_codegen import encode_literals

    ndim = data.draw(st.integers(0, 3))
    shape = data.draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim))
    nin = data.draw(st.integers(1, 3))
    bcs = [tuple(data.draw(st.booleans()) for _ in range(ndim)) for _ in range(nin)]
    ins = []
    for bc in bcs:
        s = [1 if b else n for b, n in zip(bc, shape, strict=True)]
        if data.draw(st.booleans()) and ndim:  # a runtime length that doesn't match: the loop's error
            s[0] = data.draw(st.integers(0, 3))
        ins.append(np.asarray(np.arange(int(np.prod(s)), dtype="float64").reshape(s) - 1.5))
    out_bc = tuple(all(bc[d] for bc in bcs) for d in range(ndim))
    inplace = ((0, 0),) if data.draw(st.booleans()) and bcs[0] == out_bc else ()
    lits = [encode_literals(v) for v in ((*bcs,), (out_bc, out_bc), ("float64", "int64"), inplace)]
    core_src = f"def core({', '.join(f'i{k}' for k in range(nin))}, o0, o1):\n    o0[()] = {' * '.join(f'i{k}' for k in range(nin))} + 1.0\n    o1[()] = 3\n"
    env: dict = {}
    exec(core_src, env)
    core = numba.njit(env["core"])
    call = "_v(_core, _l0, _l1, _l2, _l3, True, (), (" + "".join("{}, " for _ in ins) + "), ((), ()), None)"
    names = {"_v": pure.vectorized(), "_core": core, **{f"_l{k}": v for k, v in enumerate(lits)}}
    compiled = _outcome(_compiled(call, names), [x.copy() for x in ins])
    python = _outcome(_python(call, names | {"_core": core.py_func}), [x.copy() for x in ins])
    assert compiled[0] == python[0], (compiled, python)
    if compiled[0] == "raised":
        assert compiled[1] == python[1]
    else:
        _same_value(compiled[1], python[1])


# ---------------------------------------------------------------- op implementations, jit replaced


@contextlib.contextmanager
def jit_replaced():
    """numba's jit replaced by the identity for what pytensor converts, as pytensor's own suite
    evaluates numba functions as Python (its helpers' intrinsics given their plain meaning)."""

    def identity(*args, **kwargs):
        def mark(fn):
            fn.py_func = fn
            return fn

        return mark(args[0]) if len(args) == 1 and callable(args[0]) else mark

    def tuple_setitem(t, i, v):
        return (*t[:i], v, *t[i + 1 :])

    with contextlib.ExitStack() as stack:
        for target, new in (
            ("numba.njit", identity),
            ("pytensor.link.numba.dispatch.basic.numba_njit", identity),
            ("pytensor.link.numba.dispatch.basic.tuple_setitem", tuple_setitem),
            ("pytensor.link.numba.dispatch.basic.direct_cast", lambda x, dtype: x),
            ("numba.np.numpy_support.from_dtype", lambda dtype: dtype),
            ("numba.np.unsafe.ndarray.to_fixed_tuple", lambda x, n: tuple(x)),
        ):
            stack.enter_context(mock.patch(target, new))
        yield


GRAPHS = ("elemwise", "dimshuffle", "dot_mv", "dot_col_row", "dot_vv", "reshape", "join_split", "specify_sum",
          "gather_loop", "vmath_loop", "int_power")


def _graphs():
    """Graphs whose every node pmfast implements itself (each branch of pmfast.compiler.ops, the fused loops)."""
    import pytensor.tensor as pt

    x, y = pt.dmatrix("x"), pt.dvector("y")
    col, row = pt.tensor("col", shape=(None, 1)), pt.tensor("row", shape=(1, None))
    idx = pt.lvector("idx")
    s = pt.dscalar("s")
    return {
        "elemwise": ([x, y], [pt.exp(x) * y + 1.0, (x > 0) * 2]),
        "dimshuffle": ([x], [x.T[None, :, :, None]]),
        "dot_mv": ([x, y], [pt.dot(x, y), pt.dot(y, x.T)]),
        "dot_col_row": ([x, col, row], [pt.dot(x, col), pt.dot(row, x)]),
        "dot_vv": ([y], [pt.dot(y, y)]),
        "reshape": ([x], [x.reshape((-1,)), x.reshape((2, -1))]),
        "join_split": ([y], [pt.concatenate([y, y[::2], pt.exp(y)]), *pt.split(y, pt.stack([1, y.shape[0] - 1]), n_splits=2)]),
        "specify_sum": ([x], [pt.specify_shape(x, (None, 2)).sum()]),
        "gather_loop": ([y, idx, s], [((y[idx] - s) ** 2).sum(), pt.grad(((y[idx] - s) ** 2).sum(), y)]),
        "vmath_loop": ([y], [pt.sigmoid(y).sum(), pt.log1p(pt.exp(y)), pt.erfc(y)]),
        "int_power": ([y, idx], [y[idx] ** pt.cast(idx, "int8")]),
    }


def _inputs(name, rng):
    n = int(rng.integers(2, 6))
    x = rng.normal(size=(n, 2))
    y = rng.normal(size=n)
    return {
        "elemwise": [x, y[:2]],
        "dimshuffle": [x],
        "dot_mv": [(x, np.asfortranarray(x), np.repeat(x, 2, axis=0)[::2])[rng.integers(3)], y[:2]],
        "dot_col_row": [x, rng.normal(size=(2, 1)), rng.normal(size=(1, n))],
        "dot_vv": [y],
        "reshape": [np.resize(x, (2, 2))],
        "join_split": [y],
        "specify_sum": [x],
        "gather_loop": [y, rng.integers(-n, n, size=7), rng.normal()],
        "vmath_loop": [y * 30],
        "int_power": [y, rng.integers(0, n, size=5)],
    }[name]


_functions: dict = {}


def _pair(name):
    """``(compiled, python)``: the graph under ``pmfast.get_mode("all")``, and built and run with the jit replaced."""
    import pytensor

    import pmfast

    if name not in _functions:
        inputs, outputs = _graphs()[name]
        mode = pmfast.get_mode("all")
        compiled = pytensor.function(inputs, outputs, mode=mode)
        with jit_replaced():
            python = pytensor.function(inputs, outputs, mode=mode)
        _functions[name] = compiled, python
    return _functions[name]


@pytest.mark.parametrize("name", GRAPHS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_op_implementations_as_python(name, seed):
    compiled, python = _pair(name)
    args = _inputs(name, np.random.default_rng(seed))
    expected = compiled(*[np.copy(a) for a in args])
    with jit_replaced():
        got = python(*[np.copy(a) for a in args])
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-300)
        assert np.asarray(b).dtype == np.asarray(a).dtype


def test_python_evaluation_does_not_leak_into_compiled_code(monkeypatch):
    """Functions made while the jit is replaced are never kept for later compiled code (a raiser,
    an inline copy, a deferred kernel), and pmfast's import-time kernels stay jitted."""
    import pytensor
    import pytensor.tensor as pt
    from numba.core.dispatcher import Dispatcher

    import pmfast
    from pmfast.compiler import raisers
    from pmfast.vmath import KERNELS

    monkeypatch.setattr(raisers, "_FAIL", [])  # made afresh, first under the replaced jit
    y, s = pt.dvector("y"), pt.dscalar("s")
    outputs = [pt.specify_shape(pt.erf(y - s), (3,)).sum(), pt.gammaln(y[::-1] ** 2).sum()]
    mode = pmfast.get_mode("all")
    with jit_replaced():
        assert pure.jit_off()
        pytensor.function([y, s], outputs, mode=mode)(np.ones(3), 0.5)
        assert not raisers._FAIL
    assert not pure.jit_off()
    assert all(isinstance(k, Dispatcher) for k in KERNELS.values())
    got = pytensor.function([y, s], outputs, mode=mode)(np.ones(3) * 2, 0.5)
    assert len(raisers._FAIL) == 1 and isinstance(raisers._FAIL[0], Dispatcher)
    expected = pytensor.function([y, s], outputs, mode="NUMBA")(np.ones(3) * 2, 0.5)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


# ---------------------------------------------------------------- NUMBA_DISABLE_JIT=1

_DISABLED = """
import json, sys
import numpy as np
import numba
assert numba.config.DISABLE_JIT
sys.path.insert(0, {tests!r})
from conftest import hierarchical_model
import pmfast
fn, x0 = pmfast.logp_dlogp_function(hierarchical_model(n_obs=60, n_groups=5))
points = [x0, x0 + 0.3 * np.sin(np.arange(x0.size))]
print(json.dumps([[float(fn(p)[0]), np.asarray(fn(p)[1]).tolist()] for p in points]))
"""


def test_model_logp_and_gradient_with_jit_disabled():
    """A user's ``NUMBA_DISABLE_JIT=1`` debugging run: pmfast's logp and gradient, evaluated as plain
    Python, equal stock's compiled ones (stock pytensor 2.38.3 itself fails there:
    ``AttributeError: 'function' object has no attribute 'py_func'``)."""
    import pytensor

    from conftest import hierarchical_model
    from pmfast.frontend import logp_dlogp_graph
    from pymc.initial_point import make_initial_point_fn

    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run([sys.executable, "-c", _DISABLED.format(tests=str(ROOT / "tests"))], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    model = hierarchical_model(n_obs=60, n_groups=5)
    joined, logp, grad, names, _ = logp_dlogp_graph(model)
    stock = pytensor.function([joined], [logp, grad], mode="NUMBA")
    point = make_initial_point_fn(model=model, return_transformed=True)(0)
    x0 = np.concatenate([np.asarray(point[n], dtype="float64").ravel() for n in names])
    for p, (lp, g) in zip([x0, x0 + 0.3 * np.sin(np.arange(x0.size))], got, strict=True):
        expected = stock(p)
        np.testing.assert_allclose(lp, expected[0], rtol=1e-10)
        np.testing.assert_allclose(g, expected[1], rtol=1e-10, atol=1e-12)
