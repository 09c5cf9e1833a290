"""pmfast is a good guest: what a user compiles after ``pmfast.compile`` is what a process without pmfast compiles.

In this process (pmfast imported, a model compiled), a user's ``@njit`` functions (inlined
calls and loops: numba's inliner and SSA pass, which pmfast replaces inside its compiles; an
``np.sum`` compiled after a fast-math one: numba's subroutine memo, which pmfast keeps apart per
flags inside its compiles) and a stock ``pytensor.function(mode="NUMBA")`` give the same LLVM IR
and the same rewritten graph as in a fresh process that never imported pmfast. The second
``np.sum`` tells a compile-scoped replacement left active apart from numba's own behaviour (numba
reuses the fast-math subroutine, pmfast's compile does not), and :func:`left_installed` checks
every compile-scoped entry of the registry by what is bound outside a compile.
"""

import gc
import json
import subprocess
import sys

import numpy as np
import pytest

USER_CODE = '''
import re

import numba
import numpy as np


@numba.njit(inline="always")
def _acc(x, k):
    s = 0.0
    for v in x:
        if v > k:
            s += v * 2.0
        else:
            s -= 1.0
    return s


def _caller(x):
    a = _acc(x, 0.5)
    b = _acc(x[1:], -1.0)
    t = 0.0
    for i in range(x.shape[0]):
        if x[i] > a:
            t = t + x[i]
        else:
            t = t - b
    return a - b + t


def _sum_fast(a):
    return np.sum(a)


def _sum_plain(a):
    return np.sum(a)


def _alloc(n):
    return np.empty(n)


def _zeros(n):
    return np.zeros(n)  # numba's @overload: its compiled implementation is memoised per signature


def llvm(dispatcher) -> str:
    """The final LLVM module, numba's process-dependent names and numbers taken out."""
    text = "".join(str(dispatcher.overloads[s].library._final_module) for s in dispatcher.signatures)
    text = re.sub(r"B\\d+v\\d+B\\d+\\w+", "B", text)
    text = re.sub(r'\\[\\d+ x i8\\] c"([^"]*_ZN)', r'[K x i8] c"\\1', text)
    text = re.sub(r"B\\d+", "B", text)
    text = re.sub(r"_v\\d+", "_v", text)
    text = re.sub(r"[ \\t]+", " ", text)
    text = re.sub(r" at 0x[0-9a-f]+>", " at ADDR>", text)  # numba's context repr in a constant
    return re.sub(r"\\d{9,}", "N", text)


def report() -> dict:
    """What a user compiles: IR of three njit functions, a stock numba-mode pytensor graph and its values."""
    import pytensor
    import pytensor.tensor as pt

    x = np.linspace(-2.0, 3.0, 11)
    caller = numba.njit(_caller)
    a5 = np.linspace(0.0, 1.0, 32, dtype=np.float32).reshape(2, 2, 2, 2, 2)  # a type nothing else sums
    fast = numba.njit(fastmath=True)(_sum_fast)
    plain = numba.njit(_sum_plain)
    values = [float(caller(x)), float(fast(a5)), float(plain(a5))]
    alloc = numba.njit(_alloc)
    alloc(3)
    zeros = numba.njit(_zeros)
    zeros(3)

    u, v = pt.dvector("u"), pt.dvector("v")
    out = (pt.exp(u) * v + 2.0).sum() + pt.log1p(pt.abs(u)).dot(v)
    fn = pytensor.function([u, v], out, mode="NUMBA")
    values.append(float(fn(x, x[::-1].copy())))
    return {
        "caller": llvm(caller),
        "sum_plain": llvm(plain),
        "alloc": llvm(alloc),
        "zeros": llvm(zeros),
        "plain_fadd_fast": bool(re.search(r"fadd (fast|reassoc)", llvm(plain))),
        "graph": pytensor.dprint(fn, file="str"),
        "values": values,
    }
'''

STOCK = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("pmfast_guest_user", sys.argv[1])
user = importlib.util.module_from_spec(spec)
spec.loader.exec_module(user)
out = user.report()
import gc, pytensor
out["gc_threshold"] = list(gc.get_threshold())
out["traceback_limit"] = pytensor.config.traceback__limit
assert not any(m == "pmfast" or m.startswith("pmfast.") for m in sys.modules), "the stock side imported pmfast"
print(json.dumps(out))
"""


def _user_module(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("pmfast_guest_user", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def left_installed() -> list[str]:
    """Compile-scoped patches of the registry that act outside a pmfast compile (empty: none).

    Outside a compile each target must be the owner's object, or a pmfast replacement that asks
    ``patching.active()`` (marked ``_pmfast_scoped``) while no compile is active in this thread.
    """
    from pmfast.compiler import patching

    found = []
    for p in patching.patches():
        if p.scope != "compile":
            continue
        try:
            current = p.current()
        except (AttributeError, ImportError):
            continue  # not an attribute (gc, sys.modules, config): checked by value in the test
        ours = getattr(current, "_pmfast", False) or str(getattr(current, "__module__", "")).startswith("pmfast")
        ours = ours or type(current).__module__.startswith("pmfast")
        if ours and (patching.active() or not getattr(current, "_pmfast_scoped", None)):
            found.append(p.target)
    if patching.active():
        found.append("patching.active()")
    return found


@pytest.fixture(scope="module")
def user_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("guest") / "pmfast_guest_user.py"
    path.write_text(USER_CODE)
    return path


@pytest.fixture(scope="module")
def stock(user_path, tmp_path_factory):
    """The user's compiles in a fresh process that never imports pmfast.

    With its own pytensor compile directory: pytensor's shared numba cache holds stock node
    functions that pmfast's process-wide overloads were typed into (see
    :func:`test_a_users_array_allocation_is_numbas`), and loading one imports pmfast.
    """
    import os

    base = tmp_path_factory.mktemp("stock_compiledir")
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={base}", "NUMBA_CACHE_DIR": str(base / "numba_cache")}
    run = subprocess.run([sys.executable, "-c", STOCK, str(user_path)], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def after_pmfast(user_path, tiny_model_source):
    """The same compiles in this process, after ``pmfast.compile`` of a small model."""
    import pytensor

    import pmfast

    import numba

    from pmfast.compiler import patching

    namespace = {}
    exec(tiny_model_source, namespace)
    compiled = pmfast.compile(namespace["build_model"]())
    assert compiled.n_dim == 2
    with patching.compiling():  # what pmfast's compiles may compile: np.zeros's implementation, with pmfast's allocator
        numba.njit(_user_module(user_path)._zeros)(4)
    assert not left_installed(), left_installed()
    out = _user_module(user_path).report()
    out["gc_threshold"] = list(gc.get_threshold())
    out["traceback_limit"] = pytensor.config.traceback__limit
    return out


def test_user_compiles_after_pmfast_equal_a_process_without_it(stock, after_pmfast):
    assert stock["plain_fadd_fast"], "numba reuses the fast-math np.sum subroutine (what the check relies on)"
    for key in ("caller", "sum_plain", "graph", "gc_threshold", "traceback_limit"):
        assert after_pmfast[key] == stock[key], key
    np.testing.assert_allclose(after_pmfast["values"], stock["values"], rtol=1e-12)
    assert not left_installed()


def test_a_left_active_compile_scope_is_seen(stock, user_path, after_pmfast):
    """Negative check: with pmfast's compile scope left active, the detector and the IR comparison both fail."""
    from pmfast.compiler import patching

    with patching.compiling():
        leaked = left_installed()
        inside = _user_module(user_path).report()
    assert "numba.core.ssa:_run_ssa" in leaked and "numba.core.base:BaseContext.subtarget" in leaked
    assert not inside["plain_fadd_fast"] and inside["sum_plain"] != stock["sum_plain"]
    assert not left_installed()


def test_a_replacement_installed_unscoped_is_seen(monkeypatch):
    """Negative check: pmfast's SSA pass bound directly (not through the scoped dispatcher) is reported."""
    from numba.core import ssa

    from pmfast.compiler import ssa as fast

    assert not left_installed()
    monkeypatch.setattr(ssa, "_run_ssa", fast.run_ssa)
    assert left_installed() == ["numba.core.ssa:_run_ssa"]


def test_a_users_array_allocation_is_numbas(stock, after_pmfast):
    """pmfast's allocator overload acts inside its compiles only, and an overload's implementation
    compiled inside one (``np.zeros``'s) is not reused outside (:mod:`pmfast.compiler.overloads`)."""
    assert "pmfast8compiler" not in stock["zeros"] and "_ol_array_allocate" in stock["zeros"]
    assert after_pmfast["alloc"] == stock["alloc"]
    assert after_pmfast["zeros"] == stock["zeros"]


_STOCK_GRAPH = """
import numpy as np
import pytensor
import pytensor.tensor as pt

def stock_function():
    v, n = pt.dvector("v"), pt.lscalar("n")
    z = pt.set_subtensor(pt.zeros(n + 2)[1:-1], v)  # an allocation and a slice assignment (with its shape error)
    out = pt.concatenate([z, pt.exp(v), pt.alloc(2.0, n)])
    return pytensor.function([v, n], out, mode="NUMBA")
"""

_WITH_PMFAST = _STOCK_GRAPH + """
import pytensor.tensor as pt
import pmfast
from pmfast import compiler
compiler.setup()  # what pmfast.compile installs first
x = pt.dvector("x")
y = pt.dvector("y")
ours = pytensor.function([x, y], [pt.concatenate([pt.zeros(3), pt.set_subtensor(x[1:], y)]), pt.exp(x)], mode=pmfast.get_mode("all"))
ours(np.ones(4), np.ones(3))
print(list(stock_function()(np.arange(3.0), 3)))
"""

_WITHOUT_PMFAST = _STOCK_GRAPH + """
import sys, os

class NoPmfast:
    def find_spec(self, name, path=None, target=None):
        if name == "pmfast" or name.startswith("pmfast."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden)", name=name)

sys.meta_path.insert(0, NoPmfast())

def files():
    out = {}
    for d in sys.argv[1:]:
        for root, _, names in os.walk(d):
            for f in names:
                p = os.path.join(root, f)
                out[p] = (os.path.getsize(p), os.path.getmtime(p))
    return out

before = files()
fn = stock_function()
values = list(fn(np.arange(3.0), 3))
assert not any(m == "pmfast" or m.startswith("pmfast.") for m in sys.modules)
changed = sorted(p for p, v in files().items() if before.get(p) != v and p.endswith((".nbi", ".nbc")))
print(values)
print(changed)
"""


def test_stock_cache_entries_written_after_pmfast_load_without_pmfast(tmp_path):
    """A stock numba-mode pytensor function compiled after a pmfast compile, in the same process and
    cache, writes entries that a process where pmfast is not importable loads (and compiles nothing)."""
    import os

    base, numba_cache = tmp_path / "compiledir", tmp_path / "numba"
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={base}", "NUMBA_CACHE_DIR": str(numba_cache)}
    first = subprocess.run([sys.executable, "-c", _WITH_PMFAST], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run([sys.executable, "-c", _WITHOUT_PMFAST, str(base), str(numba_cache)],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    values, changed = second.stdout.strip().splitlines()[-2:]
    assert values == first.stdout.strip().splitlines()[-1]
    assert changed == "[]", f"the process without pmfast compiled again: {changed}"
