"""Building pytensor Modes from a pass selection, and the plugin switch.

``get_mode`` builds the stock NUMBA pipeline plus the selected passes' tags.
The plugin (``enable``/``disable``/``enabled``) instead adds the ``numba`` tag
to the selected passes' optdb entries, so that the stock ``"NUMBA"`` mode —
which nutpie hard-codes and ``pm.sample(nuts_sampler="nutpie")`` reaches —
runs them too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from pmfast.passes import registry

PassSelection = str | Iterable[str] | None


def get_mode(passes: PassSelection = "all"):
    """A numba ``Mode``: stock NUMBA rewrites plus the selected pmfast passes.

    ``passes="none"`` is exactly the stock NUMBA pipeline.
    """
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.link.numba.linker import NumbaLinker

    selected = registry.select(passes)
    tags = [p.tag for p in selected]
    linker = NumbaLinker()
    if any(p.name == "wide_split" for p in selected):
        # wide_split's safety net for nodes it can't split: chunked wide calls (pmfast/linker.py)
        from pmfast.linker import ChunkedNumbaLinker

        linker = ChunkedNumbaLinker()
    return Mode(linker, RewriteDatabaseQuery(include=["fast_run", "numba", *tags]))


_enabled: list[str] = []


def enable(passes: PassSelection = "all") -> None:
    """Make the stock NUMBA mode run the selected pmfast passes (until :func:`disable`)."""
    from pytensor.compile import optdb

    selected = registry.select(passes)
    disable()
    for p in selected:
        for entry, _ in p.entries:
            optdb.add_tags(entry, "numba")
            _enabled.append(entry)


def disable() -> None:
    """Undo :func:`enable`: the stock NUMBA mode is stock again."""
    from pytensor.compile import optdb

    while _enabled:
        entry = _enabled.pop()
        if entry in optdb.__db__:
            optdb.remove_tags(entry, "numba")


def is_enabled() -> list[str]:
    """Names of the passes the plugin currently adds to the stock NUMBA mode."""
    entries = set(_enabled)
    return [p.name for p in registry.available() if any(e in entries for e, _ in p.entries)]


@contextlib.contextmanager
def enabled(passes: PassSelection = "all"):
    """``with pmfast.enabled():`` — the plugin, scoped; restores the previous state on exit."""
    previous = is_enabled()
    enable(passes)
    try:
        yield
    finally:
        disable()
        if previous:
            enable(previous)
