"""The same model gives the same rewritten graph in every process.

pytensor's ``broadcast_shape_iter`` (what ``Elemwise.infer_shape`` and the
shape rewrites use to combine the lengths of arrays broadcast together)
collects the lengths it cannot prove equal in a ``set`` of variables and takes
the first one it iterates as the result, asserting the others equal to it. A
set of variables iterates in the order of their ``id``s, i.e. of memory
addresses, which differ between processes: a regression's ``x`` and ``y``
(two data vectors of the same unknown length) gave ``shape(x)`` in one process
and ``shape(y)`` in the next. The graphs compute the same values, but the
entry's source and so its cache key differ: a warm compile found no cache
entry one run in two and compiled for seconds (student_t_regression, ordinal,
radon_data, wide_additive, the scan models).

:func:`install` gives that function's module an insertion-ordered set under
the name ``set`` (pytensor's own ``OrderedSet``; the function's two
``set()`` calls are the module's only uses of the name), so the first length
in the arrays' order is taken, as in every process. Compile-scoped: outside a
pmfast compile (:func:`pmfast.compiler.patching.compiling`) and in other
threads the name gives the builtin ``set``, so a stock ``pytensor.function``
builds the graph stock builds. Idempotent.
"""

from __future__ import annotations

import builtins

from pmfast.compiler.patching import active


def ordered_set(*args):
    """pytensor's ``OrderedSet`` inside a pmfast compile, the builtin ``set`` outside it."""
    if active():
        from pytensor.misc.ordered_set import OrderedSet

        return OrderedSet(*args)
    return builtins.set(*args)


ordered_set._pmfast = True
ordered_set._pmfast_scoped = True


def install() -> None:
    """Make ``pytensor.tensor.extra_ops.broadcast_shape_iter`` order-stable in pmfast's compiles (see the module docstring)."""
    from pytensor.tensor import extra_ops

    extra_ops.set = ordered_set
