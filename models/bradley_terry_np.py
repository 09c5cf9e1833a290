"""Bradley-Terry pairwise comparisons with plain numpy index arrays (the pm.Data twin: bradley_terry).

Same data, sizes and parameters as the twin; users write indices as numpy arrays as often as pm.Data.
"""

from functools import partial

from .bradley_terry import build_model as _twin

build_model = partial(_twin, numpy_indices=True)
