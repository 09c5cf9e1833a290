"""numba's @overload implementations cached across processes (pmfast.compiler.generic)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

SCRIPT = textwrap.dedent(
    """
    import json, os
    import numba
    import numpy as np
    import pmfast.compiler
    from pmfast.compiler import cache, generic

    pmfast.compiler.setup()
    if os.environ.get("MORE_TYPES"):  # numba numbers types in creation order: shift them
        from numba.core import types
        more = [types.Array(types.int16, n, "F") for n in range(1, 9)]

    @numba.njit(fastmath=True)
    def f(n):
        a = np.empty(n)
        for i in range(n):
            a[i] = 0.1 * i
        b = np.ascontiguousarray(np.asarray(a)[::2])
        return b.sum() + np.array(0.25).item()

    value = f(11)
    print(json.dumps({"value": value, "generic": dict(generic.stats()), "cache": dict(cache.stats)}))
    """
)


def run(tmp_path, cache_dir, **env):
    path = tmp_path / "generic_script.py"
    path.write_text(SCRIPT)
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={cache_dir}", "PMFAST_GENERIC_CACHE": "1", **env}
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def generic_files(cache_dir):
    return sorted(p for p in cache_dir.rglob("*pmfast_generic_*") if p.suffix != ".lock")


def test_overload_implementations_load_in_a_new_process_and_rebuild_when_corrupt(tmp_path):
    cache_dir = tmp_path / "cache"
    first = run(tmp_path, cache_dir)
    assert first["generic"]["misses"] >= 3 and first["generic"]["hits"] == 0
    files = generic_files(cache_dir)
    assert {p.suffix for p in files} == {".nbi", ".nbc"}

    # another process, whose numba types are numbered otherwise (numba's pickle hash of np.empty's
    # closure, its return type, would differ)
    second = run(tmp_path, cache_dir, MORE_TYPES="1")
    # an implementation loaded from the cache brings its callees' code: they aren't built at all
    assert second["generic"]["hits"] >= 3 and second["generic"].get("misses", 0) == 0
    assert second["value"] == first["value"] == np.sum(0.1 * np.arange(11)[::2]) + 0.25

    for path in files:
        path.write_bytes(path.read_bytes()[:7])
    rebuilt = run(tmp_path, cache_dir)
    assert rebuilt["cache"]["rebuilt"] >= 1 and rebuilt["generic"]["misses"] >= 1
    assert rebuilt["value"] == first["value"]
    assert run(tmp_path, cache_dir)["generic"].get("misses", 0) == 0


def test_nothing_cached_when_switched_off(tmp_path):
    for value in ("0", ""):  # off, and off by default
        off = run(tmp_path, tmp_path / f"off{value}", PMFAST_GENERIC_CACHE=value)
        assert off["generic"] == {}
        assert not generic_files(tmp_path / f"off{value}")
    path = tmp_path / "generic_script.py"
    env = {**os.environ, "PMFAST_GENERIC_CACHE": "1", "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'nocache'},numba__cache=False"}
    out = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["generic"] == {}
    assert not generic_files(tmp_path / "nocache")


def test_keys_follow_flags_options_and_versions(monkeypatch):
    import numba
    from numba.core.compiler import Flags

    from pmfast.compiler import generic, overloads

    def impl(a):
        return a

    def overload(a):
        return impl

    def flags(**kw):
        f = Flags()
        for k, v in kw.items():
            setattr(f, k, v)
        return f

    key = generic.cache_key(overload, impl, {}, flags(fastmath=True))
    assert key == generic.cache_key(overload, impl, {}, flags(fastmath=True))
    assert key != generic.cache_key(overload, impl, {}, flags(fastmath=False))
    assert key != generic.cache_key(overload, impl, {}, flags(fastmath=True, error_model="numpy"))
    assert key != generic.cache_key(overload, impl, {"boundscheck": True}, flags(fastmath=True))
    assert key != generic.cache_key(overload, impl, {}, None)
    # flags an implementation does not inherit from its caller don't split the cache
    assert key == generic.cache_key(overload, impl, {}, flags(fastmath=True, no_cpython_wrapper=True))
    for mod, attr, value in ((generic, "VERSION", -1), (overloads, "VERSION", -1), (numba, "__version__", "0.0")):
        with monkeypatch.context() as m:
            m.setattr(mod, attr, value)
            m.setattr(generic, "_prefix", None)
            assert generic.cache_key(overload, impl, {}, flags(fastmath=True)) != key



def test_closure_fingerprints_are_process_independent():
    from numba.core import types

    from pmfast.compiler import generic

    def closing_over(value):
        def impl():
            return value

        return impl

    a = generic.closure_fingerprint(closing_over(types.Array(types.float64, 1, "C")))
    assert a is not None and "_code" not in a
    assert a == generic.closure_fingerprint(closing_over(types.Array(types.float64, 1, "C")))
    assert a != generic.closure_fingerprint(closing_over(types.Array(types.float64, 2, "C")))
    assert a != generic.closure_fingerprint(closing_over(types.Array(types.float32, 1, "C")))
    assert generic.closure_fingerprint(closing_over(object())) is None
    assert generic.closure_fingerprint(closing_over((1, types.int64, np.dtype("f8")))) is not None
