"""Running an owner's pytest suite in a fresh process and comparing per-test outcomes (``tools/owner_tests.py``).

Outcomes come from pytest's junit XML: ``passed``, ``failed``, ``error``, ``skipped``, and
``crashed`` for a test whose pytest-xdist worker died under it (an LLVM abort: xdist reports
``worker 'gw0' crashed while running '<id>'``). When the XML is missing (the whole pytest process
died, or timed out), the outcomes come from the progress file that ``owner_plugin`` writes as
tests finish, a test started but never finished showing as ``crashed`` (``timeout`` when the
process was stopped for its time limit: the tests it had not reached are then missing from the
counts); a process that left neither shows as the single id ``<crash>``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: junit XML child tags of a test case, and the outcome each means (first match wins)
JUNIT_OUTCOMES = (("failure", "failed"), ("error", "error"), ("skipped", "skipped"))
BAD = frozenset({"failed", "error", "crashed", "timeout"})
LABELS = ("passed", "failed", "error", "crashed", "timeout", "skipped")
CRASH_MARK = "crashed while running"


@dataclass(frozen=True)
class Case:
    outcome: str
    message: str = ""


def test_id(classname: str | None, name: str | None) -> str:
    return f"{classname}::{name}"


def read_junit(xml_path: Path) -> dict[str, Case]:
    """Test id → :class:`Case` from a junit XML file (a test reported twice keeps its worst outcome)."""
    result: dict[str, Case] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        tid = test_id(case.get("classname"), case.get("name"))
        found = Case("passed")
        for tag, label in JUNIT_OUTCOMES:
            child = case.find(tag)
            if child is not None:
                message = child.get("message") or (child.text or "")
                if CRASH_MARK in message or CRASH_MARK in (child.text or ""):
                    label = "crashed"
                found = Case(label, first_line(message))
                break
        if tid not in result or rank(found.outcome) > rank(result[tid].outcome):
            result[tid] = found
    return result


def outcomes(xml_path: Path) -> dict[str, str]:
    """Test id → outcome label from a junit XML file."""
    return {tid: case.outcome for tid, case in read_junit(xml_path).items()}


def rank(outcome: str) -> int:
    """Severity order of outcomes, so that a test's worst phase (call, teardown) is the one kept."""
    return ("passed", "skipped", "failed", "error", "timeout", "crashed").index(outcome) if outcome in LABELS else 6


def first_line(message: str, width: int = 240) -> str:
    line = next((s.strip() for s in message.splitlines() if s.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def read_progress(path: Path, timed_out: bool = False) -> dict[str, Case]:
    """Outcomes from ``owner_plugin``'s progress file: ``start``/``done`` lines, tab-separated.

    A test id is the junit one (``classname::name``); started and not done means crashed, or
    ``timeout`` if the process was stopped for its time limit.
    """
    unfinished = (Case("timeout", "the pytest process reached its time limit while running it") if timed_out
                  else Case("crashed", "process died while running it"))
    result: dict[str, Case] = {}
    for line in path.read_text().splitlines():
        kind, tid, *rest = line.split("\t")
        if kind == "start":
            result.setdefault(tid, unfinished)
        elif kind == "done":
            result[tid] = Case(rest[0], rest[1] if len(rest) > 1 else "")
    return result


def counts(found: dict[str, Case] | dict[str, str]) -> dict[str, int]:
    labels = [c.outcome if isinstance(c, Case) else c for c in found.values()]
    return {k: labels.count(k) for k in LABELS}


def run_pytest(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[dict[str, Case], float, str]:
    """One pytest process with ``owner_plugin`` loaded: (outcomes, seconds, tail of its output)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", **env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        xml, progress = Path(tmp) / "out.xml", Path(tmp) / "progress.tsv"
        env["PMFAST_OWNER_PROGRESS"] = str(progress)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "owner_plugin", "-p", "no:cacheprovider",
               f"--junitxml={xml}", *args]
        start, timed_out = time.perf_counter(), False
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            code, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
        except subprocess.TimeoutExpired as exc:
            code, tail = -9, f"timeout after {timeout} s: {str(exc.stdout or '')[-2000:]}"
            timed_out = True
        seconds = time.perf_counter() - start
        if xml.exists() and not timed_out:
            found = read_junit(xml)
        elif progress.exists():
            found = read_progress(progress, timed_out)
        else:
            found = {}
    if timed_out:
        found["<timeout>"] = Case("timeout", f"stopped after {timeout:.0f} s (--timeout): tests it had not reached did not run")
    elif code not in (0, 1, 5) and not any(c.outcome == "crashed" for c in found.values()):
        found["<crash>"] = Case("crashed", f"pytest exit {code}")
    return found, seconds, tail


def differences(base: dict, other: dict) -> dict[str, tuple]:
    """Test id → (base outcome, other outcome) wherever they differ (``None``: not run on that side)."""
    label = lambda c: None if c is None else (c.outcome if isinstance(c, Case) else c)  # noqa: E731
    return {t: (label(base.get(t)), label(other.get(t))) for t in sorted(base.keys() | other.keys())
            if label(base.get(t)) != label(other.get(t))}


def only_bad(base: dict[str, Case], other: dict[str, Case]) -> dict[str, Case]:
    """Tests that fail, err or crash in ``other`` and not in ``base`` (passed, skipped or absent there)."""
    return {t: c for t, c in sorted(other.items())
            if c.outcome in BAD and (t not in base or base[t].outcome not in BAD)}
