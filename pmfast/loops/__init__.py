"""Fused-loop descriptions (:mod:`.spec`) and their numba code generation (:mod:`.codegen`)."""

from pmfast.loops.spec import INC, REDUCTIONS, SET, STORE, SUM, Gather, IndexedLoop, Read, Write, evaluate

__all__ = ["INC", "REDUCTIONS", "SET", "STORE", "SUM", "Gather", "IndexedLoop", "Read", "Write", "evaluate"]
