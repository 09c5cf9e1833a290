"""Fewer statements for numba to lower in an entry: copies propagated, ``del`` of plain values dropped.

An entry with its node functions inlined (:mod:`pmfast.compiler.inline`) reaches
numba's lowering with thousands of IR statements, and numba lowers each one
through Python code of its own (typing lookups, llvmlite builders). Two kinds
are pure bookkeeping there:

* **Copies** ``a = b`` (a variable's value stored under another name: the
  inliner binds each callee argument and return value that way, and Python
  locals are copies of temporaries). Lowered, a copy loads ``b``, increfs it
  if it holds arrays, and stores it in ``a``'s slot, whose ``del`` decrefs it
  again. :func:`propagate_copies` renames ``a`` to ``b`` where that cannot
  change a value: each is assigned once in the whole function, they have the
  same numba type, and the copy dominates every use of ``a``. Then ``b`` holds
  ``a``'s value wherever ``a`` is read (``b``'s one definition dominates the
  copy, and reaching it again on a path means passing the copy again).
* **Dels** of values without reference counts. numba inserts ``del x`` after a
  variable's last use (``ir_legalization``, just before lowering) so that
  arrays are released; for a float, an int or a tuple of them it decrefs
  nothing, but still costs a Python dispatch and, for a variable living in a
  stack slot, a load and a store of zero that LLVM's SROA then removes
  (SROA was the most expensive LLVM pass on irt_2pl's entry).
  :func:`drop_plain_dels` removes them.

Both run on the typed IR, so the types decide; the arithmetic and the calls
are untouched (the same operations on the same values, in the same order).
:func:`pipeline` is numba's nopython pipeline with the two passes added.
"""

from __future__ import annotations

from collections import defaultdict

_pipelines: dict = {}

#: Statement kinds whose variables numba's ``replace_vars_stmt`` renames (a use in any other kind, such as
#: a ``DynamicRaise``'s arguments, keeps its copy).
_RENAMABLE = ("Assign", "Return", "Branch", "StaticSetItem", "SetItem", "SetAttr", "Print", "Raise")


def _copies(blocks, typemap):
    """Candidate copies ``a = b``: ``{a: (label, index, b)}`` with ``a`` and ``b`` each assigned once, same type."""
    from numba.core import ir

    n_defs: dict = defaultdict(int)
    found = {}
    for label, blk in blocks.items():
        for i, stmt in enumerate(blk.body):
            if isinstance(stmt, ir.Assign):
                n_defs[stmt.target.name] += 1
                if isinstance(stmt.value, ir.Var):
                    found[stmt.target.name] = (label, i, stmt.value.name)
    return {
        a: (label, i, b)
        for a, (label, i, b) in found.items()
        if n_defs[a] == 1 and n_defs[b] == 1 and a in typemap and b in typemap and typemap[a] == typemap[b]
    }


def _read(stmt):
    """The names of the variables ``stmt`` reads."""
    from numba.core import ir

    if isinstance(stmt, ir.Assign):
        value = stmt.value
        if isinstance(value, ir.Var):
            return (value.name,)
        return [v.name for v in value.list_vars()] if isinstance(value, ir.Expr) else ()
    return [v.name for v in stmt.list_vars()]


def propagate_copies(func_ir, typemap) -> int:
    """Rename single-assignment copies away (see the module docstring); returns how many were removed."""
    from numba.core import ir, ir_utils
    from numba.core.analysis import compute_cfg_from_blocks

    blocks = func_ir.blocks
    copies = _copies(blocks, typemap)
    if not copies:
        return 0
    arg_names = set(func_ir.arg_names)
    copies = {a: c for a, c in copies.items() if a not in arg_names}
    # every use of `a` must come after the copy in its block, or in a block the copy's block dominates
    doms = compute_cfg_from_blocks(blocks).dominators()
    bad: set = set()
    for label, blk in blocks.items():
        for i, stmt in enumerate(blk.body):
            for name in _read(stmt):
                c = copies.get(name)
                if c is None or name in bad:
                    continue
                at_label, at, _ = c
                ok = (at < i) if label == at_label else (at_label in doms[label])
                if not ok or type(stmt).__name__ not in _RENAMABLE:
                    bad.add(name)
    copies = {a: c for a, c in copies.items() if a not in bad}
    if not copies:
        return 0

    def root(name):
        while name in copies:
            name = copies[name][2]
        return name

    rename = {a: root(a) for a in copies}
    drop = defaultdict(set)
    for label, at, _ in copies.values():
        drop[label].add(at)
    replacements = {}
    for label, blk in blocks.items():
        skip = drop.get(label, ())
        body = []
        for i, stmt in enumerate(blk.body):
            if i in skip:
                continue
            if any(v.name in rename for v in stmt.list_vars()):
                for v in stmt.list_vars():
                    if v.name in rename and v.name not in replacements:
                        target = rename[v.name]
                        replacements[v.name] = ir.Var(v.scope, target, v.loc)
                ir_utils.replace_vars_stmt(stmt, replacements)
            body.append(stmt)
        blk.body = body
    func_ir._definitions = ir_utils.build_definitions(blocks)
    return len(copies)


def drop_plain_dels(func_ir, typemap, targetctx) -> int:
    """Remove ``del x`` where ``x``'s type holds no reference-counted memory; returns how many."""
    from numba.core import ir

    models = targetctx.data_model_manager
    counted: dict = {}

    def plain(name):
        ty = typemap.get(name)
        if ty is None:
            return False
        if ty not in counted:
            counted[ty] = not models[ty].contains_nrt_meminfo()
        return counted[ty]

    n = 0
    for blk in func_ir.blocks.values():
        body = [s for s in blk.body if not (isinstance(s, ir.Del) and plain(s.value))]
        n += len(blk.body) - len(body)
        blk.body = body
    return n


def pipeline(base=None):
    """A numba compiler class: ``base``'s (numba's default) nopython pipeline with the passes of this module."""
    from numba.core.compiler import Compiler
    from numba.core.compiler_machinery import AnalysisPass, FunctionPass, register_pass
    from numba.core.typed_passes import IRLegalization

    if base in _pipelines:
        return _pipelines[base]

    if "propagate" not in _pipelines:

        @register_pass(mutates_CFG=False, analysis_only=False)
        class PmfastPropagateCopies(FunctionPass):
            _name = "pmfast_propagate_copies"

            def __init__(self):
                FunctionPass.__init__(self)

            def run_pass(self, state):
                return propagate_copies(state.func_ir, state.typemap) > 0

        @register_pass(mutates_CFG=False, analysis_only=False)
        class PmfastDropPlainDels(AnalysisPass):  # not a FunctionPass: numba forbids dels after those
            _name = "pmfast_drop_plain_dels"

            def __init__(self):
                AnalysisPass.__init__(self)

            def run_pass(self, state):
                return drop_plain_dels(state.func_ir, state.typemap, state.targetctx) > 0

        _pipelines["propagate"] = PmfastPropagateCopies
        _pipelines["dels"] = PmfastDropPlainDels

    propagate, dels = _pipelines["propagate"], _pipelines["dels"]
    class PmfastEntryCompiler(base if base is not None else Compiler):
        def define_pipelines(self):
            pipelines = super().define_pipelines()
            for pm in pipelines:
                at = next((i for i, (p, _) in enumerate(pm.passes) if p is IRLegalization), None)
                if at is None or pm.pipeline_name != "nopython":
                    continue
                pm.passes.insert(at + 1, (dels, "drop dels of values without reference counts"))
                pm.passes.insert(at, (propagate, "propagate single-assignment copies"))
                pm.finalize()
            return pipelines

    _pipelines[base] = PmfastEntryCompiler
    return PmfastEntryCompiler
