"""One fit of a compiled model to one dataset: check the data, swap it in, check the start, sample.

Everything that can go wrong with a dataset comes back as a :class:`FitError`
carrying the dataset's index and a one-line reason; the compiled model is
never changed (``with_data`` returns a new one sharing the compiled functions).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

import numpy as np

from pmfast.loading import one_line


class FitError(ValueError):
    """A dataset that could not be fitted: ``index`` (its position in the input) and a one-line ``reason``."""

    def __init__(self, index: int, reason: str):
        self.index = int(index)
        self.reason = one_line(reason)
        super().__init__(f"dataset {self.index}: {self.reason}")

    def __reduce__(self):  # survives pickling (Dask returns it from workers)
        return (type(self), (self.index, self.reason))


class DataError(ValueError):
    """What is wrong with one dataset (turned into a :class:`FitError` by the caller, who knows the index)."""


def seeds(seed: int | None, n: int) -> list[int]:
    """One independent 63-bit seed per dataset, derived from ``seed`` (fresh entropy if None).

    A dataset's seed depends only on ``seed`` and its index, never on where or
    when it runs, so a local run and a Dask run give the same fits.
    """
    children = np.random.SeedSequence(seed).spawn(n)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in children]


def swap_data(compiled, data):
    """``compiled.with_data(**data)`` after checking names, ranks, dtypes and integer ranges.

    Lengths may differ from the model's own data: the compiled callbacks read
    every array's pointer and shape at call time.
    """
    if not isinstance(data, Mapping):
        raise DataError(f"expected a dict of arrays named after the model's pm.Data, got {type(data).__name__}")
    known = compiled.shared_data
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise DataError(
            f"unknown data name{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the model's pm.Data are: {', '.join(sorted(known)) or '(none)'}"
        )
    arrays = {}
    for name, value in data.items():
        old = known[name]
        try:
            new = np.asarray(value)
        except Exception as exc:
            raise DataError(f"{name!r} is not an array: {type(exc).__name__}: {exc}") from exc
        if new.ndim != old.ndim:
            raise DataError(f"{name!r} has {new.ndim} dimension(s), the model's has {old.ndim} (shape {old.shape})")
        if new.dtype == object or not np.can_cast(new.dtype, old.dtype, "same_kind"):
            raise DataError(f"{name!r} has dtype {new.dtype}, which does not convert safely to the model's {old.dtype}")
        if old.dtype.kind in "iu" and new.size and new.dtype != old.dtype:
            info = np.iinfo(old.dtype)
            if new.min() < info.min or new.max() > info.max:
                raise DataError(f"{name!r} has values outside the range of the model's {old.dtype}")
        if new.dtype.kind == "f" and new.size and not np.all(np.isfinite(new)):
            raise DataError(f"{name!r} has non-finite values (nan or inf)")
        arrays[name] = new
    return compiled.with_data(**arrays)


_LOGP_CODES = {
    3: "the gradient is not finite at the initial point",
    4: "logp is not finite at the initial point (data outside the likelihood's support?)",
}


def check_start(compiled, seed: int) -> None:
    """Raise :class:`DataError` unless logp, gradient and the stored variables are finite and well-formed at the
    initial point nutpie would start from, with ``compiled``'s data.

    Calls the two C callbacks exactly as nutpie does (same function pointers,
    same ``user_data``).
    """
    x = np.ascontiguousarray(compiled.initial_point_func(seed), dtype="float64")
    if x.shape != (compiled.n_dim,) or not np.all(np.isfinite(x)):
        raise DataError("the initial point is not finite")
    grad, logp = np.empty(compiled.n_dim), np.empty(1)
    code = compiled.compiled_logp_func.ctypes(compiled.n_dim, _dptr(x), _dptr(grad), _dptr(logp), _vptr(compiled))
    if code in _LOGP_CODES:
        raise DataError(_LOGP_CODES[code])
    if code != 0:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in sorted(compiled.shared_data.items()))
        raise DataError(f"the model's logp fails with this data ({shapes}): {kernel_error(compiled, x)}")
    out = np.empty(compiled.n_expanded)
    code = compiled.compiled_expand_func.ctypes(compiled.n_dim, compiled.n_expanded, _dptr(x), _dptr(out), _vptr(compiled))
    if code != 0:
        raise DataError(
            "the model's stored variables (Deterministics) do not fit this data: they were compiled for "
            f"the model's own data shapes ({kernel_error(compiled, x, expand=True)})"
        )


def kernel_error(compiled, x, expand: bool = False) -> str:
    """The error the compiled graph raises at ``x`` with ``compiled``'s data (the C callbacks only return a code)."""
    fn = compiled.expand_func if expand else compiled.logp_func
    try:
        data = {**compiled.shared_data, **getattr(compiled, "derived_data", {})}
        fn.vm.jit_fn(x, *[data[v.name] for v in fn.get_shared()])
    except Exception as exc:
        return f"{type(exc).__name__}: {one_line(exc)}"
    return "an error inside the compiled function (are the data lengths consistent?)"


def _dptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


def _vptr(compiled):
    return ctypes.c_void_p(compiled.user_data.ctypes.data)


def fit_one(compiled, index: int, data, seed: int, draws: int, tune: int, chains: int, sample_kwargs: dict):
    """Fit ``data`` with ``compiled``; an ``arviz.InferenceData`` (dataset index and seed in its attrs) or a FitError.

    ``KeyboardInterrupt`` is not caught.
    """
    import nutpie

    try:
        fitted = swap_data(compiled, data)
        check_start(fitted, seed)
        sampler = nutpie.sample(
            fitted, draws=draws, tune=tune, chains=chains, seed=seed, progress_bar=False, blocking=False, **sample_kwargs
        )
        try:
            idata = sampler.wait()
        except BaseException:
            sampler.cancel()
            raise
    except DataError as exc:
        return FitError(index, str(exc))
    except Exception as exc:
        return FitError(index, f"sampling failed: {type(exc).__name__}: {exc}")
    idata.attrs["pmfast_dataset"] = int(index)
    idata.attrs["pmfast_seed"] = int(seed)
    return idata
