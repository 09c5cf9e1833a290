"""pytensor's fusion asks each scalar op once per signature whether it has C code, not once per node.

``FusionOptimizer`` (``elemwise_fusion``) fuses only Elemwise nodes whose scalar op "supports
C code", even for the numba backend, and asks ``ScalarOp.supports_c_code(inputs, outputs)``
once per node and pass: each answer builds a scalar node from fresh scalar variables of the
inputs' dtypes (``make_node``) and generates its C code. hier_var (8 groups) asks 6,049 times
in its graph stage, for 72 distinct questions.

The answer depends on the op, the inputs' dtypes, which inputs are the same variable (the
method maps equal inputs to one scalar variable) and the number of outputs: the method reads
nothing else of the variables, and the C code it asks for gets fixed names. :func:`install`
memoises it on exactly that key per op object (by identity: equal ops are not assumed to share
answers), weakly referenced so nothing is kept alive. Compile-scoped
(:func:`pmfast.compiler.patching.scoped`); ``PMFAST_C_SUPPORT_MEMO=0`` asks every time.
"""

from __future__ import annotations

import os
import weakref

from pmfast.compiler.patching import scoped

_answers: dict[int, tuple[weakref.ref, dict]] = {}


def answers(op) -> dict:
    """The memo of ``op`` (this object, not an equal one); dropped when the op is collected."""
    key = id(op)
    entry = _answers.get(key)
    if entry is not None and entry[0]() is op:
        return entry[1]
    memo: dict = {}
    _answers[key] = (weakref.ref(op, lambda _, key=key: _answers.pop(key, None)), memo)
    return memo


def enabled() -> bool:
    """Whether answers are memoised (``PMFAST_C_SUPPORT_MEMO=0``: pytensor's every time)."""
    return os.environ.get("PMFAST_C_SUPPORT_MEMO", "1") != "0"


def signature(inputs, outputs) -> tuple:
    """What ``ScalarOp.supports_c_code`` reads of its arguments: dtypes, input aliasing, output count."""
    first: dict = {}
    return (
        tuple(v.dtype for v in inputs),
        tuple(first.setdefault(v, k) for k, v in enumerate(inputs)),
        len(outputs),
    )


def install() -> None:
    """Memoise ``ScalarOp.supports_c_code`` inside pmfast's compile (idempotent)."""
    from pytensor.scalar.basic import ScalarOp

    original = ScalarOp.supports_c_code
    if getattr(original, "_pmfast", False):
        return

    def memoised(self, inputs, outputs):
        if not enabled():
            return original(self, inputs, outputs)
        try:
            per_op = answers(self)
        except TypeError:  # an op that can't be weakly referenced
            return original(self, inputs, outputs)
        key = signature(inputs, outputs)
        if key not in per_op:
            per_op[key] = original(self, inputs, outputs)
        return per_op[key]

    ScalarOp.supports_c_code = scoped(original, memoised)
