"""pmfast's compile pipeline after the graph passes: numba entry points, sampler callbacks, their cache.

A compile (``pmfast.compile`` → :func:`pmfast.nutpie_glue.compile_numba`):

1. pymc builds the logp+gradient and expand graphs; pytensor rewrites them
   with pmfast's passes and converts every node to a numba function
   (``pmfast.linker``), each cached on disk under its own key.
2. :mod:`~pmfast.compiler.entry`: each graph becomes one C-ABI entry point
   (the graph body between pointer views and output stores), compiled once
   and cached under a key of its source; the expand entry compiles in a
   forked process on the other core while this one compiles logp+grad
   (:mod:`~pmfast.compiler.parallel`).
3. :mod:`~pmfast.compiler.callbacks`: the two functions nutpie calls are
   model-independent, compiled once per machine, and call the entries
   through addresses stored in ``user_data``.

:mod:`~pmfast.compiler.overloads` swaps numba generic code that every new
process would otherwise compile for cheaper equivalents;
:mod:`~pmfast.compiler.cache` makes unreadable cache entries misses;
:mod:`~pmfast.compiler.subroutines` keeps numba's internal subroutines
(``np.sum``…) apart per fast-math flags, so an entry's code does not depend
on what the process compiled before; :mod:`~pmfast.compiler.ssa` makes
numba's SSA reconstruction visit only the blocks that mention each variable;
:mod:`~pmfast.compiler.inliner` drops numba's inliner's copies of fresh IR.
:mod:`~pmfast.compiler.frames` makes pytensor's failed graph validations
cheap; :mod:`~pmfast.compiler.c_code` reads pytensor's C code files once per
class instead of once per op; :mod:`~pmfast.compiler.constants` builds a tensor
constant's merge signature once; :mod:`~pmfast.compiler.static_shapes` folds an ``Alloc``'s
static shape from static types before pytensor clones the ancestors of its entries;
:mod:`~pmfast.compiler.determinism` makes the
rewritten graph the same in every process; :mod:`~pmfast.compiler.symbols` makes a call of a
symbol numba's JIT cannot resolve a Python error, not an LLVM abort. :func:`setup` installs them all (once per process);
all but the overloads and the cache hardening act only inside pmfast's compiles
(:func:`pmfast.compiler.patching.compiling`) and call numba's and pytensor's own code outside them.
:func:`patches` lists every replacement pmfast makes, with its scope
(:mod:`~pmfast.compiler.patching`).
"""

import contextlib

from pmfast.compiler.patching import patches  # noqa: F401  (the public list)


def setup() -> None:
    """Install pmfast's numba overloads and cache hardening (idempotent)."""
    from pmfast.compiler import c_code, cache, constants, determinism, frames, inliner, liveness, lowering_scan, meminfos, overloads, ssa, static_shapes, subroutines, symbols

    overloads.install()
    subroutines.install()
    ssa.install()
    liveness.install()
    lowering_scan.install()
    meminfos.install()
    inliner.install()
    cache.install()
    frames.install()
    c_code.install()
    constants.install()
    static_shapes.install()
    determinism.install()
    symbols.install()
    from pmfast import c_support, destroy_cycles, fg_import, inplace_scoped, shape_lengths, supervisor_check

    shape_lengths.install()
    destroy_cycles.install()
    supervisor_check.install()
    inplace_scoped.install()
    fg_import.install()
    c_support.install()


@contextlib.contextmanager
def install_everywhere():
    """Every patch of :func:`patches` active, compile-scoped ones included, until the block ends.

    For running the owners' test suites with pmfast's replacements (``tools/owner_tests.py``).
    """
    from pmfast.compiler import overloads, patching
    from pmfast.loops import deferred

    setup()
    deferred.install()
    with patching.compiling(), overloads.plain_errors():
        yield
