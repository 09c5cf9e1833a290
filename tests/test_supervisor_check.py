"""pmfast.supervisor_check: the Supervisor's answer from the destroyed roots is pytensor's."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.function.types import Supervisor
from pytensor.graph.utils import InconsistencyError
from test_inplace_fast import fgraph_of, programs, run

from pmfast import supervisor_check


def _outcome(fn, supervisor, fg):
    try:
        fn(supervisor, fg)
    except InconsistencyError as error:
        return str(error)
    return None


def _original():
    validate = Supervisor.validate
    return getattr(validate, "__wrapped__", validate)


def _both(fg):
    (supervisor,) = [f for f in fg._features if isinstance(f, Supervisor)]
    original = _original()
    want = _outcome(original, supervisor, fg)
    got = _outcome(lambda s, g: supervisor_check.validate(s, g, original), supervisor, fg)
    return want, got


def _destroy_unvalidated(fg, k: int) -> bool:
    """Make the ``k``-th Elemwise (toposort order) destroy its first input, unvalidated (maybe
    a protected input or a graph output: the states the Supervisor refuses)."""
    from pytensor.tensor.elemwise import Elemwise

    nodes = [n for n in fg.toposort() if isinstance(n.op, Elemwise) and not n.op.destroy_map]
    if not nodes:
        return False
    node = nodes[k % len(nodes)]
    new = Elemwise(node.op.scalar_op, {0: 0}).make_node(*node.inputs)
    for old, out in zip(node.outputs, new.outputs, strict=True):
        fg.replace(old, out, import_missing=True)
    return True


@settings(max_examples=80, deadline=None, derandomize=True)
@given(programs(), st.integers(0, 100), st.booleans())
def test_same_answer_as_pytensor(program, k, inplace_stages):
    """Valid graphs after pytensor's in-place stages, and graphs made invalid by one unvalidated
    in-place change: the same verdict and message as pytensor's Supervisor."""
    fg = fgraph_of(program)
    if inplace_stages:
        run(fg, False)
    want, got = _both(fg)
    assert want == got
    if _destroy_unvalidated(fg, k):
        want, got = _both(fg)
        assert want == got


def test_refuses_a_destroyed_output_and_input():
    fg = fgraph_of((1, [False], [("unary", 0, 0, 0)], [0, 1]))
    assert _destroy_unvalidated(fg, 0)
    want, got = _both(fg)
    assert want is not None and want == got


def test_scoped_install(monkeypatch):
    """Installed compile-scoped; outside a compile, and with the switch off, pytensor's runs."""
    from pmfast import compiler
    from pmfast.compiler import patching

    compiler.setup()
    assert Supervisor.validate._pmfast
    calls = []
    monkeypatch.setattr(supervisor_check, "validate", lambda *a: calls.append(a))
    fg = fgraph_of((1, [True], [("unary", 0, 0, 0)], [1]))
    fg.validate()
    assert not calls
    with patching.compiling():
        fg.validate()
        assert len(calls) == 1
        monkeypatch.setenv("PMFAST_SUPERVISOR_CHECK", "0")
        fg.validate()
        assert len(calls) == 1


@pytest.mark.parametrize("mutable", [False, True])
def test_no_destroyer_answers_at_once(mutable):
    fg = fgraph_of((1, [mutable], [("binary", 0, 0, 0)], [1]))
    assert not fg.destroy_handler.destroyers
    assert _both(fg) == (None, None)
