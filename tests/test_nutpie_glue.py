"""Fails loudly when nutpie changes the private helpers pmfast's glue relies on."""

import inspect

import nutpie
from nutpie import compile_pymc

from pmfast import nutpie_glue


def test_nutpie_version_pinned():
    assert nutpie.__version__ == nutpie_glue.NUTPIE_VERSION
    nutpie_glue.check_nutpie()


def test_private_helper_signatures():
    sig = inspect.signature(compile_pymc._make_functions)
    assert list(sig.parameters) == [
        "model",
        "mode",
        "compute_grad",
        "join_expanded",
        "pymc_initial_point_fn",
        "var_names",
    ]
    assert list(inspect.signature(compile_pymc.make_user_data).parameters) == ["shared_vars", "shared_data"]
    assert list(inspect.signature(compile_pymc._make_c_logp_func).parameters) == [
        "n_dim",
        "logp_fn",
        "user_data",
        "shared_logp",
        "shared_data",
    ]
    assert list(inspect.signature(compile_pymc._make_c_expand_func).parameters) == [
        "n_dim",
        "n_expanded",
        "expand_fn",
        "user_data",
        "shared_vars",
        "shared_data",
    ]
    assert list(inspect.signature(compile_pymc._prepare_dims_and_coords).parameters) == [
        "model",
        "shape_info",
    ]


def test_compiled_model_fields_cover_ours():
    import dataclasses

    theirs = {f.name for f in dataclasses.fields(compile_pymc.CompiledPyMCModel)}
    ours = {f.name for f in dataclasses.fields(nutpie_glue.PmfastCompiledModel)}
    assert ours - theirs == {"passes", "timings"}


def test_glue_mirrors_nutpie_numba_path():
    """nutpie's own numba path still calls the helpers our glue repeats, in the same way."""
    src = inspect.getsource(compile_pymc._compile_pymc_model_numba)
    for call in ("_make_functions(", "make_user_data(", "_make_c_logp_func(", "_make_c_expand_func(", "numba.cfunc(c_sig"):
        assert call in src, call
    assert 'mode="NUMBA"' in src
