"""Compiling a model's dense linear algebra on the idle core while this process builds its graphs.

pmfast's linear-algebra implementations (:mod:`pmfast.compiler.linalg`: ``_cholesky``,
``_solve_triangular2``, ``_cholesky_grad``, ``_matmul``, ``_lu_factor``, …) are module-level numba
functions cached per machine, one signature per rank and dtype (inputs typed 'A', props as run-time
bools), so their argument types are known before any graph is rewritten. On a cold machine each is
a compile of 0.5-1.3 CPU s, done during the numba stage by one of the two processes compiling the
entries (bayesian_sem_workflow: six of them, ~3.5 CPU s; bayesian_var_ireland: four, ~2.9 s),
while during the graph stage (pytensor's rewrites: 2-4 s, one process) the second core is idle.

:func:`start` (at the beginning of ``pmfast.compile``, when a core is idle: ``pmfast.loops.worker.spare_core``)
looks for linear algebra in the model's random graph (a cheap walk); only if there is some does it
fork a child, which builds the model's logp graph (pymc), maps its ops to the implementations the
logp and gradient will call (:data:`FAMILIES`) and compiles those missing from numba's cache into it,
one after the other. :func:`stop` (before the numba stage) tells the child to stop after the compile
it is in; the child is reaped at the end (:func:`finish`: its CPU seconds). A function the child has
cached is then a load for whichever process needs it; one it has not reached is compiled as before.
Where a function is compiled never changes its code (the same source, types, flags and compile-scoped
patches: the child is forked inside the compile), so values are bit for bit the same.
``PMFAST_PREFETCH=0`` turns it off; ``PMFAST_PREFETCH=always`` forks without looking for an idle core.
"""

from __future__ import annotations

import os
import select

#: The implementations a graph holding an op (by class name; a ``Blockwise``'s core op) calls, in the
#: forward graph and its gradient, per the op's ``b_ndim`` where it has one.
FAMILIES = {
    "Cholesky": ("cholesky", "cholesky_grad"),
    "SolveTriangular": ("solve_triangular{b}", "dot"),
    "CholeskySolve": ("cho_solve{b}",),
    "Solve": ("lu_factor", "solve_general{b}", "solve_triangular2", "dot"),
    "LUFactor": ("lu_factor",),
}

#: Each implementation's arguments: the arrays' ranks, then the number of bool props
#: (``linalg._OPS``' node function sources; ``tests/test_compiler_prefetch.py`` checks them against
#: what the entries request).
SIGNATURES = {
    "cholesky": ((2,), 2),
    "cholesky_grad": ((2, 2), 1),
    "solve_triangular2": ((2, 2), 4),
    "solve_triangular1": ((2, 1), 3),
    "cho_solve2": ((2, 2), 3),
    "cho_solve1": ((2, 1), 2),
    "solve_general2": ((2, 2), 2),
    "solve_general1": ((2, 1), 2),
    "lu_factor": ((2,), 1),
    "dot": ((2, 2), 0),
}

#: Random-variable ops whose logp factors a matrix (found without building the logp graph).
_LINALG_RVS = ("MvNormal", "MvStudentT", "LKJ", "Wishart", "MatrixNormal", "KroneckerNormal")


def enabled() -> bool:
    return os.environ.get("PMFAST_PREFETCH", "1") != "0"


def argtypes(name: str, dtype: str = "float64") -> tuple:
    """numba argument types of implementation ``name`` as linalg's node functions call it."""
    import numba
    from numba.core import types

    ranks, n_bools = SIGNATURES[name]
    dt = numba.from_dtype(__import__("numpy").dtype(dtype))
    return tuple(types.Array(dt, r, "A") for r in ranks) + (types.boolean,) * n_bools


def _op_names(outputs) -> set[str]:
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.blockwise import Blockwise

    names = set()
    for v in ancestors(outputs):
        if v.owner is None:
            continue
        op = v.owner.op
        core = op.core_op if isinstance(op, Blockwise) else op
        names.add(type(core).__name__)
        if type(core).__name__ == "Dot" and all(i.ndim == 2 for i in v.owner.inputs):
            names.add("MatrixDot")
        b_ndim = getattr(core, "b_ndim", None)
        if b_ndim is not None:
            names.add(f"{type(core).__name__}:{b_ndim}")
    return names


def wanted(model) -> list[str]:
    """The implementations ``model``'s logp and gradient call, from its logp graph (built here)."""
    ops = _op_names([model.logp()])
    out, vectors = [], []
    for op, family in FAMILIES.items():
        if op not in ops:
            continue
        # pytensor's rewrites batch a vector right-hand side into a matrix one (MvNormal's logp):
        # the matrix form first, the vector form last
        b_vector = f"{op}:1" in ops
        for name in family:
            if "{b}" in name:
                vectors += [name.format(b=1)] if b_vector else []
                name = name.format(b=2)
            out += [name] if name not in out else []
    if "MatrixDot" in ops and "dot" not in out:
        out.append("dot")
    return out + [v for v in vectors if v not in out]


def _may_need(model) -> bool:
    """Whether ``model``'s random graph holds linear algebra or a random variable whose logp does."""
    try:
        names = _op_names([*model.basic_RVs, *model.deterministics, *model.potentials])
    except Exception:
        return False
    return any(n.split(":")[0] in FAMILIES or n.startswith(_LINALG_RVS) or n == "MatrixDot" for n in names)


class Prefetch:
    """The child of :func:`start`: :meth:`stop` it before the numba stage, :meth:`finish` at the end."""

    def __init__(self, child, w: int):
        self.child, self.w = child, w
        self.cpu_seconds = 0.0

    def stop(self) -> None:
        if self.w is not None:
            os.close(self.w)
            self.w = None

    def finish(self) -> float:
        """Wait for the child (stopped: it ends after the compile it is in); its CPU seconds."""
        self.stop()
        self.child.wait()
        self.cpu_seconds = self.child.cpu_seconds
        return self.cpu_seconds


def start(model) -> Prefetch | None:
    """Fork the child compiling ``model``'s linear algebra, or None (nothing to do, off, no idle core)."""
    from pmfast.compiler import parallel
    from pmfast.compiler.pure import jit_off
    from pmfast.loops import worker

    if not enabled() or jit_off() or not parallel.enabled():
        return None
    from pytensor import config

    if not config.numba__cache or not _may_need(model):
        return None
    if os.environ.get("PMFAST_PREFETCH") != "always" and not worker.spare_core():
        return None
    r, w = os.pipe()
    child = parallel.fork(lambda: _run(model, r, w))
    os.close(r)
    if child is None:
        os.close(w)
        return None
    return Prefetch(child, w)


def _stopped(r: int) -> bool:
    readable, _, _ = select.select([r], [], [], 0)
    return bool(readable)  # end of file: the parent closed its end


def _run(model, r: int, w: int) -> None:
    """In the child: compile (or load) the wanted implementations, until stopped."""
    from pmfast.compiler import linalg

    os.close(w)
    for name in wanted(model):
        if _stopped(r):
            return
        fn = linalg.jitted(name)
        sig = argtypes(name)
        if sig not in fn.overloads:
            fn.compile(sig)  # numba's dispatcher loads it from the cache if it is there
