"""Zoo of real-shaped PyMC models for tests and benchmarks.

Importing this package is cheap: model modules (and pymc) are imported lazily by `load`.
"""

import ast
from importlib import import_module
from pathlib import Path

ZOO: dict[str, str] = {
    "radon_intercept": "radon_intercept",
    "radon_slope": "radon_slope",
    "eight_schools_centered": "eight_schools_centered",
    "eight_schools_noncentered": "eight_schools_noncentered",
    "crossed_effects": "crossed_effects",
    "irt_2pl": "irt_2pl",
    "bradley_terry": "bradley_terry",
    "hier_logistic": "hier_logistic",
    "poisson_offset": "poisson_offset",
    "negbin": "negbin",
    "ordinal": "ordinal",
    "stoch_vol": "stoch_vol",
    "ar2_scan": "ar2_scan",
    "two_trace_scan": "two_trace_scan",
    "wide_additive": "wide_additive",
    "marginal_gp": "marginal_gp",
    "gaussian_mixture": "gaussian_mixture",
    "lkj_mvnormal": "lkj_mvnormal",
    "radon_data": "radon_data",
    "golf_putting": "golf_putting",
    "logistic_small": "logistic_small",
    "poisson_small": "poisson_small",
    "student_t_regression": "student_t_regression",
    "beta_binomial": "beta_binomial",
    "hier_var": "hier_var",
    "bradley_terry_np": "bradley_terry_np",
    "radon_intercept_np": "radon_intercept_np",
    "irt_2pl_np": "irt_2pl_np",
}

DEFAULT = "radon_intercept"


def _check(name: str) -> str:
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(sorted(ZOO))}")
    return ZOO[name]


def load(name: str = DEFAULT):
    """Return the `build_model(**size_kwargs) -> pm.Model` callable of zoo model `name`."""
    return import_module(f"{__name__}.{_check(name)}").build_model


def describe() -> list[tuple[str, str]]:
    """Return `(name, first docstring line)` for every zoo model (read from source, no import)."""
    out = []
    for name, mod in ZOO.items():
        src = (Path(__file__).parent / f"{mod}.py").read_text()
        doc = ast.get_docstring(ast.parse(src)) or ""
        out.append((name, doc.splitlines()[0] if doc else ""))
    return out
