"""Two per-statement costs of numba's lowering that grow with a function's length, made linear.

A big graph's entry (:mod:`pmfast.compiler.entry`) is one block of straight-line code: hier_var's
logp entry has ~400 node calls at 8 groups and ~600 at 16, thousands of IR statements after
numba's own passes. Two parts of numba's ``Lower`` cost more per statement the longer the block:

* **Singly assigned variables** (``Lower._find_singly_assigned_variable``, run once before a
  function is lowered). A variable defined in one block and used only there can live in an LLVM
  value instead of a stack slot, if that block assigns it once. numba checks that by listing the
  block's ``Assign`` statements anew for every such variable: variables × statements
  (hier_var 16 groups, the logp entry's compile: 16,681 variables, 13.6 M statements visited,
  ~25 of 83 profiled CPU s). :func:`find_singly_assigned_variable` counts each block's
  assignments per target once and answers the same question from the counts: the same set.
* **The debug text of every statement** (``Lower.lower_inst`` formats ``str(inst)`` for its
  debug print whether or not debugging is on). A statement loading a global array (a graph
  constant: observed data) formats the whole array with numpy's printer: ~6 ms each, ~700 of
  them in hier_var 16's logp entry. :func:`global_str` writes an array as its type and shape
  instead (``global(tensor_constant_3: array(float64, (58, 3)))``). The text is not read by
  anything but numba's debug output (``NUMBA_DEBUG_JIT``) and type annotations.

Both compile-scoped (:func:`install`; numba's own outside pmfast's compiles and in other threads);
``PMFAST_LINEAR_LOWER=0`` calls numba's. Neither changes the IR or the code it lowers to.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import numpy as np

_installed = False


def enabled() -> bool:
    """``PMFAST_LINEAR_LOWER=0`` keeps numba's versions."""
    return os.environ.get("PMFAST_LINEAR_LOWER", "1") != "0"


def singly_assigned(blocks, use_defs, alloca_vars) -> set:
    """The variables defined in exactly one block, assigned there by exactly one ``Assign``, never
    read in another block and not among ``alloca_vars``: numba's criterion, each block's
    ``Assign`` targets counted once instead of once per variable."""
    from numba.core import ir

    defined_in = defaultdict(set)
    for label, names in use_defs.defmap.items():
        for name in names:
            defined_in[name].add(label)
    used_elsewhere = set()
    for names in use_defs.usemap.values():
        used_elsewhere.update(names)
    counts: dict = {}
    out = set()
    for name, labels in defined_in.items():
        if name in alloca_vars or len(labels) != 1 or name in used_elsewhere:
            continue
        (label,) = labels
        per_block = counts.get(label)
        if per_block is None:
            per_block = counts[label] = Counter(s.target.name for s in blocks[label].body if isinstance(s, ir.Assign))
        if per_block[name] == 1:
            out.add(name)
    return out


def find_singly_assigned_variable(self) -> None:
    """``Lower._find_singly_assigned_variable`` (its ``_singly_assigned_vars``, the same set) in
    time linear in the function's statements."""
    from numba.core import lowering

    if not enabled():
        return _original[0](self)
    found = set()
    if not self.func_ir.func_id.is_generator:
        blocks = self.func_ir.blocks
        found = singly_assigned(self.blocks, lowering.compute_use_defs(blocks), lowering.must_use_alloca(blocks))
    self._singly_assigned_vars = found
    self._blk_local_varmap = {}


def global_str(self) -> str:
    """``ir.Global.__str__`` with an array value written as its dtype and shape, not its elements."""
    value = self.value
    if enabled() and isinstance(value, np.ndarray):
        return f"global({self.name}: array({value.dtype}, {value.shape}))"
    return _original[1](self)


_original: list = []


def install() -> None:
    """Make numba's ``Lower._find_singly_assigned_variable`` and ``ir.Global.__str__`` pmfast's inside
    its compiles (installed once per process)."""
    global _installed
    if _installed:
        return
    from numba.core import ir, lowering

    from pmfast.compiler.patching import scoped

    _original[:] = [lowering.Lower._find_singly_assigned_variable, ir.Global.__str__]
    lowering.Lower._find_singly_assigned_variable = scoped(_original[0], find_singly_assigned_variable)
    ir.Global.__str__ = scoped(_original[1], global_str)
    _installed = True
