"""pmfast.compiler.static_shapes: the static shapes it folds are pytensor's, on real graphs and by rule."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.tensor import basic

from pmfast.compiler import patching, static_shapes
from pmfast.loading import load_model


def _checked(monkeypatch):
    """Run pytensor's infer_static_shape on every call and compare with the fold where it folds."""
    original = basic.infer_static_shape.__wrapped__ if hasattr(basic.infer_static_shape, "__wrapped__") else basic.infer_static_shape
    seen = {"folded": 0, "calls": 0}

    def both(shape):
        sh, static = original(shape)
        seen["calls"] += 1
        folded = static_shapes.fold([basic.as_tensor_variable(s, ndim=0) for s in shape])
        if folded is not None:
            seen["folded"] += 1
            assert folded == tuple(static), (shape, folded, static)
        return sh, static

    monkeypatch.setattr(basic, "infer_static_shape", both)
    return seen


@pytest.mark.parametrize("spec", ["hier_var:n_groups=2", "lkj_mvnormal", "marginal_gp", "stoch_vol"])
def test_folds_what_pytensor_infers_on_model_gradients(spec, monkeypatch):
    from pmfast.frontend import logp_dlogp_graph

    seen = _checked(monkeypatch)
    model, _ = load_model(spec)
    logp_dlogp_graph(model)
    if spec.startswith(("hier_var", "lkj")):
        assert seen["folded"] >= 5, seen


def test_rules():
    x = pt.tensor("x", shape=(3, None, 5))
    y = pt.tensor("y", shape=(4,))
    s = x.shape
    assert static_shapes.fold([s[0], s[2]]) == (3, 5)
    assert static_shapes.fold([s[1]]) is None  # unknown length
    assert static_shapes.fold([s[1:][1] * 2 + y.shape[0] - 1]) == (13,)
    assert static_shapes.fold([pt.maximum(s[0], y.shape[0]), pt.switch(pt.eq(s[0], 1), s[2], s[0])]) == (4, 3)
    assert static_shapes.fold([pt.as_tensor(np.int64(7)), pt.cast(s[2], "int32")]) == (7, 5)
    n = pt.iscalar("n")
    assert static_shapes.fold([n]) is None and static_shapes.fold([s[0] + n]) is None


def test_alloc_types_are_the_same_in_and_out_of_the_scope():
    from pmfast.compiler import setup

    setup()
    x = pt.tensor("x", shape=(3, None, 5))
    v = pt.vector("v")
    outside = pt.alloc(v[0], x.shape[0], x.shape[2], x.shape[1])
    with patching.compiling():
        inside = pt.alloc(v[0], x.shape[0], x.shape[2], x.shape[1])
        assert basic.infer_static_shape is not None
    assert outside.type == inside.type and inside.type.shape == (3, 5, None)
