"""tools/owner_junit.py and owner_tests.py's three-way report, on small synthetic junit files."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
owner_junit = pytest.importorskip("owner_junit")
owner_tests = pytest.importorskip("owner_tests")
Case = owner_junit.Case


def junit(tmp_path, name, cases):
    body = "".join(f'<testcase classname="m" name="{n}">{inner}</testcase>' for n, inner in cases)
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return path


def test_read_junit_outcomes_and_crash(tmp_path):
    path = junit(tmp_path, "a.xml", [
        ("ok", ""),
        ("bad", '<failure message="assert 12 == 3">long</failure>'),
        ("err", '<error message="fixture broke" />'),
        ("skip", '<skipped message="slow" />'),
        ("died", "<failure message=\"worker 'gw1' crashed while running 'm.py::died'\" />"),
        ("bad", ""),  # reported twice (call failed, teardown passed): the worst is kept
    ])
    found = owner_junit.read_junit(path)
    assert {t: c.outcome for t, c in found.items()} == {
        "m::ok": "passed", "m::bad": "failed", "m::err": "error", "m::skip": "skipped", "m::died": "crashed"}
    assert found["m::bad"].message == "assert 12 == 3"
    assert owner_junit.counts(found) == {"passed": 1, "failed": 1, "error": 1, "crashed": 1, "timeout": 0, "skipped": 1}


def test_progress_file_marks_the_unfinished_test_crashed(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("start\tm::a\ndone\tm::a\tpassed\t\nstart\tm::b\n")
    found = owner_junit.read_progress(path)
    assert found["m::a"].outcome == "passed" and found["m::b"].outcome == "crashed"


def test_a_timed_out_pytest_process_reports_timeout_not_crash(tmp_path):
    (tmp_path / "test_t.py").write_text("import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    time.sleep(60)\n")
    found, seconds, _ = owner_junit.run_pytest(["-p", "no:xdist", "test_t.py"], tmp_path, {}, timeout=20.0)
    assert seconds < 50
    assert found["test_t::test_a"].outcome == "passed"
    assert found["test_t::test_b"].outcome == "timeout" and found["<timeout>"].outcome == "timeout"
    assert not any(c.outcome == "crashed" for c in found.values())


def test_only_bad_ignores_failures_stock_shares_and_counts_new_ones(tmp_path):
    stock = {"m::a": Case("failed"), "m::b": Case("passed"), "m::c": Case("skipped"), "m::d": Case("passed")}
    other = {"m::a": Case("failed"), "m::b": Case("crashed"), "m::c": Case("error"), "m::d": Case("passed"),
             "m::new": Case("failed")}
    assert list(owner_junit.only_bad(stock, other)) == ["m::b", "m::c", "m::new"]
    assert owner_junit.differences(stock, other) == {
        "m::b": ("passed", "crashed"), "m::c": ("skipped", "error"), "m::new": (None, "failed")}


def test_suite_report_per_way(tmp_path):
    stock = owner_junit.read_junit(junit(tmp_path, "s.xml", [("a", ""), ("b", "")]))
    mode = owner_junit.read_junit(junit(tmp_path, "m.xml", [("a", '<failure message="assert False" />'), ("b", "")]))
    report = owner_tests.suite_report({"stock": (stock, 1.0), "mode": (mode, 2.0), "enable": (stock, 1.5)})
    assert report["counts"]["mode"]["failed"] == 1 and report["counts"]["stock"]["failed"] == 0
    assert report["only_under_pmfast"] == {"mode": {"m::a": ["failed", "assert False"]}, "enable": {}}


def test_known_harness_differences_are_set_apart_only_with_their_message():
    """A KNOWN (way, test) failing with its known message is listed apart and does not count against pmfast;
    the same test failing another way (a wrong value), or under another way, still does."""
    (way, tid), (messages, _) = next(iter(owner_tests.KNOWN.items()))
    message = messages[0]
    other_way = next(w for w in owner_tests.WAYS if w not in ("stock", way))
    stock = {tid: Case("passed")}
    report = owner_tests.suite_report({"stock": (stock, 1.0), way: ({tid: Case("failed", message)}, 1.0),
                                       other_way: ({tid: Case("failed", message)}, 1.0)})
    assert report["only_under_pmfast"][way] == {} and list(report["known"][way]) == [tid]
    assert list(report["only_under_pmfast"][other_way]) == [tid]
    report = owner_tests.suite_report({"stock": (stock, 1.0), way: ({tid: Case("failed", "assert 1.0 == 2.0")}, 1.0)})
    assert list(report["only_under_pmfast"][way]) == [tid] and report["known"][way] == {}


def test_files_run_apart_get_pytest_processes_of_their_own():
    chunks = owner_tests.suite_chunks(None)
    assert chunks[0][0] == owner_tests.SUITE
    assert [f"--ignore={p}" for p in owner_tests.SUITE_APART] == chunks[0][1:]
    assert chunks[1:] == [[p] for p in owner_tests.SUITE_APART]


def test_pytensor_run_covers_every_test_file_the_registry_names():
    """``owner_tests.py pytensor`` runs each pytensor test file a patch names (the static-shape patch's
    ``tests/tensor/test_basic.py`` included); the numba suite is run by ``numba-suite``."""
    from pmfast.compiler import patches

    paths = owner_tests.pytensor_paths()
    named = {t.split("::")[0] for p in patches() for t in p.owner_tests if t.startswith("tests/")}
    assert "tests/tensor/test_basic.py" in paths
    assert set(paths) == {t for t in named if not t.startswith(owner_tests.SUITE)}


def test_linker_leaves_a_pure_python_function_alone():
    """pytensor's ``eval_python_only`` mocks ``numba_njit`` to return the function itself; pmfast's
    linker wrapped it as a dispatcher (``AttributeError: 'function' object has no attribute 'compile'``
    in ``test_solve_discrete_lyapunov[direct]``)."""
    from pmfast.linker import _in_scope

    def f(x):
        return x + 1

    f.py_func = f
    assert _in_scope(f) is f and f(1) == 2
