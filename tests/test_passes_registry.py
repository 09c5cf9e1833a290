import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import pmfast
from pmfast.passes import UnknownPassError, available, fired, select


def _sqr_graph():
    x = pt.dvector("x")
    return x, (pt.exp(x) ** 2).sum()


def test_select_all_none_and_names(probe_pass):
    assert select("none") == []
    assert select(None) == []
    assert probe_pass in select("all")
    assert select(["probe"]) == [probe_pass]
    assert select("probe") == [probe_pass]
    assert [p.name for p in available()] == sorted(
        [p.name for p in available()], key=lambda n: (pmfast.passes.PASSES[n].position, n)
    )


@pytest.mark.parametrize("bad", ["nope", ["probe", "nope"], "probe,typo"])
def test_unknown_pass_is_a_clear_error(probe_pass, bad):
    with pytest.raises(UnknownPassError, match="unknown pass"):
        select(bad)
    with pytest.raises(UnknownPassError):
        pmfast.get_mode(bad)


def test_registry_lists_position_and_description(probe_pass):
    assert probe_pass.position == 1.7
    assert "probe" in str(probe_pass) and "x ** 2" in str(probe_pass)


def test_fired_counts_on_compiled_graph(probe_pass):
    x, out = _sqr_graph()
    with_pass = pytensor.function([x], out, mode=pmfast.get_mode(["probe"]))
    without = pytensor.function([x], out, mode=pmfast.get_mode("none"))
    assert fired(with_pass) == {"probe": 1}
    assert fired(without) == {}
    v = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(with_pass(v), without(v), rtol=1e-15)


def test_none_mode_is_stock_numba_pipeline(probe_pass):
    from pytensor.compile.mode import get_mode

    none, stock = pmfast.get_mode("none"), get_mode("NUMBA")
    assert none.provided_optimizer.include == stock.provided_optimizer.include
    assert type(none.linker) is type(stock.linker)
    assert probe_pass.tag in pmfast.get_mode("all").provided_optimizer.include
