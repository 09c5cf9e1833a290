"""numba's SSA reconstruction, visiting only the blocks that define or use the variable it fixes.

numba's ``ReconstructSSA`` pass (``numba.core.ssa._run_ssa``) fixes one
SSA-violating variable at a time, and for each one rewrites *every* block of
the function twice (fresh names for its definitions, then its uses rewired
to the reaching definition, with phi nodes where needed), calling a Python
handler per statement. An entry with its node functions inlined has
thousands of statements and a few hundred such variables (loop counters and
accumulators of the inlined loops), so this pass was ~10% of a model's compile
on a used machine (negbin: ~0.8 of 8 CPU s).

The handlers return a statement unchanged unless it assigns the variable
(fresh names) or reads it (uses), so in a block that does neither the
rewrite reproduces the block statement for statement. :func:`run_ssa` does
exactly numba's work, in the same order, on the blocks that define or read
the variable, and copies the others' statement lists as they are. Phi nodes
go where numba puts them (they may land in a block that doesn't mention the
variable: its new block gets them prepended, as numba does). The blocks
mentioning a variable are indexed once: fixing one variable only renames that
variable's definitions and uses and adds phis of its new names, so the index
of every other variable stays right. The IR produced is the same object
graph numba's would be (``tests/test_compiler_ssa.py`` compares the IR dumps).

Compile-scoped: :func:`install` puts a dispatcher at ``numba.core.ssa._run_ssa``
that runs :func:`run_ssa` inside a pmfast compile
(:func:`pmfast.compiler.patching.compiling`) and numba's own function outside
it and in every other thread.
"""

from __future__ import annotations

from collections import defaultdict

_installed = False


def _mentions(blocks, cache_list_vars):
    """Per variable name, the labels of the blocks that assign it and of those that read it
    (as numba's handlers see them: an assignment's value, any other statement's variables)."""
    from numba.core import ir

    defs: dict = defaultdict(set)
    uses: dict = defaultdict(set)
    for label, blk in blocks.items():
        for stmt in blk.body:
            if isinstance(stmt, ir.Assign):
                defs[stmt.target.name].add(label)
                value = stmt.value
                if isinstance(value, ir.Inst):
                    names = [v.name for v in cache_list_vars.get(value)]
                elif isinstance(value, ir.Var):
                    names = [value.name]
                else:
                    names = ()
            else:
                names = [v.name for v in cache_list_vars.get(stmt)]
            for name in names:
                uses[name].add(label)
    return defs, uses


def _rewrite(blocks, states, handler, labels):
    """numba's ``_run_block_rewrite`` on the blocks in ``labels``; the others' statements copied as they are."""
    from numba.core import ir
    from numba.core.ssa import _run_ssa_block_pass

    newblocks = {}
    for label, blk in blocks.items():
        newblk = ir.Block(scope=blk.scope, loc=blk.loc)
        if label in labels:
            states["label"] = label
            states["block"] = blk
            newblk.body = list(_run_ssa_block_pass(states, blk, handler))
        else:
            newblk.body = list(blk.body)
        newblocks[label] = newblk
    return newblocks


def run_ssa(blocks):
    """``numba.core.ssa._run_ssa`` with each variable's rewrites limited to the blocks that mention it."""
    from numba.core import errors
    from numba.core.analysis import compute_cfg_from_blocks
    from numba.core.ssa import (
        _CacheListVars,
        _compute_phi_locations,
        _find_defs_violators,
        _FixSSAVars,
        _FreshVarHandler,
        _iterated_domfronts,
        _make_states,
    )

    if not blocks:
        return {}
    cfg = compute_cfg_from_blocks(blocks)
    df_plus = _iterated_domfronts(cfg)
    violators = _find_defs_violators(blocks, cfg)
    cache_list_vars = _CacheListVars()
    def_labels, use_labels = _mentions(blocks, cache_list_vars) if violators else ({}, {})
    for varname in violators:
        states = _make_states(blocks)
        states["varname"] = varname
        states["defmap"] = defmap = defaultdict(list)
        blocks = _rewrite(blocks, states, _FreshVarHandler(), def_labels.get(varname, ()))

        states = _make_states(blocks)
        states["varname"] = varname
        states["defmap"] = defmap
        states["phimap"] = phimap = defaultdict(list)
        states["cfg"] = cfg
        states["phi_locations"] = _compute_phi_locations(df_plus, defmap)
        blocks = _rewrite(blocks, states, _FixSSAVars(cache_list_vars), use_labels.get(varname, ()))
        for label, philist in phimap.items():
            blocks[label].body = philist + blocks[label].body
    if compute_cfg_from_blocks(blocks) != cfg:
        raise errors.CompilerError("CFG mutated in SSA pass")
    return blocks


def install() -> None:
    """Make numba's SSA reconstruction use :func:`run_ssa` inside pmfast's compiles (installed once per process)."""
    global _installed
    if _installed:
        return
    from numba.core import ssa

    from pmfast.compiler.patching import scoped

    ssa._run_ssa = scoped(ssa._run_ssa, run_ssa)
    _installed = True
