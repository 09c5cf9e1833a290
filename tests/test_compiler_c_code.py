"""pmfast.compiler.c_code: pytensor's C code files read once per class, same code and sections."""

import pytest
from pytensor.link.c.op import ExternalCOp
from pytensor.tensor.elemwise import DimShuffle

from pmfast.compiler import c_code, patching


@pytest.fixture(autouse=True)
def _in_a_pmfast_compile():
    """The replacement is compile-scoped: these tests run inside :func:`pmfast.compiler.patching.compiling`."""
    with patching.compiling():
        yield


def _fresh(op_cls, *args, **kwargs):
    """An instance built with pytensor's own (unmemoized) loader."""
    original = ExternalCOp.load_c_code
    plain = getattr(original, "__wrapped__", original)
    ExternalCOp.load_c_code = plain
    try:
        return op_cls(*args, **kwargs)
    finally:
        ExternalCOp.load_c_code = original


def test_memoized_instances_get_the_same_code():
    c_code.install()
    c_code.install()  # idempotent: not wrapped twice
    assert not getattr(ExternalCOp.load_c_code.__wrapped__, "_pmfast", False)
    reference = _fresh(DimShuffle, input_ndim=2, new_order=(1, "x", 0))
    first = DimShuffle(input_ndim=2, new_order=(1, "x", 0))
    second = DimShuffle(input_ndim=1, new_order=("x", 0))
    for op in (first, second):
        assert op.func_codes == reference.func_codes
        assert op.code_sections == reference.code_sections
    assert first.code_sections is not second.code_sections  # each instance owns its sections
    assert (DimShuffle, tuple(first.func_files)) in c_code._memo


def test_reloading_an_instance_goes_to_pytensor():
    """A load on an instance that has code already is pytensor's (which refuses it), not the memo."""
    import pytest

    c_code.install()
    op = DimShuffle(input_ndim=1, new_order=(0, "x"))
    plain = ExternalCOp.load_c_code.__wrapped__
    with pytest.raises(ValueError) as ours:
        op.load_c_code(op.func_files)
    other = DimShuffle(input_ndim=1, new_order=(0, "x"))
    with pytest.raises(ValueError) as theirs:
        plain(other, other.func_files)
    assert str(ours.value) == str(theirs.value)


def test_outside_a_pmfast_compile_pytensors_loader():
    c_code.install()
    _memo_before = dict(c_code._memo)
    c_code._memo.clear()
    try:
        depth = patching._state.depth
        patching._state.depth = 0  # leave the fixture's scope for this check
        try:
            DimShuffle(input_ndim=2, new_order=(0, 1, "x"))
        finally:
            patching._state.depth = depth
        assert not c_code._memo
    finally:
        c_code._memo.update(_memo_before)
