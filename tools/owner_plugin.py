"""pytest plugin of ``tools/owner_tests.py``, set up by environment variables (inherited by xdist workers).

* ``PMFAST_OWNER_PATCHES=1``: every pmfast patch installed process-wide for the session; ``0``:
  none, with pytensor's numba backend imported (as pmfast imports it), so the two runs differ by
  pmfast's patches alone.
* ``PMFAST_SUITE_WAY`` (pytensor's ``tests/link/numba/``): ``stock`` leaves the tests as shipped;
  ``mode`` replaces the tests' ``numba_mode`` (and ``numba_inplace_mode``) by
  ``pmfast.get_mode("all")`` before any test module imports it from ``tests.link.numba.test_basic``,
  ``compare_numba_and_py``'s and ``eval_python_only``'s defaults included; ``enable`` turns
  ``pmfast.enable()`` on, so the tests' own stock NUMBA modes run pmfast's passes.
* ``PMFAST_SUITE_COMPILED_ONLY=1``: ``compare_numba_and_py`` no longer also evaluates the numba
  functions as pure Python (its ``eval_obj_mode`` default off).
* ``PMFAST_OWNER_PROGRESS=FILE``: the controller appends ``start``/``done`` lines per test, so that
  outcomes survive a pytest process that dies before writing its junit XML.
"""

import os

_scopes = []
_worst: dict[str, tuple[str, str]] = {}
_ORDER = ("passed", "skipped", "failed", "error", "crashed")
_controller = False


def pytest_configure(config):
    global _controller
    _controller = not hasattr(config, "workerinput")
    if os.environ.get("PMFAST_OWNER_PATCHES") == "1":
        from pmfast.compiler import install_everywhere

        _scopes.append(install_everywhere())
        _scopes[-1].__enter__()
    elif os.environ.get("PMFAST_OWNER_PATCHES") == "0":
        # the plain run holds what pmfast imports but does not patch: pytensor's numba backend, whose
        # own @overloads numba's test_extending inspects (its _cholesky's signature fails there alike)
        import pytensor.link.numba.dispatch  # noqa: F401
    way = os.environ.get("PMFAST_SUITE_WAY")
    compiled_only = os.environ.get("PMFAST_SUITE_COMPILED_ONLY") == "1"
    if way not in (None, "", "stock", "mode", "enable"):
        raise ValueError(f"PMFAST_SUITE_WAY={way!r}: one of stock, mode, enable")
    if way == "enable":
        import pmfast

        pmfast.enable("all")
    if way == "mode" or compiled_only:
        import tests.link.numba.test_basic as basic

        if way == "mode":
            import pmfast

            mode = pmfast.get_mode("all")
            basic.numba_mode = mode
            basic.numba_inplace_mode = mode.including("inplace")
            basic.compare_numba_and_py.__kwdefaults__["numba_mode"] = mode
            basic.eval_python_only.__defaults__ = (mode,)
        if compiled_only:
            basic.compare_numba_and_py.__kwdefaults__["eval_obj_mode"] = False


def pytest_unconfigure(config):
    while _scopes:
        _scopes.pop().__exit__(None, None, None)


def _progress(*fields):
    path = os.environ.get("PMFAST_OWNER_PROGRESS")
    if path and _controller:
        with open(path, "a") as f:
            f.write("\t".join(s.replace("\t", " ").replace("\n", " ") for s in fields) + "\n")


def _junit_id(nodeid: str) -> str:
    from _pytest.junitxml import mangle_test_address

    names = mangle_test_address(nodeid)
    return f"{'.'.join(names[:-1])}::{names[-1]}"


def pytest_runtest_logstart(nodeid, location):
    _progress("start", _junit_id(nodeid))


def pytest_runtest_logreport(report):
    outcome = "error" if report.failed and report.when not in ("call", "???") else report.outcome
    message = str(report.longrepr).strip().splitlines()[-1] if report.failed and report.longrepr else ""
    if "crashed while running" in message:  # pytest-xdist's report of a worker that died under the test
        outcome = "crashed"
    previous = _worst.get(report.nodeid, ("passed", ""))
    if _ORDER.index(outcome) > _ORDER.index(previous[0]):
        _worst[report.nodeid] = (outcome, message)


def pytest_runtest_logfinish(nodeid, location):
    outcome, message = _worst.pop(nodeid, ("passed", ""))
    _progress("done", _junit_id(nodeid), outcome, message)


def pytest_report_header(config):
    way = os.environ.get("PMFAST_SUITE_WAY")
    if not way:
        return None
    import tests.link.numba.test_basic as basic

    import pmfast

    defaults = basic.compare_numba_and_py.__kwdefaults__
    return (f"pmfast suite way {way}: numba_mode linker {type(defaults['numba_mode'].linker).__name__}, "
            f"eval_obj_mode {defaults['eval_obj_mode']}, pmfast.enable() passes {pmfast.is_enabled() or 'none'}")
