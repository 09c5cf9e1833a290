"""pmfast.c_support: fusion's "has C code?" answered once per op and signature, with pytensor's answers."""

from __future__ import annotations

import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.scalar.basic import ScalarOp, upcast_out

from pmfast import c_support
from pmfast.compiler import patching, setup


class Counted(ps.BinaryScalarOp):
    """A scalar op that has C code for float64 inputs only and counts how often its C code is asked for."""

    calls = 0

    def impl(self, x, y):
        return x + y

    def grad(self, inputs, grads):
        return [grads[0], grads[0]]

    def c_code(self, node, name, inputs, outputs, sub):
        type(self).calls += 1
        if any(v.type.dtype != "float64" for v in node.inputs):
            raise NotImplementedError
        return f"{outputs[0]} = {inputs[0]} + {inputs[1]};"


counted = Counted(upcast_out, name="counted")


def questions():
    x, y = pt.dvector("x"), pt.dvector("y")
    i = pt.lvector("i")
    f = pt.fvector("f")
    nodes = [
        pt.exp(x).owner, (x + y).owner, (x + x).owner, (x * i).owner, (f + f).owner, (i + i).owner,
        pt.switch(x > 0, x, y).owner, pt.erfcinv(x).owner, pt.gammaln(f).owner,
        pt.elemwise.Elemwise(counted)(x, y).owner, pt.elemwise.Elemwise(counted)(x, i).owner,
        pt.elemwise.Elemwise(counted)(x, x).owner,
    ]
    return [(n.op.scalar_op, n.inputs, n.outputs) for n in nodes]


def test_same_answers_as_pytensor():
    setup()
    stock = [op.supports_c_code(i, o) for op, i, o in questions()]
    with patching.compiling():
        ours = [op.supports_c_code(i, o) for op, i, o in questions()]
        again = [op.supports_c_code(i, o) for op, i, o in questions()]
    assert ours == stock == again
    assert False in stock and True in stock


def test_asked_once_per_signature():
    setup()
    x, y, z = pt.dvector("x"), pt.dvector("y"), pt.dvector("z")
    i = pt.lvector("i")
    op = Counted(upcast_out, name="fresh")  # no answers memoised yet
    Counted.calls = 0
    with patching.compiling():
        for a, b in [(x, y), (y, z), (x, z), (x, x), (y, y), (x, i), (z, i)]:
            node = pt.elemwise.Elemwise(op)(a, b).owner
            node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
    # three signatures: two distinct float64 inputs, one float64 input twice, float64 with int64
    assert Counted.calls == 3
    Counted.calls = 0
    node = pt.elemwise.Elemwise(counted)(x, y).owner
    node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
    node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
    assert Counted.calls == 2  # outside a pmfast compile: pytensor's, every time


def test_switch_off(monkeypatch):
    setup()
    monkeypatch.setenv("PMFAST_C_SUPPORT_MEMO", "0")
    x, y = pt.dvector("x"), pt.dvector("y")
    node = pt.elemwise.Elemwise(counted)(x, y).owner
    Counted.calls = 0
    with patching.compiling():
        node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
        node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
    assert Counted.calls == 2


def test_fused_graph_unchanged():
    setup()

    def fused():
        x, y = pt.dvector("x"), pt.dvector("y")
        i = pt.lvector("i")
        out = pt.exp(x) * y + pt.log1p(pt.exp(-x)) - (x - y) ** 2 * i + pt.elemwise.Elemwise(counted)(x, y) * 3
        g = pytensor.grad(pt.sum(out * pt.sigmoid(y)), [x, y])
        fg = pytensor.graph.rewrite_graph([out, *g], include=("fast_run",), exclude=("inplace",), clone=True)
        return [str(n.op) for n in pytensor.graph.FunctionGraph(outputs=fg, clone=False).toposort()]

    stock = fused()
    with patching.compiling():
        ours = fused()
    assert ours == stock
    assert any("Composite" in s for s in stock)


def test_memo_does_not_keep_ops_alive():
    import gc
    import weakref

    setup()
    op = Counted(upcast_out, name="transient")
    x, y = pt.dvector("x"), pt.dvector("y")
    node = pt.elemwise.Elemwise(op)(x, y).owner
    with patching.compiling():
        node.op.scalar_op.supports_c_code(node.inputs, node.outputs)
    assert id(op) in c_support._answers
    ref, key = weakref.ref(op), id(op)
    del op, node
    gc.collect()
    assert ref() is None and key not in c_support._answers


def test_signature():
    x, y = pt.dvector("x"), pt.lvector("y")
    assert c_support.signature([x, y, x], [x]) == (("float64", "int64", "float64"), (0, 1, 0), 1)


def test_installed_once():
    setup()
    setup()
    assert ScalarOp.supports_c_code._pmfast
    assert ScalarOp.supports_c_code.__wrapped__.__qualname__ == "ScalarOp.supports_c_code"
