"""``scan_dedup``: merge identical traces (states) of one ``Scan`` node.

What it matches
---------------
A ``Scan`` node (``while`` scans included: the condition is shared by all
states and only rewritten through the input mapping) that carries two or more states of the
same kind that provably hold the same values at every step:

* **sit-sot** states (``outputs_info=[x0, x0]``) and **mit-sot** states (same
  taps) whose outer initial buffers are the same computation (compared
  structurally with ``equal_computations`` after stripping ``DeepCopyOp``, so
  two separately built ``AllocEmpty`` + ``set_subtensor`` buffers of the same
  initial value match) and whose inner updates are the same computation once
  duplicated inner inputs are mapped to one representative;
* **nit-sot** outputs with the same outer length and the same inner output
  under that mapping (including nit-sots that read merged states, which the
  stock ``scan_merge_inouts`` cannot see).

Sequences / non-sequences fed the same outer variable are treated as equal
inner inputs while comparing.

The state equivalence is the *greatest* fixpoint of partition refinement
(bisimulation): start with one candidate class per (kind, taps, types, initial
buffer), then repeatedly split a class whose members' updates differ once every
inner input is replaced by its class representative, until nothing splits.
This handles states that read each other (A reads B and B reads A). It
terminates because classes only ever split (at most one round per state).

Why it is safe
--------------
If every member of a class starts from the same buffer and its update is the
same expression of (representatives of) classes, then by induction on the step
number every member holds the same value at every step, so all members' outer
outputs (the whole buffer: initial rows + computed rows) are equal. The
rewrite keeps the first member of each class, replaces the other members'
inner inputs by the kept one's, drops their inner inputs/outputs, outer
initial buffers and outer outputs, rebuilds the ``Scan`` with pytensor's
``ScanArgs`` and redirects every client of a dropped output to the kept output.
Anything unexpected (mit-mot, untraced sit-sot, type mismatches, any
exception) declines: the node is left as is.

Position
--------
See the registration at the bottom (1.605: after ``scan_eqopt2``, before
``scan_save_mem``).
"""

from __future__ import annotations

import logging

from pytensor.compile.function.types import deep_copy_op
from pytensor.graph.basic import Variable, equal_computations
from pytensor.graph.replace import clone_replace
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.graph.traversal import graph_inputs
from pytensor.scan.op import Scan
from pytensor.scan.utils import ScanArgs

from pmfast.passes.registry import record, register_pass

_log = logging.getLogger(__name__)

PASS_NAME = "scan_dedup"


def _origin(v: Variable) -> Variable:
    """Strip the ``DeepCopyOp`` copies pytensor puts around a scan's initial buffer."""
    while v.owner is not None and v.owner.op == deep_copy_op:
        v = v.owner.inputs[0]
    return v


def _same_outer(a: Variable, b: Variable) -> bool:
    if a is b:
        return True
    a, b = _origin(a), _origin(b)
    return a is b or (a.type == b.type and equal_computations([a], [b]))


class _State:
    """One sit-sot / mit-sot state of a parsed Scan: inner inputs (one per tap), inner output, outer input."""

    __slots__ = ("kind", "index", "taps", "outer_in", "inner_ins", "inner_out", "outer_out")

    def __init__(self, kind, index, taps, outer_in, inner_ins, inner_out, outer_out):
        self.kind = kind
        self.index = index
        self.taps = taps
        self.outer_in = outer_in
        self.inner_ins = list(inner_ins)
        self.inner_out = inner_out
        self.outer_out = outer_out

    def compatible(self, other: _State) -> bool:
        return (
            self.kind == other.kind
            and self.taps == other.taps
            and self.inner_out.type == other.inner_out.type
            and self.outer_out.type == other.outer_out.type
            and all(a.type == b.type for a, b in zip(self.inner_ins, other.inner_ins, strict=True))
            and _same_outer(self.outer_in, other.outer_in)
        )


def _group(items, same) -> list[list]:
    """Partition ``items`` into classes of ``same``-equal items (first item of a class is its leader)."""
    classes: list[list] = []
    for it in items:
        for cls in classes:
            if same(cls[0], it):
                cls.append(it)
                break
        else:
            classes.append([it])
    return classes


def _input_equivalences(a: ScanArgs) -> dict[Variable, Variable]:
    """Sequences and non-sequences fed the same outer variable: duplicate inner input -> first one."""
    rep: dict[Variable, Variable] = {}
    for outer, inner in ((a.outer_in_seqs, a.inner_in_seqs), (a.outer_in_non_seqs, a.inner_in_non_seqs)):
        pairs = list(zip(outer, inner, strict=True))
        for cls in _group(pairs, lambda p, q: p[1].type == q[1].type and _same_outer(p[0], q[0])):
            for _, inner_in in cls[1:]:
                rep[inner_in] = cls[0][1]
    return rep


def _mapping(classes: list[list[_State]], base: dict[Variable, Variable]) -> dict[Variable, Variable]:
    rep = dict(base)
    for cls in classes:
        for member in cls[1:]:
            for mine, leaders in zip(member.inner_ins, cls[0].inner_ins, strict=True):
                rep[mine] = leaders
    return rep


def _refine(states: list[_State], base: dict[Variable, Variable]) -> tuple[list[list[_State]], dict]:
    """Greatest-fixpoint partition of ``states`` into classes of provably equal traces."""
    classes = _group(states, lambda s, t: s.compatible(t))
    for _ in range(len(states) + 1):
        rep = _mapping(classes, base)
        outs = [s.inner_out for s in states]
        canon = dict(zip(states, clone_replace(outs, replace=rep) if rep else outs, strict=True))
        new_classes: list[list[_State]] = []
        for cls in classes:
            if len(cls) == 1:
                new_classes.append(cls)
            else:
                new_classes.extend(_group(cls, lambda s, t: equal_computations([canon[s]], [canon[t]])))
        if len(new_classes) == len(classes):
            return classes, rep
        classes = new_classes
    raise RuntimeError("scan_dedup: partition refinement did not converge")  # unreachable


def dedup_scan(node):
    """The replacement outputs for a Scan ``node`` with duplicate traces merged, or ``None``.

    Returns ``(new_outputs, n_dropped)`` where ``new_outputs[i]`` replaces ``node.outputs[i]``.
    """
    op = node.op
    info = op.info
    if info.n_sit_sot + info.n_mit_sot + info.n_nit_sot < 2:
        return None
    a = ScanArgs(node.inputs, node.outputs, op.inner_inputs, op.inner_outputs, info)
    base = _input_equivalences(a)

    states = [
        _State("mit_sot", i, tuple(sl), oi, ii, io, oo)
        for i, (sl, oi, ii, io, oo) in enumerate(
            zip(a.mit_sot_in_slices, a.outer_in_mit_sot, a.inner_in_mit_sot, a.inner_out_mit_sot,
                a.outer_out_mit_sot, strict=True)
        )
    ] + [
        _State("sit_sot", i, (-1,), oi, [ii], io, oo)
        for i, (oi, ii, io, oo) in enumerate(
            zip(a.outer_in_sit_sot, a.inner_in_sit_sot, a.inner_out_sit_sot, a.outer_out_sit_sot, strict=True)
        )
    ]
    classes, rep = _refine(states, base) if states else ([], dict(base))

    # nit-sots never feed back: group them once the state partition is final.
    nit = list(range(len(a.outer_out_nit_sot)))
    nit_canon = clone_replace(a.inner_out_nit_sot, replace=rep) if (rep and nit) else list(a.inner_out_nit_sot)

    def same_nit(i, j):
        return (
            a.inner_out_nit_sot[i].type == a.inner_out_nit_sot[j].type
            and a.outer_out_nit_sot[i].type == a.outer_out_nit_sot[j].type
            and _same_outer(a.outer_in_nit_sot[i], a.outer_in_nit_sot[j])
            and equal_computations([nit_canon[i]], [nit_canon[j]])
        )

    nit_classes = _group(nit, same_nit)

    dropped_states = [m for cls in classes for m in cls[1:]]
    dropped_nit = [m for cls in nit_classes for m in cls[1:]]
    n_dropped = len(dropped_states) + len(dropped_nit)
    if n_dropped == 0:
        return None

    # Outer output to redirect each dropped one to (the leader's old outer output, remapped below).
    leader_of = {}
    for cls in classes:
        for m in cls[1:]:
            leader_of[m.outer_out] = cls[0].outer_out
    for cls in nit_classes:
        for m in cls[1:]:
            leader_of[a.outer_out_nit_sot[m]] = a.outer_out_nit_sot[cls[0]]

    # Rewrite every inner output through the final mapping (dropped inner inputs -> kept ones).
    flat_mm = [o for outs in a.inner_out_mit_mot for o in outs]
    groups = [flat_mm, a.inner_out_mit_sot, a.inner_out_sit_sot, a.inner_out_nit_sot, a.inner_out_shared, a.cond]
    flat = [o for g in groups for o in g]
    new_flat = clone_replace(flat, replace=rep) if rep else flat
    split, k = [], 0
    for g in groups:
        split.append(list(new_flat[k : k + len(g)]))
        k += len(g)
    new_mm, new_ms, new_ss, new_ns, new_sh, new_cond = split
    k, nested = 0, []
    for outs in a.inner_out_mit_mot:
        nested.append(new_mm[k : k + len(outs)])
        k += len(outs)
    a.inner_out_mit_mot = tuple(nested)
    a.inner_out_shared = new_sh
    a.cond = new_cond

    drop_ms = {s.index for s in dropped_states if s.kind == "mit_sot"}
    drop_ss = {s.index for s in dropped_states if s.kind == "sit_sot"}
    drop_ns = set(dropped_nit)

    def keep(seq, drop):
        return [x for i, x in enumerate(seq) if i not in drop]

    a.inner_in_mit_sot = keep(a.inner_in_mit_sot, drop_ms)
    a.outer_in_mit_sot = keep(a.outer_in_mit_sot, drop_ms)
    a.mit_sot_in_slices = tuple(keep(a.mit_sot_in_slices, drop_ms))
    a.inner_out_mit_sot = keep(new_ms, drop_ms)
    a.outer_out_mit_sot = keep(a.outer_out_mit_sot, drop_ms)
    a.inner_in_sit_sot = keep(a.inner_in_sit_sot, drop_ss)
    a.outer_in_sit_sot = keep(a.outer_in_sit_sot, drop_ss)
    a.inner_out_sit_sot = keep(new_ss, drop_ss)
    a.outer_out_sit_sot = keep(a.outer_out_sit_sot, drop_ss)
    a.outer_in_nit_sot = keep(a.outer_in_nit_sot, drop_ns)
    a.inner_out_nit_sot = keep(new_ns, drop_ns)
    a.outer_out_nit_sot = keep(a.outer_out_nit_sot, drop_ns)

    # The rebuilt inner graph must not read any dropped inner input.
    dropped_inner = {v for s in dropped_states for v in s.inner_ins}
    if dropped_inner & set(graph_inputs(a.inner_outputs)):
        return None

    new_op = Scan(
        a.inner_inputs,
        a.inner_outputs,
        a.info,
        mode=op.mode,
        truncate_gradient=op.truncate_gradient,
        name=op.name,
        profile=op.profile,
        allow_gc=op.allow_gc,
        strict=op.strict,
    )
    new_outs = new_op(*a.outer_inputs, return_list=True)
    kept_old = a.outer_outputs  # old outer outputs that survive, in the new node's output order
    remap = dict(zip(kept_old, new_outs, strict=True))
    replacements = [remap[leader_of.get(o, o)] for o in node.outputs]
    if any(old.type != new.type for old, new in zip(node.outputs, replacements, strict=True)):
        return None
    return replacements, n_dropped


@node_rewriter([Scan])
def scan_dedup(fgraph, node):
    """Merge identical sit-sot / mit-sot / nit-sot traces of one Scan node (see module docstring)."""
    try:
        res = dedup_scan(node)
    except Exception:  # never break compilation: decline
        _log.debug("scan_dedup declined on %s", node, exc_info=True)
        return None
    if res is None:
        return None
    replacements, n = res
    record(fgraph, PASS_NAME, n)
    return dict([("remove", [node]), *zip(node.outputs, replacements, strict=True)])


scan_dedup_pass = register_pass(
    PASS_NAME,
    "merge identical sit-sot/mit-sot/nit-sot traces of a Scan (greatest-fixpoint state equivalence)",
)
# Position 1.605: after ``scan_eqopt2`` (1.6), whose ``scan_merge`` concatenates
# scans with equal n_steps (creating the cross-scan duplicate traces this pass
# merges) and whose ``scan_merge_inouts`` already unified duplicate outer
# sequences / non-sequences; before ``scan_save_mem`` (1.61), which shrinks the
# sit-sot buffers and drops dead outputs (a duplicate trace still has its full
# ``AllocEmpty`` + ``set_subtensor`` buffer here, so equal initial buffers are
# structurally equal), and long before ``scan_make_inplace`` (50.5) adds the
# ``DeepCopyOp`` of a shared initial buffer (dropping the duplicate removes it).
# One walk suffices: the fixpoint is computed inside the rewrite, and the
# rebuilt node has no duplicates left (``ignore_newtrees``).
scan_dedup_pass.register(dfs_rewriter(scan_dedup, ignore_newtrees=True), 1.605, name="dedup")
