"""Every zoo model: finite logp and gradient, and pmfast's passes agree with stock numba."""

import numpy as np
import pytest

from pmfast import models
import pmfast

# Sizes for the tests: the defaults of the wide model compile for minutes on stock.
TEST_SIZES = {
    "wide_additive": {"n": 12},
    "hier_var": {"n_groups": 1},
    "bradley_terry_np": {"n_matches": 5000},
    "irt_2pl_np": {"n_persons": 60},
}


def assert_parity(got, ref, rtol=1e-9):
    (logp, grad), (ref_logp, ref_grad) = got, ref
    assert np.isfinite(ref_logp) and np.all(np.isfinite(ref_grad))
    np.testing.assert_allclose(logp, ref_logp, rtol=rtol)
    np.testing.assert_allclose(grad, ref_grad, rtol=rtol, atol=rtol * max(1.0, np.abs(ref_grad).max()))


@pytest.mark.parametrize("name", sorted(models.ZOO))
def test_zoo_model_parity(name):
    model = models.load(name)(**TEST_SIZES.get(name, {}))
    stock, x0 = pmfast.logp_dlogp_function(model, passes="none")
    fast, _ = pmfast.logp_dlogp_function(model, passes="all")
    rng = np.random.default_rng(0)
    for x in (x0, x0 + 0.1 * rng.normal(size=x0.shape)):
        ref = stock(x)
        assert_parity(fast(x), ref)
        assert_parity(fast.vm.jit_fn(*pmfast.kernel_args(fast, x)), ref)
