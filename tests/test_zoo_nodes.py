"""Over the zoo: pmfast's graph is never bigger than stock's unless a pass that adds nodes by design says so.

A rewrite that only adds nodes (the assertion chains of a symbolic broadcast shape, a check moved out
of a sum that buys no loop) makes a µs-scale model slower than stock: these tests fail on it. Graphs
only (functions are built, their numba kernels never compiled), so the whole zoo costs seconds.
"""

import numpy as np
import pytest
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import toposort
from pytensor.scalar.basic import Composite

import pmfast
from pmfast import models
from pmfast.passes.rewriting import nodes_added

# smaller than the defaults where graph building is slow; the graphs keep their shape
TEST_SIZES = {"wide_additive": {"n": 12}, "hier_var": {"n_groups": 2}}


def canonical(outputs, inputs) -> tuple:
    """A structural key of the graph from ``inputs`` to ``outputs``: equal keys, same computation.

    (``equal_computations`` can't tell: a Composite compares by its generated C
    code, whose temporaries are named from global counters, so two builds of
    the same graph differ.) Composites are keyed by their inner graphs.
    """
    ids: dict = {}
    key = {v: ("in", k) for k, v in enumerate(inputs)}

    def intern(k):
        return ids.setdefault(k, len(ids))

    def var_key(v):
        if v not in key:
            if isinstance(v, Constant):
                data = np.asarray(v.data)
                key[v] = intern(("const", str(v.type), data.dtype.str, data.shape, data.tobytes()))
            else:  # a root that is not an input (shared variables are inputs here)
                key[v] = intern(("root", str(v.type), id(v)))
        return key[v]

    def op_key(op):
        inner = getattr(op, "scalar_op", op)
        if isinstance(inner, Composite):
            body = canonical(inner.fgraph.outputs, inner.fgraph.inputs)
            return (type(op).__name__, getattr(op, "inplace_pattern", None) and tuple(op.inplace_pattern.items()), body)
        return op

    for node in toposort(outputs, blockers=inputs):
        k = (op_key(node.op), tuple(var_key(i) for i in node.inputs))
        for j, o in enumerate(node.outputs):
            key[o] = intern((k, j, str(o.type)))
    return tuple(var_key(o) for o in outputs)


def same_graph(f, g) -> bool:
    fa, fb = f.maker.fgraph, g.maker.fgraph
    return canonical(fa.outputs, fa.inputs) == canonical(fb.outputs, fb.inputs)


def _graphs(name):
    model = models.load(name)(**TEST_SIZES.get(name, {}))
    stock, _ = pmfast.logp_dlogp_function(model, passes="none")
    fast, _ = pmfast.logp_dlogp_function(model, passes="all")
    return stock, fast


@pytest.mark.parametrize("name", list(models.ZOO))
def test_no_more_nodes_than_stock(name):
    stock, fast = _graphs(name)
    n_stock, n_fast = len(stock.maker.fgraph.apply_nodes), len(fast.maker.fgraph.apply_nodes)
    fired = pmfast.fired(fast)
    if not fired:
        # nothing found its pattern: the compiled graph is stock's graph
        assert n_fast == n_stock
        assert same_graph(fast, stock)
    else:
        allowance = nodes_added(fast).get("wide_split", 0)
        assert n_fast <= n_stock + max(allowance, 0), (name, fired, n_stock, n_fast)


def test_golf_putting_keeps_stocks_graph():
    """The erf of pm.Data distances: +57 nodes of broadcast assertions before #12, and no pass fires."""
    stock, fast = _graphs("golf_putting")
    assert pmfast.fired(fast) == {}
    assert not any(type(n.op).__name__ in ("Assert", "CheckAndRaise") for n in fast.maker.fgraph.apply_nodes)
    assert same_graph(fast, stock)
