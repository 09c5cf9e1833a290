"""Fused-loop descriptions (:mod:`.spec`), their numba code generation (:mod:`.codegen`), the op
that runs one (:mod:`.op`) and its numba dispatch (:mod:`.dispatch`).

The dispatch stands above the op (it imports the op class to register its numba
implementation); importing the package registers it, so any import of
:mod:`.op` (which initialises this package first) finds the op's numba code
registered, with no import cycle between the two modules."""

from pmfast.loops import dispatch as _dispatch  # noqa: F401  (registers IndexedElemwise's numba funcify)
from pmfast.loops.spec import INC, REDUCTIONS, SET, STORE, SUM, Gather, IndexedLoop, Read, Write, evaluate

__all__ = ["INC", "REDUCTIONS", "SET", "STORE", "SUM", "Gather", "IndexedLoop", "Read", "Write", "evaluate"]
