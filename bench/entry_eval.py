"""Eval of the code nutpie calls (the entry) against the pytensor kernel, alternately in one process.

    python bench/entry_eval.py [MODELS...] [--repeats 9] [--passes all]

``kernel``: ``fn.vm.jit_fn`` called from an njit loop (what ``pmfast bench``
times on the stock side); ``entry`` (its pmfast side, :func:`pmfast.bench.entry_timer`): the model's logp+grad entry (:mod:`pmfast.compiler.entry`)
called through its address from an njit loop, as the sampler callback calls
it (views of the point and the shared data, the graph, the gradient written
into the caller's buffer). Thread CPU clock, medians of alternating repeats.
"""

from __future__ import annotations

import argparse
import statistics

from pmfast.bench import entry_timer, time_calls


def main(argv=None):
    import pmfast
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
        _, time_entry = entry_timer(fn)
        kargs = pmfast.kernel_args(fn, x0)
        times = {"kernel": [], "entry": []}
        for _ in range(args.repeats):
            times["kernel"].append(time_calls(fn.vm.jit_fn, kargs, repeats=1)[0][0])
            times["entry"] += time_entry(x0)
        k, e = statistics.median(times["kernel"]), statistics.median(times["entry"])
        print(f"{spec:<28}{k:11.2f}{e:11.2f}{e / k:14.3f}", flush=True)


if __name__ == "__main__":
    main()
