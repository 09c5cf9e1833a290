"""pmfast.compiler.c_code: pytensor's C code files read once per class, same code and sections."""

from pytensor.link.c.op import ExternalCOp
from pytensor.tensor.elemwise import DimShuffle

from pmfast.compiler import c_code


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
