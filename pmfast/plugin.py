"""The plugin switch: ``pmfast.enable()`` / ``disable()`` / ``enabled()``.

Until it is disabled, the plugin does two things:

* it adds the ``numba`` tag to the selected passes' optdb entries, so that the
  stock ``"NUMBA"`` mode runs them too (any ``pytensor.function(...,
  mode="NUMBA")``, pymc's numba sampling path);
* it routes ``nutpie.compile_pymc_model`` (numba backend), which
  ``pm.sample(nuts_sampler="nutpie")`` calls, to :func:`pmfast.compile` with
  the same passes: pmfast's cached sampler callbacks and kernels, not only
  its graph passes. Other backends go to nutpie unchanged.

It also defines the compiler-runtime helpers numba's JIT misses
(:func:`pmfast.compiler.symbols.define_helpers`, process-wide and only adding what was undefined),
so that the stock linker's integer powers link instead of aborting the process.

It stands above :mod:`pmfast.frontend` (whose ``compile`` it routes to) and :mod:`pmfast.mode`.
"""

from __future__ import annotations

import contextlib

from pmfast.frontend import compile as pmfast_compile
from pmfast.mode import PassSelection
from pmfast.passes import registry

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
        return pmfast_compile(model, passes=passes, **kwargs)

    compile_pymc_model.__wrapped__ = original
    compile_pymc_model.passes = passes
    _routed["compile_pymc_model"] = original
    nutpie.compile_pymc_model = compile_pymc_model


def enable(passes: PassSelection = "all") -> None:
    """Make the stock NUMBA mode run the selected pmfast passes and route nutpie's compile to pmfast.

    Until :func:`disable` (see the module docstring).
    """
    from pytensor.compile import optdb

    from pmfast.compiler import symbols

    routed = registry.select(passes)
    selected = [p for p in routed if p.plugin]
    disable()
    # the stock linker links what pmfast's rewrites give it: an integer power LLVM lowers to a
    # compiler-runtime call (``__powisf2``) must link, not abort (stock aborts on it too)
    symbols.define_helpers()
    for p in selected:
        for entry, _ in p.entries:
            optdb.add_tags(entry, "numba")
            _enabled.append(entry)
        for database, entry in p.nested:
            registry.stock_database(database).add_tags(entry, "numba")
            _enabled_nested.append((database, entry))
    _route_nutpie(tuple(p.name for p in routed))


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
    import nutpie

    # the routed selection: it also holds passes the stock mode never runs (data_hoist)
    previous = list(getattr(nutpie.compile_pymc_model, "passes", is_enabled())) if _routed else None
    enable(passes)
    try:
        yield
    finally:
        disable()
        if previous is not None:
            enable(previous)
