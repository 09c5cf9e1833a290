"""Run the owners' tests of what pmfast replaces, without and with pmfast's replacements, and compare.

    python tools/owner_tests.py numba                      # numba's tests of the replaced areas
    python tools/owner_tests.py pytensor --checkout DIR    # pytensor's (the registry's paths), from a checkout of tag rel-2.38.3
    python tools/owner_tests.py numba --modules test_ssa test_inlining --json out.json
    python tools/owner_tests.py numba-suite --checkout DIR --compiled-only -n 2 --json out.json

Each test file runs twice in fresh pytest processes: as shipped, and with every replacement of
:mod:`pmfast.compiler.patching` installed process-wide for the whole session (the plugin
``tools/owner_plugin.py``: :func:`install_everywhere`), compile-scoped ones included. The two
outcome sets (per test id, from junit XML) must be equal; the differences are printed and written
to ``--json``. numba ships its tests in its wheel; pytensor's come from a checkout
(``git archive rel-2.38.3 tests conftest.py`` of pymc-devs/pytensor), never from this repository.

``numba-suite`` runs pytensor's ``tests/link/numba/`` (not-slow tests; ``test_random.py`` in a
pytest process of its own) three ways: as shipped (``stock``), with the tests' ``numba_mode``
replaced by ``pmfast.get_mode("all")`` (``mode``), and with the stock NUMBA mode plus
``pmfast.enable()`` (``enable``) — see ``tools/owner_plugin.py``. ``--compiled-only`` turns off the
suite's pure-python evaluation of each numba function (``eval_obj_mode``). It prints the counts per
way and every test that fails, errs or crashes (a pytest-xdist worker dying under it) under a
pmfast way and not under ``stock``; the exit status is 1 if there is any that :data:`KNOWN` does not
explain.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from owner_junit import Case, counts, differences, only_bad, run_pytest

NUMBA_MODULES = (
    "test_ssa",
    "test_analysis",
    "test_ir_utils",
    "test_ir_inlining",
    "test_inlining",
    "test_dispatcher",
    "test_caching",
    "test_array_manipulation",
    "test_exceptions",
    "test_array_constants",
    "test_extending",
)
SUITE = "tests/link/numba"


def pytensor_paths() -> list[str]:
    """The pytensor test files the patch registry names as owners' tests (``tests/link/numba/`` is the
    ``numba-suite``'s)."""
    from pmfast.compiler import patches

    named = {t.split("::")[0] for p in patches() for t in p.owner_tests if t.startswith("tests/")}
    return sorted(t for t in named if not t.startswith(SUITE))


SUITE_APART = ("tests/link/numba/test_random.py",)

#: Failures under a pmfast way that are the harness's, not pmfast's: (way, test id) -> (the failure
#: messages it may have, why): the first line of junit's message (``assert False`` of an
#: ``assert isinstance(...)``) or the progress file's ``file:line: AssertionError``, compared whole, so
#: the same test failing another way (a value, an exception) is still reported as pmfast's. Each is
#: checked by hand and described in docs/compile.md ("pytensor's numba suite under pmfast").
KNOWN = {
    ("mode", f"tests.link.numba.test_elemwise::test_CAReduce[<lambda>-{case}]"): (
        ("test_elemwise.py:366: AssertionError", "assert False"),
        "the test asserts its compiled graph's one node is a CAReduce; its Prod (axis=() of a matrix, "
        "axis=None of a 0-d input) is an identity that stock fast_run's canonicalize rewrite "
        "local_useless_reduce replaces by its input (one DeepCopyOp node left). The tests' own "
        "numba_mode runs only numba-tagged rewrites; pmfast.get_mode runs fast_run as "
        "get_mode('NUMBA') does, which leaves the same DeepCopyOp. Values equal stock's.")
    for case in ("axis8-v8", "None-v9")
} | {
    ("mode", "tests.link.numba.test_blockwise::test_repeated_args"): (
        ("test_blockwise.py:74: AssertionError", "assert False"),
        "the test asserts that x @ x of a tensor3 compiles to a BlockwiseWithCoreShape; stock fast_run's "
        "specialize rewrite specialize_matmul_to_batched_dot makes it a BatchedDot (get_mode('NUMBA') "
        "alike), which the tests' numba-tags-only numba_mode does not run. Values equal stock's."),
}
WAYS = ("stock", "mode", "enable")


def run(path: str, patched: bool, cwd: Path, timeout: float) -> tuple[dict, float]:
    """Outcomes of one pytest process over ``path``, without or with every pmfast patch installed."""
    found, seconds, _ = run_pytest([path], cwd, {"PMFAST_OWNER_PATCHES": "1" if patched else "0"}, timeout)
    return found, seconds


def suite_chunks(paths: list[str] | None) -> list[list[str]]:
    """pytest argument lists for one way: the suite without the files run apart, then each of those."""
    if paths:
        return [list(paths)]
    return [[SUITE, *(f"--ignore={p}" for p in SUITE_APART)], *([p] for p in SUITE_APART)]


def run_way(way: str, cwd: Path, paths, workers: int, compiled_only: bool, timeout: float):
    """All outcomes of one way, and the seconds it took."""
    env = {"PMFAST_SUITE_WAY": way, "PMFAST_SUITE_COMPILED_ONLY": "1" if compiled_only else "0"}
    xdist = ["-n", str(workers), "--max-worker-restart=1000"] if workers else ["-p", "no:xdist"]
    found, total = {}, 0.0
    for chunk in suite_chunks(paths):
        part, seconds, tail = run_pytest([*xdist, "-m", "not slow", *chunk], cwd, env, timeout)
        if "<crash>" in part:
            part["<crash>"] = Case("crashed", f"{' '.join(chunk)}: {part['<crash>'].message}: {tail[-300:]}")
        found.update(part)
        total += seconds
    return found, total


def suite_report(results: dict[str, tuple[dict, float]]) -> dict:
    """Counts per way and, per pmfast way, the tests that fail only there (with their first message line)."""
    stock = results["stock"][0]
    report = {"counts": {w: counts(f) for w, (f, _) in results.items()},
              "seconds": {w: round(t, 1) for w, (_, t) in results.items()},
              "only_under_pmfast": {}, "differences": {}}
    for way, (found, _) in results.items():
        if way == "stock":
            continue
        bad = only_bad(stock, found)
        known = {t: c for t, c in bad.items() if (way, t) in KNOWN and c.message in KNOWN[way, t][0]}
        report["only_under_pmfast"][way] = {t: [c.outcome, c.message] for t, c in bad.items() if t not in known}
        report.setdefault("known", {})[way] = {t: [c.outcome, KNOWN[way, t][1]] for t, c in known.items()}
        report["differences"][way] = differences(stock, found)
    return report


def print_suite(report: dict) -> None:
    for way, c in report["counts"].items():
        print(f"{way:7s} {sum(c.values()):5d} tests  " + "  ".join(f"{k} {v}" for k, v in c.items())
              + f"  ({report['seconds'][way]:.0f} s)")
    for way, bad in report["only_under_pmfast"].items():
        print(f"failing only under pmfast ({way}): {len(bad)}")
        for tid, (outcome, message) in bad.items():
            print(f"    {outcome:7s} {tid}\n            {message}")
    for way, known in report.get("known", {}).items():
        if known:
            print(f"known harness differences ({way}, KNOWN in tools/owner_tests.py): {len(known)}")
            for tid, (outcome, why) in known.items():
                print(f"    {outcome:7s} {tid}")


def main_suite(args, parser) -> int:
    if args.checkout is None or not (args.checkout / SUITE).is_dir():
        parser.error(f"numba-suite needs --checkout DIR holding pytensor's {SUITE} (git archive rel-2.38.3 tests conftest.py)")
    if "stock" not in args.ways:
        parser.error("--ways must include stock (the reference)")
    results = {}
    for way in args.ways:
        results[way] = run_way(way, args.checkout, args.modules, args.workers, args.compiled_only, args.timeout)
        print(f"{way}: done in {results[way][1]:.0f} s", flush=True)
    report = suite_report(results)
    report["compiled_only"] = args.compiled_only
    print_suite(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if any(report["only_under_pmfast"].values()) else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("owner", choices=["numba", "pytensor", "numba-suite"])
    parser.add_argument("--checkout", type=Path, help="pytensor checkout (tests/ and conftest.py at rel-2.38.3)")
    parser.add_argument("--modules", nargs="*", help="numba test modules or pytensor test paths (default: all listed)")
    parser.add_argument("--timeout", type=float, default=7200.0, help="seconds per pytest process (a whole way of the numba suite takes ~30 min on a loaded 2-core machine)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compiled-only", action="store_true", help="numba-suite: no pure-python evaluation (eval_obj_mode off)")
    parser.add_argument("-n", "--workers", type=int, default=2, help="numba-suite: pytest-xdist workers (0: none)")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="numba-suite: which ways")
    args = parser.parse_args(argv)
    if args.owner == "numba-suite":
        return main_suite(args, parser)
    if args.owner == "numba":
        import numba.tests

        cwd = Path(numba.tests.__file__).parent
        paths = [f"{m}.py" for m in (args.modules or NUMBA_MODULES)]
    else:
        if args.checkout is None or not (args.checkout / "tests").is_dir():
            parser.error("pytensor needs --checkout DIR holding pytensor's tests/ (git archive rel-2.38.3 tests conftest.py)")
        cwd, paths = args.checkout, list(args.modules or pytensor_paths())
        missing = [p for p in paths if not (cwd / p.split("::")[0]).exists()]
        if missing:
            parser.error(f"not in the checkout: {', '.join(missing)}")
    report, same = {}, True
    for path in paths:
        plain, t_plain = run(path, False, cwd, args.timeout)
        patched, t_patched = run(path, True, cwd, args.timeout)
        diff = differences(plain, patched)
        report[path] = {"plain": counts(plain), "tests": len(plain), "differences": diff, "seconds": [round(t_plain, 1), round(t_patched, 1)]}
        same &= not diff and bool(plain)
        status = "same" if not diff else f"{len(diff)} DIFFERENT"
        print(f"{path:45s} {len(plain):5d} tests {counts(plain)}  {status}  ({t_plain:.0f} s / {t_patched:.0f} s)", flush=True)
        for tid, (a, b) in list(diff.items())[:20]:
            print(f"    {tid}: {a} -> {b}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
