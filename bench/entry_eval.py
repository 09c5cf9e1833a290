"""Eval of the code nutpie calls (the entry) against the pytensor kernel, alternately in one process.

    python bench/entry_eval.py [MODELS...] [--repeats 9] [--passes all]

``kernel``: ``fn.vm.jit_fn`` called from an njit loop (what ``pmfast bench``
times); ``entry``: the model's logp+grad entry (:mod:`pmfast.compiler.entry`)
called through its address from an njit loop, as the sampler callback calls
it (views of the point and the shared data, the graph, the gradient written
into the caller's buffer). Thread CPU clock, medians of alternating repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np

from pmfast.bench import time_calls
from pmfast.compiler.native import call_native4, data_pointer


@numba.njit
def _entry_loop(address, n, x, out, logp, user_data):
    acc = 0.0
    for _ in range(n):
        call_native4(address, 1, data_pointer(x), data_pointer(out), data_pointer(logp), data_pointer(user_data))
        acc += logp[0]
    return acc


def time_entry(kernel, x, repeats: int, seconds: float = 0.1):
    ud = kernel.user_data_.view(np.uint8).reshape(-1) if kernel.user_data_.shape else np.frombuffer(kernel.user_data_.tobytes(), np.uint8)
    ud = kernel.user_data_  # a 0-d record array: its buffer is what the entry reads
    buf = np.ndarray((ud.dtype.itemsize,), np.uint8, buffer=ud)
    out, logp = np.zeros(x.size), np.zeros(1)
    _entry_loop(kernel.entry.address, 1, x, out, logp, buf)
    n = 1
    while True:
        t0 = time.thread_time()
        _entry_loop(kernel.entry.address, n, x, out, logp, buf)
        dt = time.thread_time() - t0
        if dt >= seconds / 10:
            break
        n *= 10
    n = max(1, int(n * seconds / dt))
    t0 = time.thread_time()
    _entry_loop(kernel.entry.address, n, x, out, logp, buf)
    return (time.thread_time() - t0) / n * 1e6


def main(argv=None):
    import pmfast
    from pmfast import nutpie_glue
    from pmfast.loading import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["eight_schools_noncentered", "poisson_offset", "radon_intercept"])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--passes", default="all")
    args = ap.parse_args(argv)
    print(f"{'model':<28}{'kernel µs':>11}{'entry µs':>11}{'entry/kernel':>14}")
    for spec in args.models:
        model, _ = load_model(spec)
        fn, x0 = pmfast.logp_dlogp_function(model, args.passes)
        kernel = nutpie_glue.logp_kernel(fn)
        kargs = pmfast.kernel_args(fn, x0)
        times = {"kernel": [], "entry": []}
        for _ in range(args.repeats):
            times["kernel"].append(time_calls(fn.vm.jit_fn, kargs, repeats=1)[0][0])
            times["entry"].append(time_entry(kernel, x0, 1))
        k, e = statistics.median(times["kernel"]), statistics.median(times["entry"])
        print(f"{spec:<28}{k:11.2f}{e:11.2f}{e / k:14.3f}", flush=True)


if __name__ == "__main__":
    main()
