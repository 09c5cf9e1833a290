"""Node by node: stock's node functions against pmfast's linker's, on the same graph, alternately.

    OPENBLAS_NUM_THREADS=1 python bench/node_times.py MODEL [--passes index_dtypes] [--repeats 31] [--top 15]
    ... --nodes solve_triangular,elemwise_14   # only these, compared many times
    ... --profile [--passes all] [--point draw] [--json out.json]   # where each side's gradient goes
    python bench/node_times.py --core --catalogue /work/catalogue [--point typical] [--json core.json]
    python bench/node_times.py --table core.json   # the table again, from a whole or partial run

``--core``: ``--profile`` over the catalogue's core models (BENCHMARK_CORE.md's continuous ones), each
in a fresh process (``--timeout`` s each; a failure is recorded and the rest go on), then a markdown
table: per model both sides' whole-kernel µs and pmfast's top nodes with their share of its node sum.

``--profile``: stock's graph (``"none"``) and pmfast's (``--passes``, default all; the graphs may
differ) are each timed node by node at a point the sampler visits (``--point draw``: a draw of a
short stock nutpie run, the default; ``typical``: the initial point plus noise); per side the top
nodes by time with the op each runs (the graph source's comment line), and the sum. The whole
kernels are also timed, alternately at that point: stock's graph function as nutpie's numba backend
calls it, pmfast's C-ABI entry (:func:`pmfast.bench.entry_timer`).

When a model with no pass firing evaluates slower under pmfast than stock, the graph is the
same and the difference is in how pmfast's linker implements or compiles a node
(:mod:`pmfast.compiler.ops`, the source rewrites of :mod:`pmfast.linker`). This compiles the
model's logp+grad graph twice (``"none"``: pytensor's linker; ``--passes``: pmfast's, with a
selection that leaves the graph as stock's, by default ``index_dtypes``), runs each graph
function once at a typical point recording every node function's arguments, and times each
node function on its own arguments from an njit loop (thread CPU clock, short repeats, the
two sides alternating). Nodes are matched by position: both graph functions list the same
nodes in the same order when the graphs are equal (checked: same count).

Reports per node the minimum over the repeats (the least disturbed on a loaded machine) and
the median, largest differences first. In-place nodes run on their recorded inputs again and
again; both sides alike.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import types
from pathlib import Path

import numpy as np


def _jitted(f, n: int):
    """An njit function calling ``f`` (callable from numba code by name only) with ``n`` arguments."""
    import numba

    params = ", ".join(f"a{i}" for i in range(n))
    scope = {"f": f}
    exec(f"def w({params}):\n    return f({params})\n", scope)
    return numba.njit(scope["w"])


def _recorded_calls(fn, x):
    """``[(name, node function, args)]`` of one run of ``fn``'s graph function at point ``x``."""
    import numba

    import pmfast
    from pmfast.compiler.entry_spec import graph_function

    @numba.njit
    def call(f, args):  # node functions may have no CPython wrapper: call them from numba
        return f(*args)

    graph = graph_function(fn.vm.jit_fn)
    names = {
        s.value.func.id
        for s in ast.walk(ast.parse(graph.__source__))
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name)
    }
    calls, env = [], dict(graph.__globals__)
    for name in names:

        def recorder(*args, _f=env[name], _name=name):
            if not isinstance(_f, numba.core.dispatcher.Dispatcher):  # an overloaded Python function (stock's Elemwise)
                _f = _jitted(_f, len(args))
            calls.append((_name, _f, tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)))
            return call(_f, args)

        env[name] = recorder
    types.FunctionType(graph.__code__, env)(*pmfast.kernel_args(fn, x))
    return calls


def _labels(graph) -> list[str]:
    """The op comment of each node call in ``graph``'s source, in execution order."""
    labels, comment = [], ""
    for line in graph.__source__.splitlines():
        line = line.strip()
        if line.startswith("#"):
            comment = line[1:].strip()
        elif "=" in line and "(" in line and not line.startswith("return"):
            labels.append(comment)
            comment = ""
    return labels


def profile(fn, x, repeats: int, seconds: float, loop) -> list[tuple]:
    """``[(µs min, µs median, node function name, op label)]`` of ``fn``'s graph at ``x``, largest first."""
    from pmfast.bench import time_runs
    from pmfast.compiler.entry_spec import graph_function

    calls = _recorded_calls(fn, x)
    labels = _labels(graph_function(fn.vm.jit_fn))
    if len(labels) != len(calls):
        labels = [""] * len(calls)
    for _, f, a in calls:
        loop(f, 1, a)
    times = [[] for _ in calls]
    for _ in range(repeats):
        for (_, f, a), out in zip(calls, times):
            out += time_runs(lambda n, f=f, a=a: loop(f, n, a), 1, seconds)[0]
    rows = [(min(t), statistics.median(t), name, label) for (name, _, _), t, label in zip(calls, times, labels)]
    return sorted(rows, key=lambda r: -r[0])


def print_profile(side: str, rows, top: int) -> None:
    total = sum(r[0] for r in rows)
    print(f"{side}: sum of node minima {total:.2f} µs over {len(rows)} nodes")
    for mn, med, name, label in rows[:top]:
        print(f"  {mn:9.3f} {med:9.3f}  {100 * mn / total:5.1f}%  {name:<24} {label[:110]}")


def kernel_times(stock, fast, x, repeats: int = 7) -> dict:
    """Whole-kernel µs per logp+gradient call at ``x``, stock's and pmfast's alternating: ``{side: [min, median]}``."""
    import pmfast
    from pmfast.bench import entry_timer, time_calls

    timers = {
        "stock": lambda: time_calls(stock.vm.jit_fn, pmfast.kernel_args(stock, x), repeats=1)[0],
        "pmfast": lambda t=entry_timer(fast)[1]: t(x, 1),
    }
    times = {side: [] for side in timers}
    for _ in range(repeats):
        for side, timer in timers.items():
            times[side] += timer()
    return {side: [min(t), statistics.median(t)] for side, t in times.items()}


def short_label(label: str, width: int = 40) -> str:
    """An op label cut to ``width``: an ``IndexedElemwise`` as a gather, or a gather with a scatter-add."""
    if label.startswith("IndexedElemwise"):
        return "IndexedElemwise (gather, scatter-add)" if "+= " in label else "IndexedElemwise (gather)"
    return label if len(label) <= width else label[: width - 1] + "…"


def _us(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def core_table(results: list[dict], top: int = 3) -> str:
    """Markdown: per model both sides' kernel µs and pmfast's top nodes (µs, share of its node sum)."""
    lines = [
        f"| model | stock µs | pmfast µs | ratio | pmfast's top {top} nodes: µs (share of node sum) |",
        "|---|--:|--:|--:|---|",
    ]
    for r in results:
        name = Path(r["model"]).stem
        if "error" in r:
            lines.append(f"| {name} | – | – | – | {r['error'][:100]} |")
            continue
        s, f = r["kernel"]["stock"][1], r["kernel"]["pmfast"][1]
        total = sum(row[0] for row in r["pmfast"]) or 1.0
        nodes = "; ".join(f"`{short_label(row[3]) or row[2]}` {_us(row[0])} ({100 * row[0] / total:.0f}%)" for row in r["pmfast"][:top])
        lines.append(f"| {name} | {_us(s)} | {_us(f)} | {f / s:.2f} | {nodes} |")
    return "\n".join(lines)


def run_core(catalogue: str, point: str, passes: str, timeout: float, repeats: int, progress=print, on_row=None) -> list[dict]:
    """``--profile`` of every continuous core model, each in a fresh process; its JSON or ``{"error": ...}``.
    ``on_row(results so far)`` is called after each model."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from pmfast.bench import BLAS_ONE_THREAD
    from pmfast.sampler_bench import core_models

    results = []
    env = {**BLAS_ONE_THREAD, **os.environ}
    for spec in core_models(Path(catalogue), discrete=False):
        progress(f"{Path(spec).stem} ...")
        with tempfile.TemporaryDirectory(prefix="pmfast-nodes-") as tmp:
            out = Path(tmp) / "out.json"
            cmd = [sys.executable, __file__, spec, "--profile", "--point", point, "--passes", passes]
            cmd += ["--repeats", str(repeats), "--json", str(out), "--top", "0"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
                if proc.returncode or not out.is_file():
                    tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
                    results.append({"model": spec, "error": tail[-1] if tail else f"exit code {proc.returncode}"})
                else:
                    results.append(json.loads(out.read_text()))
            except subprocess.TimeoutExpired:
                results.append({"model": spec, "error": f"timed out after {timeout:.0f} s"})
        results[-1]["loadavg"] = os.getloadavg()[0]
        if on_row is not None:
            on_row(results)
    return results


def main(argv=None):
    import numba

    import pmfast
    from pmfast.bench import bench_points, time_runs
    from pmfast.loading import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--passes", default="index_dtypes")
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--seconds", type=float, default=0.005, help="length of one timed repeat")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--nodes", default="", help="comma list of node function names (stock's): only these")
    ap.add_argument("--profile", action="store_true", help="each side's own graph, node by node (see above)")
    ap.add_argument("--point", default="draw", help="--profile: draw, typical or initial")
    ap.add_argument("--json", default=None, help="--profile, --core: write the rows here")
    ap.add_argument("--core", action="store_true", help="--profile each core model of --catalogue (see above)")
    ap.add_argument("--catalogue", default=None, help="--core: a checkout of the PyMC model catalogue")
    ap.add_argument("--timeout", type=float, default=900.0, help="--core: seconds per model")
    ap.add_argument("--table", default=None, help="print the markdown table of a --core JSON (a partial one too)")
    args = ap.parse_args(argv)
    if args.table:
        import json

        with open(args.table) as f:
            run = json.load(f)
        print(f"commit {run['commit']}, point {run['point']}, load average {run['loadavg_start'][0]:.2f} at start, {run['loadavg_end'][0]:.2f} at end")
        print(core_table(run["models"]))
        return
    if args.core:
        import json

        if not args.catalogue:
            ap.error("--core needs --catalogue DIR")
        point = "typical" if args.point == "draw" else args.point
        passes = "all" if args.passes == "index_dtypes" else args.passes
        import os
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()
        load = os.getloadavg()

        def write(results):  # after every model: a partial run keeps what it measured
            if args.json:
                with open(args.json, "w") as f:
                    meta = {"commit": commit, "point": point, "passes": passes, "loadavg_start": load, "loadavg_end": os.getloadavg()}
                    json.dump({**meta, "models": results}, f, indent=1)

        results = run_core(args.catalogue, point, passes, args.timeout, args.repeats, on_row=write)
        print(f"commit {commit}, point {point}, load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
        print(core_table(results))
        return
    if not args.model:
        ap.error("a MODEL (or --core --catalogue DIR) is needed")

    @numba.njit
    def loop(f, n, a):
        for _ in range(n):
            f(*a)
        return 0

    model, _ = load_model(args.model)
    if args.profile:
        import json

        passes = "all" if args.passes == "index_dtypes" else args.passes
        stock, x0 = pmfast.logp_dlogp_function(model, "none")
        x = bench_points(x0, args.point, model=model, n=1)[0]
        out, fns = {}, {}
        for side, selection in (("stock", "none"), ("pmfast", passes)):
            fn = stock if side == "stock" else pmfast.logp_dlogp_function(model, selection if selection in ("all", "none") else selection.split(","))[0]
            out[side] = profile(fn, x, args.repeats, args.seconds, loop)
            print_profile(side, out[side], args.top)
            fns[side] = fn
        out["kernel"] = kernel_times(fns["stock"], fns["pmfast"], x)
        print("whole kernel µs (min, median): " + ", ".join(f"{k} {v[0]:.2f} {v[1]:.2f}" for k, v in out["kernel"].items()))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"model": args.model, "point": args.point, **out}, f, indent=1)
        return
    stock, x0 = pmfast.logp_dlogp_function(model, "none")
    fast, _ = pmfast.logp_dlogp_function(model, args.passes if args.passes in ("all", "none") else args.passes.split(","))
    x = bench_points(x0)[1]
    pairs = list(zip(_recorded_calls(stock, x), _recorded_calls(fast, x)))
    if len(stock.maker.fgraph.apply_nodes) != len(fast.maker.fgraph.apply_nodes):
        raise SystemExit("the two graphs differ (node counts): pick --passes that leave the graph as stock's")
    if args.nodes:
        pairs = [p for p in pairs if p[0][0] in args.nodes.split(",")]
    for s, f in pairs:  # compile the loop for every signature before timing
        loop(s[1], 1, s[2]), loop(f[1], 1, f[2])
    times = [([], []) for _ in pairs]
    for r in range(args.repeats):
        for (s, f), (ts, tf) in zip(pairs, times):
            sides = [(s, ts), (f, tf)] if r % 2 == 0 else [(f, tf), (s, ts)]
            for (_, func, a), out in sides:
                out += time_runs(lambda n, func=func, a=a: loop(func, n, a), 1, args.seconds)[0]
    rows = sorted(
        ((min(tf) - min(ts), s[0], f[0], min(ts), min(tf), statistics.median(ts), statistics.median(tf)) for (s, f), (ts, tf) in zip(pairs, times)),
        key=lambda row: -abs(row[0]),
    )
    total = [sum(row[i] for row in rows) for i in (3, 4)]
    print(f"sum of node minima (µs): stock {total[0]:.2f}, pmfast {total[1]:.2f} ({total[1] / total[0]:.3f}x); {len(rows)} nodes")
    print(f"{'min diff':>9}  {'stock node':<36}{'pmfast node':<36}{'min µs':>17}{'median µs':>19}")
    for d, ns, nf, ms, mf, es, ef in rows[: args.top if not args.nodes else None]:
        print(f"{d:+9.3f}  {ns:<36}{nf:<36}{ms:8.3f} {mf:8.3f}{es:9.3f} {ef:9.3f}")


if __name__ == "__main__":
    main()
