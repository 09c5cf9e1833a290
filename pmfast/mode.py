"""Building pytensor Modes from a pass selection, and the plugin switch.

``get_mode`` builds the stock NUMBA pipeline plus the selected passes' tags.
The plugin (``enable``/``disable``/``enabled``) does two things until it is
disabled:

* it adds the ``numba`` tag to the selected passes' optdb entries, so that the
  stock ``"NUMBA"`` mode runs them too (any ``pytensor.function(...,
  mode="NUMBA")``, pymc's numba sampling path);
* it routes ``nutpie.compile_pymc_model`` (numba backend), which
  ``pm.sample(nuts_sampler="nutpie")`` calls, to :func:`pmfast.compile` with
  the same passes: pmfast's cached sampler callbacks and kernels, not only
  its graph passes. Other backends go to nutpie unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from pmfast.passes import registry

PassSelection = str | Iterable[str] | None


def get_mode(passes: PassSelection = "all"):
    """A numba ``Mode``: stock NUMBA rewrites plus the selected pmfast passes, pmfast's linker.

    ``passes="none"`` is exactly the stock NUMBA pipeline (pytensor's linker).
    """
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.link.numba.linker import NumbaLinker

    selected = registry.select(passes)
    tags = [p.tag for p in selected]
    linker = NumbaLinker()
    if selected:
        # pmfast's code generation (pmfast/linker.py): chunked wide calls (wide_split's safety
        # net), pmfast's op implementations and cache keys
        from pmfast.linker import ChunkedNumbaLinker

        linker = ChunkedNumbaLinker()
    # local_usmm fuses sparse products into a C-only op; its pattern's constraint reads
    # config.blas__ldflags, which probes the C compiler (~0.3 s per process) on dense graphs too
    exclude = ["local_usmm"] if selected else []
    exclude += [name for p in selected for name in p.replaces]
    return Mode(linker, RewriteDatabaseQuery(include=["fast_run", "numba", *tags], exclude=exclude))


_enabled: list[str] = []
_enabled_nested: list[tuple[str, str]] = []


_routed: dict = {}
"""nutpie's own ``compile_pymc_model`` while the plugin routes it to pmfast."""


def _route_nutpie(passes: tuple[str, ...]) -> None:
    import nutpie

    original = _routed.get("compile_pymc_model", nutpie.compile_pymc_model)

    def compile_pymc_model(model, *, backend="numba", gradient_backend="pytensor", **kwargs):
        """``nutpie.compile_pymc_model``, routed to ``pmfast.compile`` by ``pmfast.enable()``."""
        if str(backend).lower() != "numba" or str(gradient_backend).lower() != "pytensor":
            return original(model, backend=backend, gradient_backend=gradient_backend, **kwargs)
        from pmfast.frontend import compile

        return compile(model, passes=passes, **kwargs)

    compile_pymc_model.__wrapped__ = original
    _routed["compile_pymc_model"] = original
    nutpie.compile_pymc_model = compile_pymc_model


def enable(passes: PassSelection = "all") -> None:
    """Make the stock NUMBA mode run the selected pmfast passes and route nutpie's compile to pmfast.

    Until :func:`disable` (see the module docstring).
    """
    from pytensor.compile import optdb

    selected = registry.select(passes)
    disable()
    for p in selected:
        for entry, _ in p.entries:
            optdb.add_tags(entry, "numba")
            _enabled.append(entry)
        for database, entry in p.nested:
            registry.stock_database(database).add_tags(entry, "numba")
            _enabled_nested.append((database, entry))
    _route_nutpie(tuple(p.name for p in selected))


def disable() -> None:
    """Undo :func:`enable`: the stock NUMBA mode and ``nutpie.compile_pymc_model`` are stock again."""
    from pytensor.compile import optdb

    while _enabled:
        entry = _enabled.pop()
        if entry in optdb.__db__:
            optdb.remove_tags(entry, "numba")
    while _enabled_nested:
        database, entry = _enabled_nested.pop()
        db = registry.stock_database(database)
        if entry in db.__db__:
            db.remove_tags(entry, "numba")
    if "compile_pymc_model" in _routed:
        import nutpie

        nutpie.compile_pymc_model = _routed.pop("compile_pymc_model")


def is_enabled() -> list[str]:
    """Names of the passes the plugin currently adds to the stock NUMBA mode (and nutpie's compile)."""
    entries = set(_enabled) | {e for _, e in _enabled_nested}
    return [p.name for p in registry.available() if any(e in entries for e in (*(e for e, _ in p.entries), *(e for _, e in p.nested)))]


@contextlib.contextmanager
def enabled(passes: PassSelection = "all"):
    """``with pmfast.enabled():`` — the plugin, scoped; restores the previous state on exit."""
    previous = is_enabled() if _routed else None
    enable(passes)
    try:
        yield
    finally:
        disable()
        if previous is not None:
            enable(previous)
