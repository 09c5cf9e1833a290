"""Fused-loop descriptions (:mod:`.spec`), their numba code generation (:mod:`.codegen`), the op
that runs one (:mod:`.op`) and its numba dispatch (:mod:`.dispatch`)."""

from pmfast.loops.spec import INC, REDUCTIONS, SET, STORE, SUM, Gather, IndexedLoop, Read, Write, evaluate

__all__ = ["INC", "REDUCTIONS", "SET", "STORE", "SUM", "Gather", "IndexedLoop", "Read", "Write", "evaluate"]
