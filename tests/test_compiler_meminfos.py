"""pmfast.compiler.meminfos: the same meminfos as numba's walk, fewer instructions, no leaks."""

import numba
import numpy as np
import pytest
from llvmlite import ir
from numba.core import cpu, types
from numba.core.runtime.context import NRTContext

from pmfast import compiler
from pmfast.compiler import meminfos, patching

NUMBA = getattr(NRTContext.get_meminfos, "__wrapped__", NRTContext.get_meminfos)
ARR2 = types.Array(types.float64, 2, "C")
ARR1 = types.Array(types.float64, 1, "A")
CASES = [
    ARR2,
    ARR1,
    types.UniTuple(ARR2, 3),
    types.Tuple((types.float64, ARR1, types.int64, ARR2)),
    types.Tuple((types.float64, types.UniTuple(types.intp, 2))),
    types.Optional(ARR1),
    types.Tuple((types.Tuple((ARR1, types.boolean)), types.UniTuple(types.intp, 3))),
    types.float64,
]


def _context():
    ctx = cpu.CPUContext(numba.core.registry.cpu_target.typing_context, "cpu")
    ctx.refresh()
    return ctx


def _walk(fn, ctx, ty):
    """``(meminfo types, instructions emitted)`` of ``fn`` on an argument of type ``ty``."""
    module = ir.Module()
    llty = ctx.get_value_type(ty)
    func = ir.Function(module, ir.FunctionType(ir.VoidType(), [llty]), "f")
    builder = ir.IRBuilder(func.append_basic_block())
    found = fn(ctx.nrt, builder, ty, func.args[0])
    return [(t, str(v)) for t, v in found], len(builder.block.instructions)


@pytest.mark.parametrize("ty", CASES, ids=str)
def test_same_meminfos_fewer_reads(ty):
    ctx = _context()
    theirs, n_theirs = _walk(NUMBA, ctx, ty)
    ours, n_ours = _walk(meminfos.get_meminfos, ctx, ty)
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    assert len(ours) == len(theirs)
    assert n_ours <= n_theirs
    if ty == ARR2:  # numba reads every field; one extractvalue is the meminfo
        assert (n_theirs, n_ours) == (11, 1)


def test_holds_none():
    ctx = _context()
    dmm = ctx.data_model_manager
    builder = ir.IRBuilder()
    assert meminfos.holds_none(dmm, types.UniTuple(types.intp, 4), builder)
    assert meminfos.holds_none(dmm, types.float64, builder)
    assert not meminfos.holds_none(dmm, ARR1, builder)
    assert not meminfos.holds_none(dmm, types.Tuple((types.int64, ARR1)), builder)
    assert not meminfos.holds_none(dmm, types.Optional(ARR1), builder)


def _refs(x, n):
    parts = (x, x[1:], (x * 2.0, n))
    out = np.empty(0)
    for i in range(n):
        a, b, (c, m) = parts
        out = np.concatenate((out, a[:i], b, c[: m - i]))
    return out.sum(), (out, parts[2])


def test_compiled_without_leaks_and_same_values(monkeypatch):
    compiler.setup()
    from numba.core.runtime import _nrt_python as _nrt, rtsys

    x = np.arange(7.0)
    expect = _refs(x, 5)
    for flag in ("1", "0"):
        monkeypatch.setenv("PMFAST_LEAN_REFS", flag)
        fn = numba.njit(_refs)
        with patching.compiling():
            fn.compile((types.Array(types.float64, 1, "C"), types.int64))
        _nrt.memsys_enable_stats()
        try:
            before = rtsys.get_allocation_stats()
            got = fn(x, 5)
            del got
            after = rtsys.get_allocation_stats()
        finally:
            _nrt.memsys_disable_stats()
        assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free > 0
        assert fn(x, 5)[0] == expect[0]
        np.testing.assert_array_equal(fn(x, 5)[1][0], expect[1][0])
