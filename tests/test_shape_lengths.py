"""pmfast.shape_lengths: ShapeFeature's static lengths from one constant per length, same shapes and graphs."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.graph.basic import Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import get_scalar_constant_value
from pytensor.tensor.rewriting.shape import ShapeFeature

from pmfast import compiler, shape_lengths
from pmfast.compiler import patching


@pytest.fixture(autouse=True, scope="module")
def _installed():
    compiler.setup()


def _graph(shape_x, shape_y):
    x = pt.tensor("x", shape=shape_x)
    y = pt.tensor("y", shape=shape_y)
    out = pt.exp(x) * y + (x * 2).sum(axis=-1, keepdims=True)
    return [x, y], [out, pt.log1p(out), out[..., :1]]


def _shapes(inputs, outputs, on: bool, scoped: bool = True):
    """Every variable's ShapeFeature entries: the entry objects and their constant values (or None)."""
    fg = FunctionGraph(inputs, outputs, clone=False)
    with pytest.MonkeyPatch.context() as mp, patching.compiling() if scoped else _null():
        mp.setenv("PMFAST_SHAPE_LENGTHS", "1" if on else "0")
        fg.attach_feature(ShapeFeature())
    sf = fg.shape_feature
    got = {}
    for v in fg.variables:
        shape = sf.shape_of.get(v)
        if shape is None:
            continue
        got[v] = [(s, _value(s)) for s in shape]
    return got


def _value(entry):
    """A shape entry's constant value, or ``"symbolic"``."""
    value = get_scalar_constant_value(entry, raise_not_constant=False)
    return "symbolic" if isinstance(value, Variable) else int(value)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


dims = st.sampled_from([None, 1, 3, 4])


@settings(max_examples=25, deadline=None)
@given(st.tuples(dims, dims), st.tuples(dims, dims))
def test_same_shape_values_with_and_without(shape_x, shape_y):
    """Every shape entry has the same constant value (or is symbolic in both) either way; with the
    cache, equal static lengths are one constant object per feature, without it they are not."""
    if any(a is not None and b is not None and a != b and 1 not in (a, b) for a, b in zip(shape_x, shape_y)):
        return  # not broadcastable
    inputs, outputs = _graph(shape_x, shape_y)
    on = _shapes(inputs, outputs, on=True)
    off = _shapes(inputs, outputs, on=False)
    assert on.keys() == off.keys()
    for v in on:
        assert [c for _, c in on[v]] == [c for _, c in off[v]], v
    static, entries = {}, []
    for v in on:
        for d, (entry, _) in enumerate(on[v]):
            n = v.type.shape[d]
            if n is not None:
                assert entry.type == pt.lscalar().type and entry.data == n
                static.setdefault(n, set()).add(id(entry.data))
                entries.append(entry)
    assert all(len(ids) == 1 for ids in static.values()), "one data array per static length"
    assert len({id(e) for e in entries}) == len(entries), "a new constant per entry, as pytensor makes them"


def test_outside_a_compile_pytensor_builds_every_constant():
    inputs, outputs = _graph((3, 4), (3, 4))
    got = _shapes(inputs, outputs, on=True, scoped=False)
    entries = [e for shape in got.values() for e, _ in shape]
    assert len({id(e.data) for e in entries}) == len(entries), "pytensor's own set_shape: constant() each time"
    inside = _shapes(inputs, outputs, on=True)
    entries = [e for shape in inside.values() for e, _ in shape]
    assert len({id(e) for e in entries}) == len(entries)
    assert len({id(e.data) for e in entries}) == 3  # 3, 4 and the kept axis 1


def test_the_cache_is_per_feature(monkeypatch):
    monkeypatch.setenv("PMFAST_SHAPE_LENGTHS", "1")
    inputs, outputs = _graph((3, 4), (3, 4))
    with patching.compiling():
        a, b = ShapeFeature(), ShapeFeature()
        FunctionGraph(inputs, outputs, clone=True).attach_feature(a)
        FunctionGraph(inputs, outputs, clone=True).attach_feature(b)
    assert shape_lengths._length(a, 3).data is not shape_lengths._length(b, 3).data
    assert shape_lengths._length(a, 3).data is shape_lengths._length(a, 3).data
    assert shape_lengths._length(a, 3) is not shape_lengths._length(a, 3)


def test_compiled_graph_and_values_unchanged(monkeypatch):
    """pmfast's mode rewrites a static-shape graph to the same graph, with the same values, either way."""
    import pmfast

    rng = np.random.default_rng(0)
    xv, yv = rng.normal(size=(3, 1)), rng.normal(size=(4,))

    def build(on):
        monkeypatch.setenv("PMFAST_SHAPE_LENGTHS", "1" if on else "0")
        inputs, outputs = _graph((3, 1), (4,))
        with patching.compiling():
            fn = pytensor.function(inputs, outputs, mode=pmfast.get_mode("all"))
        text = pytensor.printing.debugprint(fn, file="str", print_type=True, id_type="")
        return text, fn(xv, yv)

    text_on, vals_on = build(True)
    text_off, vals_off = build(False)
    assert text_on == text_off
    for a, b in zip(vals_on, vals_off):
        np.testing.assert_array_equal(a, b)
