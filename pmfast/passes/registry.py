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
    #: node rewriters inside a stock database of optdb (``canonicalize``...): (database, entry)
    nested: list[tuple[str, str]] = field(default_factory=list)
    #: stock rewrites this pass stands in for, excluded from a mode that selects it
    replaces: tuple[str, ...] = ()
    #: whether the plugin (:func:`pmfast.enable`) adds this pass to the stock NUMBA mode (a pass that
    #: prepares for pmfast's compile path only, e.g. ``data_hoist``'s marks, does not)
    plugin: bool = True

    @property
    def tag(self) -> str:
        return f"pmfast.{self.name}"

    @property
    def position(self) -> float | None:
        """Position of the first entry in optdb (the pass's place in the pipeline); an entry
        inside a stock database counts at that database's position."""
        from pytensor.compile import optdb

        nested = (optdb.__position__[database] for database, _ in self.nested)
        return min((*(p for _, p in self.entries), *nested), default=None)

    def register(self, rewriter, position: float, name: str | None = None) -> None:
        """Register ``rewriter`` in the global optdb at ``position`` under this pass's tag."""
        from pytensor.compile import optdb

        entry = f"pmfast.{self.name}.{name or getattr(rewriter, '__name__', type(rewriter).__name__)}"
        optdb.register(entry, rewriter, "pmfast", self.tag, position=position)
        self.entries.append((entry, position))

    def register_in(self, database: str, rewriter, name: str | None = None) -> None:
        """Register the node rewriter ``rewriter`` inside optdb's stock ``database`` (e.g.
        ``"canonicalize"``), under this pass's tag: it runs in that database's loop, where the
        stock rewrites create the nodes it matches."""
        entry = f"pmfast.{self.name}.{name or getattr(rewriter, '__name__', type(rewriter).__name__)}"
        stock_database(database).register(entry, rewriter, "pmfast", self.tag)
        self.nested.append((database, entry))

    def __str__(self) -> str:
        return f"{self.name:<18} {self.position!s:<7} {self.description}"


PASSES: dict[str, Pass] = {}


def stock_database(name: str):
    """optdb's rewrite database ``name`` (``canonicalize``, ``specialize``, ...)."""
    from pytensor.compile import optdb

    (database,) = optdb.__db__[name]
    return database


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
    for database, entry in p.nested:
        _drop(stock_database(database), entry, p.tag)
    for entry, _ in p.entries:
        _drop(optdb, entry, p.tag)


def _drop(db, entry: str, tag: str) -> None:
    """Remove ``entry`` from the rewrite database ``db``."""
    db.remove_tags(entry, "pmfast", tag)
    rewriter = db.__db__.pop(entry).pop()
    db._names.discard(entry)
    db.__db__[type(rewriter).__name__].discard(rewriter)
    for table in ("__position__", "__final__", "__cleanup__"):
        getattr(db, table, {}).pop(entry, None)


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
    "pmfast.passes.index_dtypes",
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
    "pmfast.passes.unit_axes",
    "pmfast.passes.vector_math",
    "pmfast.passes.affine_sums",
    "pmfast.passes.early_diag",
    "pmfast.passes.cholesky_grad",
    "pmfast.passes.sum_of_products",
    "pmfast.passes.data_hoist",
]
