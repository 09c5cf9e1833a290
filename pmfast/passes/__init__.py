"""pmfast's graph passes and the order they run in.

Pipeline (positions in pytensor's global ``optdb``; pmfast's entries marked ``*``)::

   -0.01   inline_ofg_expansion
  * -0.006 early_diag        diag(v)'s gradient OpFromGraph inlined (while its AllocDiag is there)
  * -0.005 early_diag        diag(v) (an OpFromGraph) inlined before canonicalize: inlined late,
                             in specialize, it pulled in a stale shape graph and a second copy
                             of a GP's covariance and Cholesky (declined next to linear algebra)
  * -0.004 cholesky_grad     Cholesky.L_op's subgraph (tril masks, two solves, a matrix product)
                             as one CholeskyGrad (trmm + 2 trsm in place), matched as built
    0      merge
  * 0.5    index_dtypes      int8/int16 constant indices of chained Subtensors as int64, so
                             canonicalize's local_subtensor_merge does not overflow (NumPy 2)
    1      canonicalize
    1.5    stabilize
    1.6    scan_eqopt2 (scan_merge, scan_merge_inouts)
  * 1.605  scan_dedup        identical scan traces computed once; after merging,
                             before save-mem drops dead outputs
    1.61   scan_save_mem
    2      specialize
  * 47.4   data_hoist        costly data-only subgraphs (an HSGP basis, log(x) of pm.Data) marked
                             so fusion keeps them apart; after every rewrite, hoisted from the
                             compiled function as inputs computed once per dataset
  * 47.5   sum_of_products   sum(x * y, axis=k) of broadcast 3-d factors (a solve's gradient
                             under Blockwise) as one matrix product; before fusion takes the Mul
    48     add_mul_fusion    (flattens Add/Mul: anything split earlier is undone)
  * 48.4   gather_lifting    f(x[idx]) -> f(x)[idx] for x shorter than idx; before fusion
                             puts f into the per-row loop
  * 48.5   indexed_elemwise  sum(switch(c, x, -inf)) -> switch(c, sum(x), -inf) for a
                             loop-invariant c (pymc's parameter checks), so fusion can
                             put the checks and the terms they guard in one Composite
                             (only where it adds no node or a gather loop pays for it);
                             sigmoid(x) >= 0 / <= 1 -> ~isnan(x)
  * 48.55  unit_axes         Elemwise over (n, 1) columns (canonicalize's DimShuffle lift in
                             a row sum's gradient) as 1-d, so fusion merges them with the
                             1-d terms of the same rows
  * 48.6   scalarize         Elemwise on one-element arrays (scalar parameters' gradient
                             pieces) as 0-d Elemwise, so fusion merges them with the priors
    49     elemwise_fusion   (builds the Composites the next passes work on)
  * 49.05  scalarize         independent 0-d Elemwise merged into one Composite
  * 49.1   wide_split        a fused Elemwise made of repeated independent pieces (a
                             hierarchical model's per-group copies) as one node per piece,
                             compiled once for all copies (again at 49.185, after siblings)
  * 49.15  wide_split        wide Add/Mul/Join/… into ≤ 30-argument pieces; a wide
                             Composite as one WideLoop (≤ 24-wide stages, one loop)
  * 49.18  indexed_elemwise  sibling Elemwise nodes reading the same gather merged
                             (capped below wide_split's chunk size)
  * 49.185 wide_split        repeated pieces split again (sibling fusion merges loops that
                             share only an index)
  * 49.19  shared_math       sigmoid/softplus of x and -x in one Composite from one
                             exp(-|x|); after every merge, before the loop bodies
  * 49.2   indexed_elemwise  gathers + Composite + scatters (+ Sum) as one loop
  * 49.22  indexed_elemwise  left-over scatter-adds of one y as one identity loop
  * 49.24  affine_sums       a fused loop's sums with loop-invariant factors: the loop sums
                             the row products, a 0-d Composite after it applies the factors
  * 49.25  softmax_rows      last-axis Softmax / LogSoftmax of one tensor as one row loop
  * 49.3   vector_math       exp/log/log1p/expm1/softplus/sigmoid/erf/erfc/erfcx in every
                             Elemwise body and fused loop as pmfast.vmath kernels (after
                             every pass that builds scalar bodies; off: pmfast.vmath.disable())
  * 49.34  indexed_elemwise  an Elemwise over (n, 1) columns whose body vectorizes as 1-d
  * 49.35  indexed_elemwise  gather-free 1-d Elemwise (+ its Sum/All/Any) as one loop:
                             chunked when vector_math made its body vectorizable, plain
                             when its body calls libm (no per-element call of a core)
    49.5   add_destroy_handler
    50.1   local_inplace_setsubtensor (makes wide_split's Join buffer destructive)
    50.5   inplace_elemwise, scan_make_inplace
    70.6   local_inplace_AdvancedIncSubtensor
  * 70.65  indexed_elemwise  (inplace scatter buffers, validated by the destroy handler)
    100    merge3

Each pmfast pass documents where it sits and why at its registration.
"""

from pmfast.passes.registry import (
    ALL,
    NONE,
    PASSES,
    Pass,
    UnknownPassError,
    available,
    fired,
    record,
    register_pass,
    select,
    unregister_pass,
)

__all__ = [
    "ALL",
    "NONE",
    "PASSES",
    "Pass",
    "UnknownPassError",
    "available",
    "fired",
    "record",
    "register_pass",
    "select",
    "unregister_pass",
]
