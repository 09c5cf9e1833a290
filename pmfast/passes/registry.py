"""The registry of pmfast passes: names, optdb entries, selection, and what fired.

A *pass* is one or more graph rewriters registered in pytensor's global
``optdb`` under the tag ``pmfast.<name>`` (and ``pmfast``). Entries carry no
``fast_run``/``numba`` tag, so the stock NUMBA mode never sees them unless
:func:`pmfast.mode.get_mode` includes the tag or the plugin
(:func:`pmfast.enable`) adds ``numba`` to them.

Rewrites report success with :func:`record`, which counts on the
``FunctionGraph`` being rewritten; :func:`fired` reads the counts back from a
compiled function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

ALL = "all"
NONE = "none"


@dataclass
class Pass:
    """A named, switchable group of optdb entries."""

    name: str
    description: str
    entries: list[tuple[str, float]] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return f"pmfast.{self.name}"

    @property
    def position(self) -> float | None:
        """Position of the first entry in optdb (the pass's place in the pipeline)."""
        return min((p for _, p in self.entries), default=None)

    def register(self, rewriter, position: float, name: str | None = None) -> None:
        """Register ``rewriter`` in the global optdb at ``position`` under this pass's tag."""
        from pytensor.compile import optdb

        entry = f"pmfast.{self.name}.{name or getattr(rewriter, '__name__', type(rewriter).__name__)}"
        optdb.register(entry, rewriter, "pmfast", self.tag, position=position)
        self.entries.append((entry, position))

    def __str__(self) -> str:
        return f"{self.name:<18} {self.position!s:<7} {self.description}"


PASSES: dict[str, Pass] = {}


class UnknownPassError(ValueError):
    pass


def register_pass(name: str, description: str) -> Pass:
    """Create (or return the existing) pass ``name``."""
    if name in (ALL, NONE):
        raise ValueError(f"{name!r} is reserved")
    if name not in PASSES:
        PASSES[name] = Pass(name, description)
    return PASSES[name]


def unregister_pass(name: str) -> None:
    """Remove a pass and its optdb entries (used by tests for throwaway passes)."""
    from pytensor.compile import optdb

    p = PASSES.pop(name)
    for entry, _ in p.entries:
        optdb.remove_tags(entry, "pmfast", p.tag)
        rewriter = optdb.__db__.pop(entry).pop()
        optdb._names.discard(entry)
        optdb.__db__[type(rewriter).__name__].discard(rewriter)
        if hasattr(optdb, "__position__"):
            optdb.__position__.pop(entry, None)


def available() -> list[Pass]:
    """All registered passes, in pipeline order."""
    _load_builtin()
    return sorted(PASSES.values(), key=lambda p: (p.position or 0.0, p.name))


def select(passes: str | Iterable[str] | None) -> list[Pass]:
    """Resolve a pass selection: ``"all"``, ``"none"``, a name, a comma list, or a list of names."""
    _load_builtin()
    if passes is None or passes == NONE:
        return []
    if passes == ALL:
        return available()
    if isinstance(passes, str):
        passes = [p.strip() for p in passes.split(",") if p.strip()]
    names = list(passes)
    if names in ([ALL], [NONE]):
        return select(names[0])
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        known = ", ".join(sorted(PASSES)) or "(none registered)"
        raise UnknownPassError(f"unknown pass {', '.join(map(repr, unknown))}; known passes: {known}")
    return [p for p in available() if p.name in names]


def record(fgraph, pass_name: str, n: int = 1) -> None:
    """Count ``n`` successful rewrites of ``pass_name`` on ``fgraph``."""
    counts = getattr(fgraph, "_pmfast_fired", None)
    if counts is None:
        counts = Counter()
        fgraph._pmfast_fired = counts
    counts[pass_name] += n


def fired(obj) -> dict[str, int]:
    """How often each pass fired on a compiled function, FunctionGraph or compiled model.

    Accepts a pytensor ``Function``, a ``FunctionGraph``, or a compiled nutpie
    model (its logp/gradient function is inspected).
    """
    fgraph = obj
    if hasattr(obj, "logp_func"):
        fgraph = obj.logp_func
    if hasattr(fgraph, "maker"):
        fgraph = fgraph.maker.fgraph
    return dict(getattr(fgraph, "_pmfast_fired", {}))


_loaded = False


def _load_builtin() -> None:
    """Import the built-in pass modules so that they register themselves."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib

    for mod in BUILTIN:
        importlib.import_module(mod)


BUILTIN: list[str] = [
    "pmfast.passes.scan_dedup",
    "pmfast.passes.indexed_elemwise",
    "pmfast.passes.invariant_switch",
    "pmfast.passes.sibling_fusion",
    "pmfast.passes.scatter_loops",
    "pmfast.passes.wide_split",
    "pmfast.passes.softmax_rows",
    "pmfast.passes.shared_math",
    "pmfast.passes.gather_lifting",
    "pmfast.passes.scalarize",
    "pmfast.passes.vector_math",
]
