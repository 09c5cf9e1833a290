"""A cheap caller lookup for pytensor's graph validation (a failed validation cost ~40 ms).

When a candidate rewrite makes a ``FunctionGraph`` invalid (an in-place
rewrite whose destroy pattern the destroy handler rejects, for instance),
pytensor's ``Validator.validate_`` asks ``inspect.getframeinfo`` for its
caller's function name. That call looks up the caller's source: it resolves
the real path of every loaded module's file (``inspect.getmodule``) and reads
the source file, ~40 ms each time. A warm compile of stoch_vol meets nine such
failures: 0.37 of its ~1.2 CPU seconds.

:func:`install` gives ``pytensor.graph.features`` an ``inspect`` whose
``getframeinfo`` reads the name, file and line from the frame itself and
leaves the source context empty; ``validate_`` uses only the function name.
Everything else is the real ``inspect``. Compile-scoped: outside a pmfast
compile (:func:`pmfast.compiler.patching.compiling`) and in other threads,
``getframeinfo`` is the real one. Idempotent.
"""

from __future__ import annotations

import inspect
import types

from pmfast.compiler.patching import active


def getframeinfo(frame, context=1):
    """``inspect.getframeinfo`` without the source lookup (no ``code_context``) inside a pmfast compile."""
    if not active() or inspect.istraceback(frame):
        return inspect.getframeinfo(frame, context)
    return inspect.Traceback(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None)


def install() -> None:
    """Swap the ``inspect`` that ``pytensor.graph.features`` sees (see the module docstring)."""
    from pytensor.graph import features

    if getattr(features.inspect, "_pmfast", False):
        return
    shim = types.ModuleType("inspect")
    shim.__dict__.update(inspect.__dict__)
    shim.getframeinfo = getframeinfo
    shim._pmfast = True
    shim._pmfast_scoped = True
    features.inspect = shim
