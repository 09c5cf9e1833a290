"""Run the owners' tests of what pmfast replaces, without and with pmfast's replacements, and compare.

    python tools/owner_tests.py numba                      # numba's tests of the replaced areas
    python tools/owner_tests.py pytensor --checkout DIR    # pytensor's, from a checkout of tag rel-2.38.3
    python tools/owner_tests.py numba --modules test_ssa test_inlining --json out.json

Each test file runs twice in fresh pytest processes: as shipped, and with every replacement of
:mod:`pmfast.compiler.patching` installed process-wide for the whole session (the plugin
``tools/owner_plugin.py``: :func:`install_everywhere`), compile-scoped ones included. The two
outcome sets (per test id, from junit XML) must be equal; the differences are printed and written
to ``--json``. numba ships its tests in its wheel; pytensor's come from a checkout
(``git archive rel-2.38.3 tests conftest.py`` of pymc-devs/pytensor), never from this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

NUMBA_MODULES = (
    "test_ssa",
    "test_ir_inlining",
    "test_inlining",
    "test_dispatcher",
    "test_caching",
    "test_array_manipulation",
    "test_exceptions",
    "test_array_constants",
)
PYTENSOR_PATHS = (
    "tests/tensor/test_extra_ops.py",
    "tests/graph/test_features.py",
    "tests/tensor/test_var.py",
    "tests/link/c/test_op.py",
)
HERE = Path(__file__).resolve().parent
#: junit XML child tags of a test case, and the outcome each means
JUNIT_OUTCOMES = (("failure", "failed"), ("error", "error"), ("skipped", "skipped"))


def outcomes(xml_path: Path) -> dict[str, str]:
    """Test id → ``passed``/``failed``/``error``/``skipped`` from a junit XML file."""
    result = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        result[tid] = next((label for tag, label in JUNIT_OUTCOMES if tag in kinds), "passed")
    return result


def run(path: str, patched: bool, cwd: Path, timeout: float) -> tuple[dict[str, str], float]:
    """Outcomes of one pytest process over ``path``; a crashed process shows as the id ``<crash>``."""
    env = {**os.environ, "PMFAST_OWNER_PATCHES": "1" if patched else "0", "PYTHONHASHSEED": "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "out.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "owner_plugin", "-p", "no:cacheprovider", path,
               f"--junitxml={xml}"]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = -9
        seconds = time.perf_counter() - start
        found = outcomes(xml) if xml.exists() else {}
    if code < 0 or (code not in (0, 1, 5) and not found):
        found["<crash>"] = f"exit {code}"
    return found, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("owner", choices=["numba", "pytensor"])
    parser.add_argument("--checkout", type=Path, help="pytensor checkout (tests/ and conftest.py at rel-2.38.3)")
    parser.add_argument("--modules", nargs="*", help="numba test modules or pytensor test paths (default: all listed)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest process")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.owner == "numba":
        import numba.tests

        cwd = Path(numba.tests.__file__).parent
        paths = [f"{m}.py" for m in (args.modules or NUMBA_MODULES)]
    else:
        if args.checkout is None or not (args.checkout / "tests").is_dir():
            parser.error("pytensor needs --checkout DIR holding pytensor's tests/ (git archive rel-2.38.3 tests conftest.py)")
        cwd, paths = args.checkout, list(args.modules or PYTENSOR_PATHS)
    report, same = {}, True
    for path in paths:
        plain, t_plain = run(path, False, cwd, args.timeout)
        patched, t_patched = run(path, True, cwd, args.timeout)
        diff = {t: (plain.get(t), patched.get(t)) for t in sorted(plain.keys() | patched.keys()) if plain.get(t) != patched.get(t)}
        counts = {k: sum(v == k for v in plain.values()) for k in ("passed", "failed", "error", "skipped")}
        report[path] = {"plain": counts, "tests": len(plain), "differences": diff, "seconds": [round(t_plain, 1), round(t_patched, 1)]}
        same &= not diff and bool(plain)
        status = "same" if not diff else f"{len(diff)} DIFFERENT"
        print(f"{path:45s} {len(plain):5d} tests {counts}  {status}  ({t_plain:.0f} s / {t_patched:.0f} s)", flush=True)
        for tid, (a, b) in list(diff.items())[:20]:
            print(f"    {tid}: {a} -> {b}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
