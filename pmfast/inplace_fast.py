"""pytensor's in-place rewrites with each change judged locally instead of by a whole-graph validation.

Every candidate of pytensor's in-place rewriters (``inplace_elemwise``, ``local_inplace_setsubtensor``,
``blockwise_inplace``, ``local_inplace_AdvancedIncSubtensor*``) goes through
``fgraph.replace_all_validate``: the replacement, then ``fgraph.validate()``, whose DestroyHandler
rebuilds the destroyed roots and the orderings of every destroyer and checks the whole graph for a
cycle: O(graph) per candidate, O(graph²) per stage. Its ``has_destroyers``, asked for every
candidate input, rebuilds the destroyed roots after every change too.

In pmfast's mode these rewriters run wrapped (:class:`FastInplace`), on their fgraph only and only
while they run, with two stand-ins:

* ``fgraph.replace_all_validate`` makes the replacement as pytensor's does, then asks
  :func:`judge` what the validation would answer. A change that turned one node ``N`` into ``N'``
  (same inputs, neither a view, ``N`` no destroyer) is decided from the trees ``N'`` destroys
  (each destroyed input's view root and its views): certain failures (multiple destroyers, a
  constant, indestructible, protected or output variable destroyed, input aliasing, an output
  ``NoOutputFromInplace`` keeps) are reverted and raised as ``InconsistencyError``, as the
  validation would; otherwise the only new orderings are "every other reader of the tree before
  ``N'``", and a kept topological order (:class:`pmfast.inplace_order.TopologicalOrder`) decides
  whether they close a cycle: readers already before ``N`` add forward edges; for later ones a
  search bounded by their positions either finds a path from ``N'`` (a cycle: refused) or
  repairs the order. Every other destroyer's orderings are the old ones with ``N`` renamed
  ``N'``. Every other change (new nodes, views, ...) is validated by pytensor, and the order is
  rebuilt when one is accepted;
* ``fgraph.has_destroyers`` answers from the variable's view tree (:func:`has_destroyers`).

The argument needs the graph valid before each change: checked when a wrapper starts (else it
stays out of the way); every later change is judged or validated and a refused one is reverted.
The wrapper also stays out of the way when a feature whose ``validate`` it does not account for is
attached, under the DestroyHandler's ``fast`` cycle detection and with ``optimizer_verbose``.
``check=True`` (tests) validates every judged change as well and counts disagreements.

Rewriters that run after the destroy handler without making anything in place pay the same
whole-graph validation per change: ``local_useless_unbatched_blockwise`` (stock, :data:`LATE`) and
pmfast's ``indexed_elemwise.inplace`` run wrapped too (``late=True``). Their usual change swaps a
node for one with the same inputs, ``destroy_map`` and outputs (a Blockwise for its core op): the
destroy handler's state is then the old one with the node renamed, valid as before, so
:func:`judge` answers :data:`VALID` (``renamed``) unless an input it destroys is aliased. A
Blockwise with length-1 batch dims becomes a chain instead (squeezes, the core op, an expand):
:mod:`pmfast.inplace_chain` decides those.

``PMFAST_INPLACE_FAST=0`` runs the wrapped rewriters exactly as pytensor's; ``=check`` runs the
judged path in check mode (every judgement validated as well; slow, for verification).
``PMFAST_LATE_FAST=0`` runs the ``late`` wrappers' rewriters unwrapped.
"""

from __future__ import annotations

import os
from collections import Counter

from pytensor.graph.rewriting.basic import GraphRewriter

from pmfast.inplace_chain import chain_core, judge_chain
from pmfast.inplace_order import TopologicalOrder, aliased, view_tree

#: stock rewriters run wrapped in pmfast's mode (optdb entry names)
WRAPPED = (
    "blockwise_inplace",
    "local_inplace_setsubtensor",
    "inplace_elemwise",
    "local_inplace_AdvancedIncSubtensor",
    "local_inplace_AdvancedIncSubtensor1",
)
#: stock rewriters after the destroy handler that make nothing in place, run wrapped with ``late=True``
LATE = ("local_useless_unbatched_blockwise",)
TAG = "pmfast_inplace_fast"
SUFFIX = ".pmfast_fast"


def enabled() -> bool:
    """Whether the wrappers judge changes locally (``PMFAST_INPLACE_FAST=0``: pytensor's path)."""
    return os.environ.get("PMFAST_INPLACE_FAST", "1") != "0"


def late_enabled() -> bool:
    """Whether the ``late`` wrappers act (``PMFAST_LATE_FAST=0``: their rewriters run unwrapped)."""
    return os.environ.get("PMFAST_LATE_FAST", "1") != "0"


def _known_validators() -> tuple[type, ...]:
    """Feature classes whose ``validate`` :func:`judge` accounts for."""
    from pytensor.compile.function.types import Supervisor
    from pytensor.graph.destroyhandler import DestroyHandler
    from pytensor.graph.features import NoOutputFromInplace, ReplaceValidate

    return (DestroyHandler, ReplaceValidate, Supervisor, NoOutputFromInplace)


def has_destroyers(fgraph, variables) -> bool:
    """``fgraph.has_destroyers(variables)`` of pytensor's regular cycle detection, from the view trees.

    pytensor answers whether a variable's view root (the end of its ``view_i`` chain) is destroyed,
    from maps of every destroyed root it rebuilds after any change. A root is destroyed when a
    node destroys an input in its view tree (the root and its transitive ``view_o`` views), so the
    tree's clients answer it. The same answer on a valid graph (the only kind the wrapper runs on).
    """
    handler = fgraph.destroy_handler
    view_i, view_o, clients = handler.view_i, handler.view_o, fgraph.clients
    for var in variables:
        root = var
        while root in view_i:
            root = view_i[root]
        stack = [root]
        while stack:
            t = stack.pop()
            for node, i in clients.get(t, ()):
                destroy_map = node.op.destroy_map
                if destroy_map and any(i in inputs for inputs in destroy_map.values()):
                    return True
            stack.extend(view_o.get(t, ()))
    return False


VALID, INVALID = "valid", "invalid"


def judge(
    fgraph,
    old,
    new,
    nodes_before: int,
    protected: frozenset,
    supervised: bool,
    kept_outputs: frozenset,
    positions,
    renamed: bool = False,
) -> tuple[str | None, list]:
    """pytensor's validation of the graph after replacing node ``old`` by ``new`` (done), when it is certain.

    Only for a change that turned ``old`` (no view) into ``new`` (same inputs, no view, destroying
    what ``old`` destroyed and more), nothing else entering or leaving the graph; otherwise
    ``None``. The inputs ``old`` destroyed keep their orderings (renamed) and are checked for
    input aliasing only; for each input ``v`` that ``new`` destroys anew (one per output,
    distinct), its *tree* (its view root and every view of that root) decides:

    * :data:`INVALID` (pytensor's validation raises ``InconsistencyError``) when another node
      already destroys a variable of the tree or ``new`` destroys two inputs of one tree (multiple
      destroyers), the tree holds a constant or indestructible variable, or, with a ``Supervisor``
      attached, a protected variable or a graph output, or ``new`` reads the tree at another
      input the op does not tolerate (input aliasing), or an output ``new`` destroys into is a
      graph output a ``NoOutputFromInplace`` keeps (its index in ``kept_outputs``);
    * otherwise :data:`VALID` when no other input of ``new`` lies in the tree (no input aliasing),
      provided the caller orders the returned *late* readers before ``new`` without a cycle
      (:meth:`TopologicalOrder.add_before`): the readers of the tree other than ``new`` that do
      not come before ``old`` in ``positions`` (a topological order of the graph before the change,
      destroy orderings included). The orderings added ("readers before ``new``") then point
      forward and every other destroyer's orderings are the old ones with ``old`` renamed ``new``,
      so no cycle appears. ``positions`` is ``None`` when no order is at hand (a tree with readers
      is then not judged);
    * with ``renamed``, :data:`VALID` for a change that only renamed ``old``: ``new`` destroys
      exactly what ``old`` did (``None`` if it reads a destroyed input's tree at another input);
    * ``None`` otherwise.
    """
    from pytensor.graph.basic import Constant
    from pytensor.graph.fg import Output

    if old is None or new is None or old is new:
        return None, []
    nodes = fgraph.apply_nodes
    if old in nodes or new not in nodes or len(nodes) != nodes_before:
        return None, []
    if old.op.view_map or new.op.view_map:
        return None, []
    before = old.op.destroy_map
    if any(new.op.destroy_map.get(out_idx) != inputs for out_idx, inputs in before.items()):
        return None, []
    if len(new.inputs) != len(old.inputs) or any(a is not b for a, b in zip(new.inputs, old.inputs)):
        return None, []
    destroy_map = new.op.destroy_map
    handler = fgraph.destroy_handler
    if renamed and len(destroy_map) == len(before) and len(new.outputs) == len(old.outputs):
        # every ordering, root and client of the graph before, with old read as new
        for inputs in destroy_map.values():
            for i in inputs:
                if aliased(new, i, set(view_tree(handler, new.inputs[i]))):
                    return None, []
        return VALID, []
    if len(destroy_map) == len(before) or any(len(inputs) != 1 for inputs in destroy_map.values()):
        return None, []
    clients = fgraph.clients
    verdict = VALID
    roots = set()
    late = []
    for out_idx, (i,) in destroy_map.items():
        if any(isinstance(node.op, Output) and node.op.idx in kept_outputs for node, _ in clients.get(new.outputs[out_idx], ())):
            return INVALID, []
        v = new.inputs[i]
        tree = view_tree(handler, v)
        if tree[0] in roots:
            return INVALID, []
        roots.add(tree[0])
        members = set(tree)
        if aliased(new, i, members):
            return INVALID, []
        if out_idx in before:
            continue
        readers = []
        for t in tree:
            if isinstance(t, Constant) or getattr(t.tag, "indestructible", False):
                return INVALID, []
            if supervised and t in protected:
                return INVALID, []
            for node, j in clients.get(t, ()):
                if node is new:
                    continue
                if isinstance(node.op, Output):
                    if supervised:
                        return INVALID, []
                    verdict = None
                    continue
                node_destroys = node.op.destroy_map
                if node_destroys and any(j in inputs for inputs in node_destroys.values()):
                    return INVALID, []
                readers.append(node)
        if readers and verdict is VALID:
            if positions is None or old not in positions:
                verdict = None
            else:
                here = positions[old]
                if any(r not in positions for r in readers):
                    verdict = None
                else:
                    late.extend(r for r in readers if positions[r] > here)
    return verdict, (late if verdict is VALID else [])


def has_readers(fgraph, old, new) -> bool:
    """Before replacing ``old`` by ``new``: whether a tree (:func:`view_tree`) of an input ``new``
    destroys has a client besides ``old`` (then :func:`judge` needs a topological order)."""
    handler, clients = fgraph.destroy_handler, fgraph.clients
    for inputs in new.op.destroy_map.values():
        for i in inputs:
            for t in view_tree(handler, new.inputs[i]):
                if any(client is not old for client, _ in clients.get(t, ())):
                    return True
    return False


class FastValidation:
    """Within ``with``: ``fgraph``'s ``replace_all_validate`` and ``has_destroyers`` stand-ins (module docstring)."""

    def __init__(self, fgraph, check: bool = False, renamed: bool = False):
        from pytensor.compile.function.types import Supervisor
        from pytensor.graph.features import NoOutputFromInplace, ReplaceValidate

        self.fgraph = fgraph
        #: tests: validate proven changes anyway and compare ``has_destroyers`` with pytensor's (AssertionError if they differ)
        self.check = check
        #: whether :func:`judge` answers a renamed node (the ``late`` wrappers)
        self.renamed = renamed
        self.stats: Counter = Counter()
        self.checker = next(f for f in fgraph._features if isinstance(f, ReplaceValidate))
        supervisors = [f for f in fgraph._features if isinstance(f, Supervisor)]
        self.supervised = bool(supervisors)
        self.protected = frozenset(v for f in supervisors for v in f.protected)
        self.kept_outputs = frozenset(i for f in fgraph._features if isinstance(f, NoOutputFromInplace) for i in f.protected_out_ids)
        self.order: TopologicalOrder | None = None

    @staticmethod
    def usable(fgraph) -> bool:
        """Whether the stand-ins may act on ``fgraph`` (features known, regular detection, valid now)."""
        from pytensor.configdefaults import config
        from pytensor.graph.features import ReplaceValidate

        handler = getattr(fgraph, "destroy_handler", None)
        if handler is None or handler.algo == "fast" or config.optimizer_verbose:
            return False
        known = _known_validators()
        features = fgraph._features
        if not any(isinstance(f, ReplaceValidate) for f in features):
            return False
        if any(getattr(f, "validate", None) is not None and not isinstance(f, known) for f in features):
            return False
        try:
            fgraph.validate()
        except Exception:
            return False
        return True

    def __enter__(self):
        fgraph = self.fgraph
        self.saved = {name: fgraph.__dict__[name] for name in ("replace_all_validate", "has_destroyers")}
        self.original = self.saved["replace_all_validate"]
        fgraph.replace_all_validate = self.replace_all_validate
        fgraph.has_destroyers = self.has_destroyers
        return self

    def __exit__(self, *exc):
        self.fgraph.__dict__.update(self.saved)
        return False

    def has_destroyers(self, variables) -> bool:
        """:func:`has_destroyers` on this fgraph."""
        answer = has_destroyers(self.fgraph, variables)
        if self.check and answer != self.saved["has_destroyers"](variables):
            self._failed(f"has_destroyers({variables}) answered {answer}")
        return answer

    def _failed(self, what: str):
        """Check mode: count the disagreement (a rewriter may swallow the exception) and raise."""
        self.stats["check_failed"] += 1
        raise AssertionError(what)

    def _confirm(self, fgraph, what: str):
        """Check mode: a change judged valid must pass pytensor's validation too."""
        if self.check:
            try:
                fgraph.validate()
            except Exception as error:
                self._failed(f"{what} failed validation: {error}")

    def topological_order(self) -> TopologicalOrder:
        """A topological order of the (valid) graph, destroy orderings included; kept through the
        changes :func:`judge` accepts, dropped after any other accepted change."""
        if self.order is None:
            self.order = TopologicalOrder(self.fgraph)
        return self.order

    def verdict(self, old, new, nodes_before: int, order) -> str | None:
        """:func:`judge`'s verdict on the change just made, its late readers ordered before ``new``
        in ``order`` (a cycle refutes the change)."""
        if self.checker.fail_validate:
            return None
        positions = None if order is None else order.pos
        verdict, late = judge(
            self.fgraph, old, new, nodes_before, self.protected, self.supervised, self.kept_outputs, positions, self.renamed
        )
        if verdict is VALID and order is not None:
            order.rename(old, new)
            order.accepted(new)
            if late and not order.add_before(late, new):
                order.refused(new)
                order.rename(new, old)
                self.stats["cycle"] += 1
                return INVALID
            self.stats["reordered"] += bool(late)
        return verdict

    def replace_all_validate(self, replacements, reason=None, verbose=None, **kwargs):
        """pytensor's ``replace_all_validate``, its validation replaced by :func:`judge`'s verdict when it has one."""
        from pytensor.graph.utils import InconsistencyError

        fgraph = self.fgraph
        replacements = list(replacements)
        if verbose or not replacements:
            return self.original(replacements, reason=reason, verbose=verbose, **kwargs)
        old = replacements[0][0].owner
        new = replacements[0][1].owner
        chain = chain_core(old, replacements) if self.renamed and old is not None else None
        if chain is not None and not self.checker.fail_validate:
            return self.replace_chain(replacements, old, *chain, reason=reason, verbose=verbose, **kwargs)
        if old is None or new is None or any(r.owner is not old or n.owner is not new for r, n in replacements):
            self.stats["validated"] += 1
            self.order = None
            return self.original(replacements, reason=reason, verbose=verbose, **kwargs)
        try:
            if self.renamed and new.op.destroy_map == old.op.destroy_map:
                order = self.order  # a renamed node needs no order (kept renamed when there is one)
            else:
                order = self.topological_order() if has_readers(fgraph, old, new) else self.order
        except Exception:
            if self.check:
                raise
            order = self.order = None
        chk = fgraph.checkpoint()
        nodes_before = len(fgraph.apply_nodes)
        try:
            for r, new_r in replacements:
                fgraph.replace(r, new_r, reason=reason, verbose=False, **kwargs)
        except Exception:
            # pytensor's own path reports and raises the failure as it does
            fgraph.revert(chk)
            self.order = None
            return self.original(replacements, reason=reason, verbose=verbose, **kwargs)
        try:
            verdict = self.verdict(old, new, nodes_before, order)
        except Exception:
            # never worse than pytensor: an unexpected failure here leaves the decision to its validation
            if self.check:
                raise
            self.stats["judge_failed"] += 1
            verdict = self.order = None
        if verdict is VALID:
            self.stats["proven"] += 1
            if old.op.destroy_map == new.op.destroy_map:
                self.stats["renamed"] += 1
            elif old.op.destroy_map:
                self.stats["widened"] += 1
            self._confirm(fgraph, f"proven change of {old}")
            return chk
        if verdict is INVALID:
            self.stats["refuted"] += 1
            if self.check:
                try:
                    fgraph.validate()
                except InconsistencyError:
                    pass
                else:
                    self._failed(f"refuted change of {old} passed validation")
            fgraph.revert(chk)
            raise InconsistencyError("in-place change refuted (multiple destroyers, a protected variable, aliasing or a cycle)")
        self.stats["validated"] += 1
        try:
            fgraph.validate()
        except Exception:
            fgraph.revert(chk)
            raise
        self.order = None
        return chk


    def replace_chain(self, replacements, old, core, views, reason=None, verbose=None, **kwargs):
        """A :func:`chain_core` replacement, made, then :func:`judge_chain`'s verdict or pytensor's validation."""
        fgraph = self.fgraph
        chk = fgraph.checkpoint()
        nodes_before = len(fgraph.apply_nodes)
        self.order = None
        try:
            for r, new_r in replacements:
                fgraph.replace(r, new_r, reason=reason, verbose=False, **kwargs)
        except Exception:
            fgraph.revert(chk)
            return self.original(replacements, reason=reason, verbose=verbose, **kwargs)
        try:
            verdict = judge_chain(fgraph, old, core, views, nodes_before)
        except Exception:
            if self.check:
                raise
            verdict = False
        if verdict:
            self.stats["proven"] += 1
            self.stats["chain"] += 1
            self._confirm(fgraph, f"proven chain replacing {old}")
            return chk
        self.stats["validated"] += 1
        try:
            fgraph.validate()
        except Exception:
            fgraph.revert(chk)
            raise
        return chk


class FastInplace(GraphRewriter):
    """A stock in-place graph rewriter run under :class:`FastValidation` on its fgraph."""

    def __init__(self, inner, check: bool = False, late: bool = False):
        self.inner = inner
        self.check = check
        #: a rewriter after the destroy handler that makes nothing in place (module docstring)
        self.late = late

    def add_requirements(self, fgraph):
        self.inner.add_requirements(fgraph)

    def apply(self, fgraph, *args, **kwargs):
        if not enabled() or (self.late and not late_enabled()) or not FastValidation.usable(fgraph):
            return self.inner.apply(fgraph, *args, **kwargs)
        check = self.check or os.environ.get("PMFAST_INPLACE_FAST") == "check"
        with FastValidation(fgraph, check, renamed=self.late) as fast:
            prof = self.inner.apply(fgraph, *args, **kwargs)
        counts = getattr(fgraph, "_pmfast_inplace_fast", None)
        if counts is None:
            counts = fgraph._pmfast_inplace_fast = Counter()
        counts.update(fast.stats)
        return prof

    def print_profile(self, stream, prof, level=0):
        self.inner.print_profile(stream, prof, level)

    def print_summary(self, stream=None, level=0, depth=-1):
        import sys

        print(f"{' ' * level}{type(self).__name__}", file=stream or sys.stdout)
        self.inner.print_summary(stream or sys.stdout, level + 2, depth)


_registered: list[str] = []


def register() -> tuple[str, ...]:
    """Register a :class:`FastInplace` beside each stock entry of :data:`WRAPPED` and :data:`LATE` (same position;
    the name's suffix keeps its order among the entries of that position); returns the stock names."""
    from pytensor.compile import optdb

    if not _registered:
        for name in WRAPPED + LATE:
            if name not in optdb.__db__:
                continue
            (inner,) = optdb.__db__[name]
            wrapper = FastInplace(inner, late=name in LATE)
            optdb.register(name + SUFFIX, wrapper, TAG, position=optdb.__position__[name])
            _registered.append(name)
    return tuple(_registered)
