"""Building pytensor Modes from a pass selection.

``get_mode`` builds the stock NUMBA pipeline plus the selected passes' tags. The plugin that makes
the stock ``"NUMBA"`` mode run them is :mod:`pmfast.plugin` (it stands above
:mod:`pmfast.frontend`, which stands above this module).
"""

from __future__ import annotations

from collections.abc import Iterable

from pmfast.passes import registry

PassSelection = str | Iterable[str] | None


def get_mode(passes: PassSelection = "all"):
    """A numba ``Mode``: stock NUMBA rewrites plus the selected pmfast passes, pmfast's linker.

    ``passes="none"`` is exactly the stock NUMBA pipeline (pytensor's linker); ``"all"`` leaves out
    the passes only pmfast's own compile paths complete (``Pass.plugin`` False: ``data_hoist``).
    """
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery
    from pytensor.link.numba.linker import NumbaLinker

    selected = registry.select(passes)
    if passes == "all":
        # a pass that only prepares pmfast's own compile paths (data_hoist's marks, hoisted by
        # pmfast.compile and logp_dlogp_function, which name their passes) stays out of the default
        # mode: under a bare pytensor.function its marks would only keep fusion from merging terms
        selected = [p for p in selected if p.plugin]
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
    if selected:
        # pytensor's in-place rewriters, run with proven changes left unvalidated (pmfast/inplace_fast.py)
        from pmfast import inplace_fast

        exclude += inplace_fast.register()
        tags.append(inplace_fast.TAG)
    return Mode(linker, RewriteDatabaseQuery(include=["fast_run", "numba", *tags], exclude=exclude))
