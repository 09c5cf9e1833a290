"""Which pytensor ops pmfast's linker implements itself, and where: :func:`funcify_and_cache_key`.

Each replaces an implementation whose compile pulls numba generic code into every new process (see
:mod:`pmfast.compiler.overloads`) with one that behaves the same: same results, same exception type
and message. The functions are generated from source with only globals (numba caches them
directly, without pytensor's ``*args`` wrapper) and the keys are pmfast's own (never shared with
pytensor's entries).

* ``Elemwise``: :mod:`pmfast.compiler.elemwise`.
* ``SpecifyShape``, ``Reshape`` (to at least one axis), ``DimShuffle``: :mod:`pmfast.compiler.shape_ops`.
* ``Dot`` where one side is a float64 vector: :mod:`pmfast.compiler.dot`; matrix × matrix ``Dot``
  and dense linear algebra (``Cholesky``, ``SolveTriangular``, ``CholeskySolve``, ``LUFactor``, the
  general ``Solve``): :mod:`pmfast.compiler.linalg`.
* ``CAReduce`` over some axes: :mod:`pmfast.compiler.careduce`; ``Sum`` over every axis,
  ``Shape_i``, a matrix's ``ExtractDiag``: :mod:`pmfast.compiler.small_ops`.
* ``Split`` and ``Join`` of vectors: :mod:`pmfast.compiler.split`, :mod:`pmfast.compiler.join`;
  ``CumOp``: :mod:`pmfast.compiler.cumop`; ``Subtensor``, ``IncSubtensor``, ``Alloc``:
  :mod:`pmfast.compiler.basic_index` (:mod:`pmfast.compiler.node_dedup`); ``AdvancedIncSubtensor``
  with a constant index vector per axis: :mod:`pmfast.compiler.adv_inc`, ``AdvancedSubtensor`` with
  them: :mod:`pmfast.compiler.adv_sub`; ``ArgSortOp`` of a vector: :mod:`pmfast.compiler.sort`;
  ``Scan``: :mod:`pmfast.compiler.scan`.
* pmfast's ``RowSoftmax`` (:mod:`pmfast.passes.softmax_rows`): :mod:`pmfast.compiler.softmax`.
* scalar ``Psi`` (digamma) of float64 (:func:`scalar_funcify_and_cache_key`): pytensor calls
  scipy's Cython function through a function pointer and gives up caching (key None), so every
  graph containing psi (NegativeBinomial, StudentT's nu…) was compiled again in each process.
  Here :func:`pmfast.vmath.special.psi` (pure numba, within a few ulp of scipy), keyed on
  pmfast.vmath's version. pytensor looks scalar ops up for each node of a Composite's scalar graph
  as well as for a lone scalar op, and pmfast's lookup is only patched in while pmfast's linker
  converts a graph: stock NUMBA mode keeps scipy's psi.
"""

from __future__ import annotations

import os


def funcify_and_cache_key(op, node):
    """pmfast's ``(numba function, cache key)`` for ``op``, or None to use pytensor's."""
    from pytensor.scan.op import Scan
    from pytensor.tensor.basic import Alloc, Join, Split
    from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
    from pytensor.tensor.extra_ops import CumOp
    from pytensor.tensor.math import Dot, Sum
    from pytensor.tensor.shape import Reshape, SpecifyShape
    from pytensor.tensor.sort import ArgSortOp
    from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor, Subtensor

    if node is None:
        return None
    if isinstance(op, CAReduce) and os.environ.get("PMFAST_CAREDUCE", "1") != "0":
        from pmfast.compiler import careduce, small_ops

        found = small_ops.sum_all(op, node) if type(op) is Sum else None
        return found if found is not None else careduce.funcify(op, node)
    if type(op) is Sum:
        from pmfast.compiler import small_ops

        return small_ops.sum_all(op, node)
    if isinstance(op, SpecifyShape):
        from pmfast.compiler import shape_ops

        return shape_ops.specify_shape(op, node)
    if type(op) is Elemwise:
        from pmfast.compiler import elemwise

        return elemwise.funcify(op, node)
    if type(op) is DimShuffle:
        from pmfast.compiler import shape_ops

        return shape_ops.dimshuffle(op, node)
    if type(op) is Dot:
        from pmfast.compiler import dot

        return dot.funcify(op, node)
    if type(op) is Reshape and op.ndim > 0:
        from pmfast.compiler import shape_ops

        return shape_ops.reshape(op, node)
    if type(op) is Split:
        from pmfast.compiler import split

        return split.funcify(op, node)
    if type(op) is Join:
        from pmfast.compiler import join

        return join.funcify(op, node)
    if type(op) is CumOp:
        from pmfast.compiler import cumop

        return cumop.funcify(op, node)
    if type(op) in (Subtensor, IncSubtensor, Alloc) and os.environ.get("PMFAST_BASIC_INDEX", "1") != "0":
        from pmfast.compiler import basic_index, node_dedup

        found = node_dedup.funcify(op, node) if type(op) is not Alloc and node_dedup.active() else None
        if found is None:
            found = (basic_index.alloc_funcify if type(op) is Alloc else basic_index.funcify)(op, node)
        if found is not None:
            return found
    if type(op) is AdvancedIncSubtensor:
        from pmfast.compiler import adv_inc

        return adv_inc.funcify(op, node)
    if type(op) is AdvancedSubtensor:
        from pmfast.compiler import adv_sub

        return adv_sub.funcify(op, node)
    if type(op).__name__ in ("Shape_i", "ExtractDiag"):
        from pmfast.compiler import small_ops

        return small_ops.funcify(op, node)
    if type(op) is ArgSortOp:
        from pmfast.compiler import sort

        return sort.funcify(op, node)
    if type(op) is Scan:
        from pmfast.compiler import scan

        return scan.funcify(op, node)
    if type(op).__module__ in ("pytensor.tensor.slinalg", "pmfast.passes.cholesky_grad"):
        from pmfast.compiler import linalg

        return linalg.funcify(op, node)
    if type(op).__name__ == "RowSoftmax" and type(op).__module__ == "pmfast.passes.softmax_rows":
        from pmfast.compiler import softmax

        return softmax.funcify(op, node)
    if type(op).__name__ == "VmathElemwise" and os.environ.get("PMFAST_VMATH_PLAIN", "1") != "0":
        from pmfast.vmath import elemwise

        return elemwise.funcify(op, node)
    return None


def scalar_funcify_and_cache_key(op, node):
    """pmfast's ``(numba function, cache key)`` for the scalar op ``op`` (scalar ``node``), or None.

    Only from the patched ``numba_funcify_and_cache_key`` (pmfast/linker.py), not from
    ``numba_funcify_ensure_cache``: pytensor wraps the function in its cached ``*args``
    forwarder, as for every scalar op (the function keeps its own numba flags).
    """
    from pytensor.scalar.math import Psi

    if node is None or type(op) is not Psi:
        return None
    if not all(v.type.dtype == "float64" for v in (*node.inputs, *node.outputs)):
        return None
    from pmfast.compiler.pure import jit_off

    if jit_off():  # pmfast.vmath's psi is jitted on import: not a function that runs as plain Python
        return None
    from pmfast.vmath import special

    return special.psi, "pmfast_psi_" + special.cache_key()
