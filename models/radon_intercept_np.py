"""Radon varying-intercept model with a plain numpy county index (the pm.Data twin: radon_intercept).

Same data, sizes and parameters as the twin; users write indices as numpy arrays as often as pm.Data.
"""

from functools import partial

from .radon_intercept import build_model as _twin

build_model = partial(_twin, numpy_indices=True)
