"""Over the zoo: pmfast's graph is never bigger than stock's unless a pass that adds nodes by design says so.

A rewrite that only adds nodes (the assertion chains of a symbolic broadcast shape, a check moved out
of a sum that buys no loop) makes a µs-scale model slower than stock: these tests fail on it. Graphs
only (functions are built, their numba kernels never compiled), so the whole zoo costs seconds.
"""

from collections import Counter

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar.basic import Composite
from pytensor.tensor.elemwise import Elemwise

import pmfast
from pmfast import models
from pmfast.passes.rewriting import nodes_added
from pmfast.vmath.elemwise import VmathElemwise
from pmfast.vmath.ops import VmathOp

# smaller than the defaults where graph building is slow; the graphs keep their shape
TEST_SIZES = {"wide_additive": {"n": 12}, "hier_var": {"n_groups": 2}}


def signature(fgraph) -> Counter:
    """The multiset of ``fgraph``'s nodes, each keyed by what it computes: equal signatures, same nodes.

    Not the wiring: pytensor's elemwise fusion does not always build the same Composites from
    the same graph (one build of ar2_scan's gradient exposes 17 outputs of a Composite, the next
    16, over the same inner nodes; which input an Elemwise overwrites in place varies too), so
    an Elemwise is keyed without its inplace pattern, a Composite by the multiset of its inner nodes
    and constants, a Scan by its inner graph's signature, and vector_math's substitutes as the
    stock ops they subclass (the pass changes how a node is computed, not the graph).
    """
    return Counter(_op_key(n.op) for n in fgraph.apply_nodes) + Counter(
        _const_key(v) for n in fgraph.apply_nodes for v in n.inputs if isinstance(v, Constant)
    )


def _const_key(v):
    data = np.asarray(v.data)
    return ("const", str(v.type), data.dtype.str, data.shape, data.tobytes())


def _op_key(op):
    if isinstance(op, Composite):
        return ("Composite", len(op.fgraph.inputs), _frozen(signature(op.fgraph)))
    if isinstance(op, VmathOp):
        return _stock_class(op)(op.output_types_preference)
    if isinstance(op, Elemwise) or isinstance(getattr(op, "scalar_op", None), Composite):
        return (_stock_class(op).__name__, _op_key(op.scalar_op))
    if isinstance(getattr(op, "fgraph", None), FunctionGraph):  # Scan
        return (type(op).__name__, getattr(op, "info", None), _frozen(signature(op.fgraph)))
    return op


def _frozen(counter: Counter):
    return frozenset(counter.items())


def _stock_class(op) -> type:
    cls = type(op)
    while issubclass(cls, (VmathOp, VmathElemwise)):
        cls = next(b for b in cls.__bases__ if b is not VmathOp)
    return cls


def same_graph(f, g) -> bool:
    return signature(f.maker.fgraph) == signature(g.maker.fgraph)


def _graphs(name):
    model = models.load(name)(**TEST_SIZES.get(name, {}))
    stock, _ = pmfast.logp_dlogp_function(model, passes="none")
    fast, _ = pmfast.logp_dlogp_function(model, passes="all")
    return stock, fast


# vector_math substitutes kernels node for node: the graph stays the same (``canonical`` keys its
# ops as the stock ops they subclass)
SUBSTITUTIONS = {"vector_math"}


@pytest.mark.parametrize("name", list(models.ZOO))
def test_no_more_nodes_than_stock(name):
    stock, fast = _graphs(name)
    n_stock, n_fast = len(stock.maker.fgraph.apply_nodes), len(fast.maker.fgraph.apply_nodes)
    fired = {k: v for k, v in pmfast.fired(fast).items() if k not in SUBSTITUTIONS}
    if not fired:
        # nothing found its pattern: the compiled graph is stock's graph
        assert n_fast == n_stock
        assert same_graph(fast, stock)
    else:
        allowance = sum(nodes_added(fast).values())
        assert n_fast <= n_stock + max(allowance, 0), (name, fired, nodes_added(fast), n_stock, n_fast)


def test_golf_putting_keeps_stocks_graph():
    """The erf of pm.Data distances: +57 nodes of broadcast assertions before #12. Changed only by
    ``scalarize`` (the scalar parameters' gradient pieces as 0-d work: fewer nodes), ``data_hoist``
    (the distances' data-only terms computed once per dataset) and ``indexed_elemwise``, which
    fuses what remains."""
    stock, fast = _graphs("golf_putting")
    fired = set(pmfast.fired(fast))
    assert fired <= SUBSTITUTIONS | {"scalarize", "data_hoist", "indexed_elemwise"}
    assert not any(type(n.op).__name__ in ("Assert", "CheckAndRaise") for n in fast.maker.fgraph.apply_nodes)
    if "scalarize" in fired:
        assert len(fast.maker.fgraph.apply_nodes) < len(stock.maker.fgraph.apply_nodes)
    else:
        assert same_graph(fast, stock)


def test_signature_tells_graphs_apart():
    """The signature is not blind: a changed constant or a vmath body against a different stock op differ."""
    x = pt.dvector("x")
    f = pytensor.function([x], pt.exp(x) + 1.0, mode="NUMBA")
    g = pytensor.function([x], pt.exp(x) + 2.0, mode="NUMBA")
    h = pytensor.function([x], pt.log(x) + 1.0, mode="NUMBA")
    f2 = pytensor.function([x], pt.exp(x) + 1.0, mode="NUMBA")
    assert same_graph(f, f2)
    assert not same_graph(f, g) and not same_graph(f, h)
