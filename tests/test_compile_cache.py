"""The warm path: a model compiled once compiles again from cached machine code."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from conftest import hierarchical_model
    import pmfast
    from pmfast import wrappers

    n_groups, passes = int(sys.argv[1]), sys.argv[2]
    model = hierarchical_model(n_groups=n_groups)
    compiled = pmfast.compile(model, passes=passes)
    x = np.linspace(-1, 1, compiled.n_dim)
    logp, grad = compiled.logp_func(x)
    print(json.dumps({{"stats": dict(wrappers.stats), "keys": wrappers.keys,
                      "timings": compiled.timings, "logp": float(logp), "grad": grad.tolist()}}))
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("compiledir")
    script = tmp_path_factory.mktemp("script") / "compile_once.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__)))
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={cache}"}

    def run(n_groups=12, passes="none"):
        out = subprocess.run(
            [sys.executable, str(script), str(n_groups), passes],
            env=env, capture_output=True, text=True, check=True,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    run.cache = cache
    return run


def assert_same_results(a, b, exact=True):
    if exact:
        assert a["logp"] == b["logp"] and a["grad"] == b["grad"]
    else:
        np.testing.assert_allclose(a["logp"], b["logp"], rtol=1e-14)
        np.testing.assert_allclose(a["grad"], b["grad"], rtol=1e-14)


def test_warm_path_hits_misses_and_rebuilds(run):
    """One cache directory, six processes (each cold compile costs ~15 s here)."""
    cold = run()
    warm = run()
    assert cold["stats"] == {"misses": 2}
    assert warm["stats"] == {"hits": 2}
    assert warm["keys"] == cold["keys"]
    assert "numba: logp+grad kernel" in cold["timings"] and "numba: logp+grad kernel" not in warm["timings"]
    assert warm["timings"]["numba: logp+grad wrapper (cached)"] < cold["timings"]["numba: logp+grad wrapper"] / 5
    # pytensor's own kernels differ by an ulp between a fresh numba compile and
    # its cached copy (stock too, without pmfast); cached runs are bit-identical.
    assert_same_results(warm, cold, exact=False)

    wrapper_files = [p for p in (run.cache / "numba").iterdir() if "wrapper" in p.name]
    assert wrapper_files
    for path in wrapper_files:
        path.write_bytes(path.read_bytes()[:7])
    rebuilt = run()
    assert rebuilt["stats"].get("rebuilt", 0) >= 1
    assert_same_results(rebuilt, warm)
    again = run()
    assert again["stats"] == {"hits": 2}
    assert_same_results(again, warm)

    fused = run(passes="indexed_elemwise")  # a pass that changes the logp graph: its kernel is new
    assert fused["stats"].get("misses", 0) >= 1 and fused["keys"][0] != warm["keys"][0]
    np.testing.assert_allclose(fused["logp"], warm["logp"], rtol=1e-12)

    other = run(n_groups=13)
    assert other["stats"] == {"misses": 2}
    assert set(other["keys"]).isdisjoint(warm["keys"])
