"""A Scan step under pmfast's passes destroys only inner inputs that are safe to destroy.

pytensor's ``test_inplace_taps[True]`` counts 12 destroyed inner inputs under ``pmfast.enable()``
where it expects 3: pmfast fuses the step's outputs into one Composite, whose destroy map the test
counts once per output. Here: the distinct destroyed inputs are the oldest taps and the sit-sot, and
the values (and the caller's inputs) equal stock's for several lengths, including 2..4 steps where
an aliased buffer tap would be read after being overwritten.
"""

import numpy as np
import pytest

pytensor = pytest.importorskip("pytensor")
import pytensor.tensor as pt  # noqa: E402
from pytensor.scan import scan  # noqa: E402
from pytensor.scan.op import Scan  # noqa: E402

import pmfast  # noqa: E402


def build(n_steps):
    a, x0 = pt.scalar("a"), pt.scalar("x0")
    y0, z0 = pt.vector("y0", shape=(2,)), pt.vector("z0", shape=(3,))

    def step(ztm3, ztm1, xtm1, ytm1, ytm2, a):
        z = ztm1 + 1 + ztm3 * 0.5 + a
        x = xtm1 * 1.5 + 1
        y = ytm1 + 1 - ytm2 * 0.25 + a
        return z, x, z + x + y, y

    outs = scan(step, outputs_info=[dict(initial=z0, taps=[-3, -1]), dict(initial=x0, taps=[-1]), None,
                                    dict(initial=y0, taps=[-1, -2])],
                non_sequences=[a], n_steps=n_steps, return_updates=False)
    return [a, x0, y0, z0], [o[-1] for o in outs] + [outs[0], outs[3]]


@pytest.mark.parametrize("n_steps", [2, 3, 4, 7])
def test_scan_taps_destroyed_inputs_safe(n_steps):
    inputs, outputs = build(n_steps)
    args = [np.pi, np.e, np.array([1.0, np.euler_gamma]), np.array([0.0, 1.0, 2.0])]
    copies = [np.copy(v) for v in args]
    expected = pytensor.function(inputs, outputs, mode="NUMBA")(*args)
    with pmfast.enabled("all"):
        fn = pytensor.function(inputs, outputs, mode="NUMBA")
    got = fn(*args)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    for v, c in zip(args, copies):
        np.testing.assert_array_equal(v, c)
    [op] = [n.op for n in fn.maker.fgraph.toposort() if isinstance(n.op, Scan)]
    inner = op.fgraph.inputs
    mit = op.inner_mitsot(inner)
    safe = {mit[:2][op.info.mit_sot_in_slices[0].index(-3)], mit[2:][op.info.mit_sot_in_slices[1].index(-2)],
            *op.inner_sitsot(inner)}
    destroyed = {node.inputs[i] for node in op.fgraph.apply_nodes for v in node.op.destroy_map.values() for i in v}
    assert destroyed and destroyed <= safe
