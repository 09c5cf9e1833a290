"""Two-parameter logistic IRT model with plain numpy person/item indices (the pm.Data twin: irt_2pl).

Same data, sizes and parameters as the twin; users write indices as numpy arrays as often as pm.Data.
"""

from functools import partial

from .irt_2pl import build_model as _twin

build_model = partial(_twin, numpy_indices=True)
