"""The Supervisor's validation from the destroyed roots, not one destroyer query per output.

pytensor's ``Supervisor.validate`` runs after every validated change (``replace_all_validate``,
the merge feature's merges) once a DestroyHandler is attached: it asks ``fgraph.destroyers(r)``
for every protected variable and every graph output, each query a call that refreshes and reads
the handler's maps. A function with many outputs (the initial point function: one per free
variable) pays outputs x changes, and the number of both grows with the model: on hier_var, 32
groups, 4,102 validations made 1.64 M queries, ~1/6 of the initial point stage.

:func:`validate` gives pytensor's answer from one refresh: none of the variables is destroyed when
the handler has no destroyer (``get_destroyers_of`` answers ``[]`` for every variable then), else
a variable is destroyed exactly when its view root (``droot``) has a destroyer (``root_destroyer``),
which is what ``get_destroyers_of`` reads. The same exception (class and message, first offending
variable in pytensor's order) is raised. Only the regular cycle detection with pytensor's own
DestroyHandler is answered here; anything else runs pytensor's.

Compile-scoped (:func:`pmfast.compiler.patching.scoped`); ``PMFAST_SUPERVISOR_CHECK=0`` runs
pytensor's inside the compile too.
"""

from __future__ import annotations

import os

from pmfast.compiler.patching import scoped


def enabled() -> bool:
    """Whether the root-based check is used (``PMFAST_SUPERVISOR_CHECK=0``: pytensor's)."""
    return os.environ.get("PMFAST_SUPERVISOR_CHECK", "1") != "0"


def validate(supervisor, fgraph, original) -> None:
    """``Supervisor.validate`` of pytensor's regular cycle detection (module docstring)."""
    from pytensor.configdefaults import config
    from pytensor.graph.destroyhandler import DestroyHandler
    from pytensor.graph.utils import InconsistencyError

    handler = getattr(fgraph, "destroy_handler", None)
    if (
        config.cycle_detection == "fast"
        or type(handler) is not DestroyHandler
        or getattr(fgraph.destroyers, "__qualname__", "") != "DestroyHandler.on_attach.<locals>.get_destroyers_of"
    ):
        return original(supervisor, fgraph)
    if not handler.destroyers:
        return None
    droot, _, root_destroyer = handler.refresh_droot_impact()
    for r in supervisor.protected + list(fgraph.outputs):
        if r in droot and droot[r] in root_destroyer:
            raise InconsistencyError(f"Trying to destroy a protected variable: {r}")
    return None


def install() -> None:
    """Replace ``Supervisor.validate`` inside pmfast's compile (idempotent)."""
    from pytensor.compile.function.types import Supervisor

    original = Supervisor.validate
    if getattr(original, "_pmfast", False):
        return

    def check(self, fgraph):
        if not enabled():
            return original(self, fgraph)
        return validate(self, fgraph, original)

    Supervisor.validate = scoped(original, check)
