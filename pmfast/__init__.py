"""pmfast: a compiler frontend that makes PyMC models fast.

``pmfast.compile(model)`` is a drop-in for ``nutpie.compile_pymc_model`` that
runs pmfast's PyTensor passes before numba compiles the kernels. Heavy imports
(pymc, nutpie, numba) happen on first use, so ``import pmfast`` stays cheap.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "compile": "pmfast.frontend",
    "sample": "pmfast.frontend",
    "logp_dlogp_function": "pmfast.frontend",
    "kernel_args": "pmfast.frontend",
    "ModelError": "pmfast.frontend",
    "FallbackWarning": "pmfast.frontend",
    "get_mode": "pmfast.mode",
    "enable": "pmfast.plugin",
    "disable": "pmfast.plugin",
    "enabled": "pmfast.plugin",
    "is_enabled": "pmfast.plugin",
    "fit_many": "pmfast.many",
    "FitError": "pmfast.many",
    "fired": "pmfast.passes.registry",
    "UnknownPassError": "pmfast.passes.registry",
}

__all__ = [*_LAZY, "passes", "__version__"]


def __getattr__(name):
    if name == "passes":
        return import_module("pmfast.passes")
    if name in _LAZY:
        mod = import_module(_LAZY[name])
        return getattr(mod, name)
    raise AttributeError(f"module 'pmfast' has no attribute {name!r}")
