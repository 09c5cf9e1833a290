"""Where a compile's seconds go: per stage, per numba function, per numba phase (typing, lowering, LLVM).

    python bench/compile_profile.py MODEL [MODEL ...] [--side pmfast|stock] [--passes all] [--top 25]
        [--catalogue DIR] [--rewrites-only]

With several models (e.g. ``wide_additive:n=20 wide_additive:n=80 wide_additive:n=320``)
it also prints a table of stage seconds, logp graph nodes and peak RSS per model
and the growth exponent of each stage in the node count (least squares on logs).
``--catalogue DIR`` resolves a bare NAME to ``DIR/models/NAME.py`` (loaded from
that path at bench time, never copied).

Runs the compile in a fresh process with an empty pytensor/numba cache (or
``--cache DIR``), records numba's compiler events and LLVM's lock (every
llvmlite FFI call holds it, so its time is the time spent inside LLVM), and
prints exclusive seconds per function and phase: a callee compiled during its
caller's type inference is charged to the callee.

``--rewrites-only`` times the graph stages alone, without numba: the initial point
function and each step of building the raveled logp+gradient graph as the compile
does (``graph: …``, summed as ``graph build``; pmfast's side without creation traces,
as inside ``pmfast.compile``), then each top-level entry of the mode's rewrite
sequence (pytensor's phases; pmfast's passes marked ``pmfast:``), so the
rewrites' growth exponent can be measured on big graphs in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

PHASES = {
    "nopython_type_inference": "typing",
    "native_lowering": "lowering",
    "nopython_rewrites": "rewrites",
    "inline_overloads": "rewrites",
}


class Recorder:
    """Exclusive CPU seconds (this thread) per (function, phase) from numba's events."""

    def __init__(self):
        self.stack: list[list] = []  # [func, phase, start, child_seconds]
        self.table: dict = defaultdict(float)
        self.llvm = 0.0
        self.llvm_by_func: dict = defaultdict(float)
        self.llvm_by_phase: dict = defaultdict(float)
        self.cache_loads: dict = defaultdict(float)
        self.llvm_steps: dict = defaultdict(float)
        self.by_pass: dict = defaultdict(float)

    def push(self, func, phase):
        self.stack.append([func, phase, time.thread_time(), 0.0])

    def pop(self):
        func, phase, t0, child = self.stack.pop()
        dt = time.thread_time() - t0
        if isinstance(phase, tuple):  # (phase, numba pass name)
            self.by_pass[phase[1]] += dt - child
            phase = phase[0]
        self.table[(func, phase)] += dt - child
        if self.stack:
            self.stack[-1][3] += dt
        return dt

    def install(self):
        from numba.core import event

        rec = self

        class Compile(event.Listener):
            def on_start(self, ev):
                d = ev.data["dispatcher"]
                rec.push(getattr(d, "__qualname__", None) or getattr(d.py_func, "__qualname__", str(d)), "other")

            def on_end(self, ev):
                rec.pop()

        class Pass(event.Listener):
            def on_start(self, ev):
                func = rec.stack[-1][0] if rec.stack else ev.data["qualname"]
                name = ev.data["name"].split(" [")[0]
                rec.push(func, (PHASES.get(name, "other passes"), name))

            def on_end(self, ev):
                rec.pop()

        class Llvm(event.Listener):
            def on_start(self, ev):
                self.t0 = time.thread_time()

            def on_end(self, ev):
                dt = time.thread_time() - self.t0
                rec.llvm += dt
                if rec.stack:
                    rec.llvm_by_func[rec.stack[-1][0]] += dt
                    phase = rec.stack[-1][1]
                    rec.llvm_by_phase[phase[0] if isinstance(phase, tuple) else phase] += dt

        event.register("numba:compile", Compile())
        event.register("numba:run_pass", Pass())
        event.register("numba:llvm_lock", Llvm())

        from numba.core.caching import Cache

        orig_load = Cache.load_overload

        def load_overload(cache, sig, target_context):
            t0 = time.thread_time()
            try:
                return orig_load(cache, sig, target_context)
            finally:
                rec.cache_loads[cache._name] += time.thread_time() - t0

        Cache.load_overload = load_overload

        from numba.core import codegen

        def timed(cls, name, label):
            orig = getattr(cls, name)

            def wrapper(*args, **kwargs):
                t0 = time.thread_time()
                try:
                    return orig(*args, **kwargs)
                finally:
                    rec.llvm_steps[label] += time.thread_time() - t0

            setattr(cls, name, wrapper)

        timed(codegen.CPUCodeLibrary, "_optimize_functions", "function passes")
        timed(codegen.CPUCodeLibrary, "_optimize_final_module", "module passes")
        timed(codegen.JITCodeLibrary, "_finalize_specific", "machine code")
        timed(codegen.CPUCodeLibrary, "add_ir_module", "parse + function passes")

    def summary(self, top: int):
        by_phase = defaultdict(float)
        by_func = defaultdict(lambda: defaultdict(float))
        for (func, phase), s in self.table.items():
            by_phase[phase] += s
            by_func[func][phase] += s
        funcs = sorted(by_func.items(), key=lambda kv: -sum(kv[1].values()))
        return {
            "by_phase": dict(by_phase),
            "llvm_total": self.llvm,
            "llvm_by_phase": dict(self.llvm_by_phase),
            "llvm_steps": dict(self.llvm_steps),
            "by_pass": dict(self.by_pass),
            "n_functions": len(by_func),
            "cache_load_total": sum(self.cache_loads.values()),
            "n_cache_loads": len(self.cache_loads),
            "top": [
                {"func": f, "total": sum(p.values()), "llvm": self.llvm_by_func.get(f, 0.0), **p}
                for f, p in funcs[:top]
            ],
        }


def worker(model_spec, side, passes, top):
    import nutpie

    import pmfast
    from pmfast.loading import load_model

    model, _ = load_model(model_spec)
    if os.environ.get("PMFAST_PROFILE_SETUP"):  # an experiment to run before compiling
        exec(open(os.environ["PMFAST_PROFILE_SETUP"]).read(), {"__name__": "setup"})
    rec = Recorder()
    rec.install()
    rewrite_cpu = time_rewrites()
    c0, t0 = time.process_time(), time.perf_counter()
    if side == "stock":
        compiled = nutpie.compile_pymc_model(model)
        timings = {}
    else:
        compiled = pmfast.compile(model, passes=passes)
        timings = compiled.timings
    out = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "timings": timings}
    # the forked worker's CPU (pmfast.compiler.handover), not in this process's numba events
    cpu_t = getattr(compiled, "cpu_timings", {})
    out["worker_cpu"] = cpu_t.get("numba: worker", 0.0) + cpu_t.get("numba: prefetch", 0.0)
    out["cpu_timings"] = dict(getattr(compiled, "cpu_timings", {}))
    out["rewrite_cpu"] = rewrite_cpu[0]
    out["parts"] = [len(getattr(k, "parts", ())) for k in getattr(compiled, "kernels", ())]
    out.update(rec.summary(top))
    out["n_dim"] = int(compiled.n_dim)
    out["nodes"] = logp_nodes(model)
    from pmfast.bench import peak_rss_mb

    out["peak_rss_mb"] = peak_rss_mb()
    out["peak_rss_children_mb"] = peak_rss_mb(children=True)
    return out


def time_rewrites() -> list:
    """CPU seconds spent in top-level pytensor graph rewriting (the mode's optimizer), summed into the returned cell."""
    from pytensor.graph.rewriting.basic import SequentialGraphRewriter

    cell, depth = [0.0], [0]
    orig = SequentialGraphRewriter.apply

    def apply(self, fgraph, *args, **kwargs):
        depth[0] += 1
        t0 = time.process_time()
        try:
            return orig(self, fgraph, *args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:
                cell[0] += time.process_time() - t0

    SequentialGraphRewriter.apply = apply
    return cell


def rewrites_worker(model_spec, side, passes):
    """Seconds of the graph stages of a compile and of each top-level rewrite of the mode's sequence (no numba).

    Built as ``pmfast.compile`` builds them (nutpie's ``_make_functions``): pmfast's side inside its
    compile scope (compile-scoped patches, its garbage collector setting, no creation traces,
    pmfast's trace shapes); stock's as
    nutpie does. ``graph build`` sums the ``graph:`` steps; ``initial point`` is timed apart.
    """
    from pytensor.compile import optdb
    from pytensor.compile.function.pfunc import rebuild_collect_shared
    from pytensor.compile.function.types import std_fgraph
    from pytensor.compile.io import In, Out

    import pmfast
    from pmfast import nutpie_glue
    from pmfast.compiler import collector, patching
    from pmfast.loading import load_model

    model, _ = load_model(model_spec)
    if side != "stock":  # as pmfast.compile builds it: pmfast's compile-scoped patches active
        from pmfast import compiler

        compiler.setup()
        nutpie_glue._install_trace_shapes()
    timings = {}
    scope = contextlib.ExitStack()
    if side != "stock":
        for cm in (patching.compiling(), collector.relaxed(), nutpie_glue._python_vm(), nutpie_glue._creation_traces()):
            scope.enter_context(cm)
    with scope:
        joined, logp, grad = build_graphs(model, timings)
        mode = pmfast.get_mode("none" if side == "stock" else passes)
        ours = {getattr(r, "name", None) for r in optdb.__db__.get("pmfast", ())}
        with patching.compiling():
            c0 = time.process_time()
            ins, outs, (_, _, _, shared) = rebuild_collect_shared([logp, grad], [joined], rebuild_strict=True)
            fgraph, _ = std_fgraph([*map(In, ins), *map(In, shared)], [*map(Out, outs)])
            timings["graph: function graph"] = time.process_time() - c0
            rewriter = mode.optimizer
            rewriter.add_requirements(fgraph)
            for r in rewriter.data:
                name = getattr(r, "name", None) or type(r).__name__
                t0 = time.process_time()
                r.apply(fgraph)
                key = ("pmfast:" if name in ours else "") + name
                timings[key] = timings.get(key, 0.0) + time.process_time() - t0
    timings["graph build"] = sum(v for k, v in timings.items() if k.startswith("graph:"))
    rewrites = sum(v for k, v in timings.items() if not k.startswith(("graph", "initial point")))
    pm_s = sum(v for k, v in timings.items() if k.startswith("pmfast:"))
    return {
        "wall": rewrites, "cpu": rewrites, "timings": timings, "rewrites": rewrites, "pmfast_passes": pm_s,
        "nodes": logp_nodes(model), "rewritten_nodes": len(fgraph.apply_nodes),
        "by_phase": {}, "llvm_steps": {}, "llvm_total": 0.0, "peak_rss_mb": _peak_rss(),
    }


def build_graphs(model, timings: dict):
    """The initial point function, then the raveled logp and gradient graphs as nutpie's ``_make_functions``
    builds them, each step's CPU seconds into ``timings`` (``initial point``, ``graph: …``)."""
    import pytensor
    import pytensor.tensor as pt
    from math import prod
    from nutpie import compile_pymc as np_compile
    from pymc.initial_point import make_initial_point_fn

    @contextlib.contextmanager
    def step(name):
        t0 = time.process_time()
        yield
        timings[name] = timings.get(name, 0.0) + time.process_time() - t0

    with step("initial point"):
        make_initial_point_fn(model=model, jitter_rvs=set(model.free_RVs), return_transformed=True)
    with step("graph: shapes"):
        shapes = np_compile._compute_shapes(model)
    value_vars = [model.rvs_to_values[rv] for rv in model.free_RVs]
    with step("graph: model.logp"):
        logp = model.logp()
    with step("graph: logp rewrite"):
        rewrites = ["canonicalize", "stabilize"] + ([] if model.check_bounds else ["local_remove_check_parameter"])
        logp = pytensor.graph.rewrite_graph(logp, include=rewrites)
    with step("graph: grad"):
        grads = pytensor.gradient.grad(logp, value_vars)
        grad = pt.concatenate([pt.as_tensor(g, allow_xtensor_conversion=True).ravel() for g in grads])
    with step("graph: clone_replace"):
        sizes = [prod(shapes[v.name]) for v in value_vars]
        joined = pt.TensorType("float64", shape=(sum(sizes),))(name="_unconstrained_point")
        offsets = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        replacements = {
            v: joined[slice(offsets[i], offsets[i + 1])].reshape(shapes[v.name]).astype(rv.dtype)
            for i, (rv, v) in enumerate(zip(model.free_RVs, value_vars))
        }
        logp, grad = pytensor.clone_replace([logp, grad], replacements)
    return joined, logp, grad


def _peak_rss() -> float:
    from pmfast.bench import peak_rss_mb

    return peak_rss_mb()


def logp_nodes(model) -> int:
    """Apply nodes of the model's (unrewritten) logp graph: the size measure for growth fits."""
    from pytensor.graph.traversal import applys_between

    return sum(1 for _ in applys_between(model.value_vars, [model.logp()]))


def resolve(spec: str, catalogue: str | None) -> str:
    """A bare catalogue model name -> its file under ``catalogue/models`` (zoo specs pass through)."""
    if catalogue and os.path.exists(os.path.join(catalogue, "models", spec.split(":")[0] + ".py")):
        name, _, rest = spec.partition(":")
        return os.path.join(catalogue, "models", name + ".py") + (":" + rest if rest else "")
    return spec


def exponent(xs, ys) -> float:
    """Slope of log(y) on log(x): the growth exponent (nan with fewer than two usable points)."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 1e-3]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((a - mx) * (b - my) for a, b in pts) / sum((a - mx) ** 2 for a, _ in pts)


def stages(r) -> dict:
    """Seconds per stage of one profile: pmfast's own stages, numba phases and LLVM steps."""
    out = {"wall": r["wall"], "cpu": r["cpu"], "worker cpu": r.get("worker_cpu", 0.0)}
    out.update({f"stage:{k}": v for k, v in r["timings"].items()})
    out.update({f"numba:{k}": v for k, v in r["by_phase"].items()})
    out.update({f"llvm:{k}": v for k, v in r["llvm_steps"].items()})
    out["llvm:total"] = r["llvm_total"]
    if "pmfast_passes" in r:
        out["pmfast passes (sum)"] = r["pmfast_passes"]
    return out


def growth_table(specs, results) -> None:
    """Print stage seconds per model (columns) and each stage's growth exponent in logp nodes."""
    per = [stages(r) for r in results]
    keys = sorted({k for p in per for k in p}, key=lambda k: -max(p.get(k, 0) for p in per))
    nodes = [r["nodes"] for r in results]
    print(f"  {'':<40}" + "".join(f"{os.path.basename(s)[-14:]:>15}" for s in specs) + f"{'exponent':>10}")
    print(f"  {'logp nodes':<40}" + "".join(f"{n:>15}" for n in nodes))
    print(f"  {'peak RSS MB':<40}" + "".join(f"{r['peak_rss_mb']:>15.0f}" for r in results))
    for k in keys:
        ys = [p.get(k, 0.0) for p in per]
        if max(ys) < 0.05:
            continue
        print(f"  {k[:40]:<40}" + "".join(f"{y:>15.2f}" for y in ys) + f"{exponent(nodes, ys):>10.2f}")


def cpu_stages(r) -> dict:
    """One full pmfast profile's CPU seconds by stage: graph build, rewrites, numba (worker included), total."""
    cpu = r.get("cpu_timings", {})
    graphs = cpu.get("graphs + rewrites", 0.0) + cpu.get("data_hoist", 0.0) + cpu.get("initial point", 0.0)
    numba = sum(v for k, v in cpu.items() if k.startswith("numba"))
    rewrites = r.get("rewrite_cpu", 0.0)
    return {"graph build": graphs - rewrites, "rewrites": rewrites, "numba + LLVM": numba,
            "total": r["cpu"] + r.get("worker_cpu", 0.0)}


def growth_summary(specs, pm, stock) -> list[str]:
    """Markdown rows: logp nodes, pmfast's CPU s by stage and stock's total, each with its exponent
    over the sizes that finished (``None``: over the timeout)."""
    done = [(s, r) for s, r in zip(specs, pm) if r is not None]
    nodes = {s: r["nodes"] for s, r in done}
    for s, r in zip(specs, stock):
        if r is not None:
            nodes.setdefault(s, r["nodes"])
    head = "| | " + " | ".join(f"{os.path.basename(s)} ({nodes.get(s, '?')})" for s in specs) + " | exponent |"
    rows = [head, "|---|" + "---:|" * (len(specs) + 1)]

    def row(label, values):
        xs = [nodes[s] for s, v in zip(specs, values) if v is not None]
        ys = [v for v in values if v is not None]
        cells = " | ".join("—" if v is None else f"{v:.1f}" for v in values)
        rows.append(f"| {label} | {cells} | {exponent(xs, ys):.2f} |")

    per = [None if r is None else cpu_stages(r) for r in pm]
    for k in ("total", "graph build", "rewrites", "numba + LLVM"):
        row(f"pmfast {k}", [None if p is None else p[k] for p in per])
    if any(r is not None for r in stock):
        row("stock total", [None if r is None else r["cpu"] + r.get("worker_cpu", 0.0) for r in stock])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="+")
    ap.add_argument("--catalogue", help="pymc-model-catalogue checkout: bare names load DIR/models/NAME.py")
    ap.add_argument("--side", default="pmfast", choices=("pmfast", "stock"))
    ap.add_argument("--passes", default="all")
    ap.add_argument("--cache", help="compile directory to use (default: a fresh empty one)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    ap.add_argument("--rewrites-only", action="store_true", help="time the graph stages only (no numba)")
    ap.add_argument("--timeout", type=float, help="seconds per model (wall); a model over it is left out of the table")
    ap.add_argument("--growth", action="store_true",
                    help="CPU s per stage against logp nodes, pmfast and stock (each in a fresh process), as a markdown table")
    ap.add_argument("--stock-timeout", type=float, help="--growth: stock's own timeout (0: pmfast only)")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args(argv)
    if args.worker:
        if args.rewrites_only:
            print(json.dumps(rewrites_worker(args.model[0], args.side, args.passes)))
        else:
            print(json.dumps(worker(args.model[0], args.side, args.passes, args.top)))
        return
    specs = [resolve(m, args.catalogue) for m in args.model]
    if args.growth:
        pm = [profile_one(spec, args) for spec in specs]
        args.side = "stock"
        stock = [profile_one(spec, args) for spec in specs] if args.stock_timeout != 0 else [None] * len(specs)
        print("\n".join(growth_summary(specs, pm, stock)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"pmfast": dict(zip(specs, pm)), "stock": dict(zip(specs, stock))}, f, indent=1)
        return
    results = [profile_one(spec, args) for spec in specs]
    done = [(s, r) for s, r in zip(specs, results) if r is not None]
    if len(done) > 1:
        growth_table([s for s, _ in done], [r for _, r in done])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(zip(specs, results)), f, indent=1)


def profile_one(spec, args) -> dict | None:
    """Profile one model in a fresh process with a fresh (or the given) cache; print its breakdown."""
    with tempfile.TemporaryDirectory(prefix="pmfast-profile-") as d:
        cache = args.cache or d
        env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={cache}", "NUMBA_CACHE_DIR": os.path.join(cache, "numba-cache")}
        cmd = [sys.executable, __file__, spec, "--side", args.side, "--passes", args.passes, "--top", str(args.top), "--worker"]
        cmd += ["--rewrites-only"] if args.rewrites_only else []
        try:
            timeout = args.stock_timeout if args.side == "stock" and args.stock_timeout else args.timeout
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{spec} ({args.side}): over the {timeout:.0f} s timeout, left out")
            return None
    if res.returncode:
        sys.exit(res.stderr)
    r = json.loads(res.stdout.strip().splitlines()[-1])
    if args.rewrites_only:
        print(f"{spec} ({args.side}, rewrites only): rewrites {r['rewrites']:.2f} s (pmfast passes {r['pmfast_passes']:.2f}), "
              f"logp nodes {r['nodes']} -> {r['rewritten_nodes']} rewritten logp+grad nodes")
        for k, v in sorted(r["timings"].items(), key=lambda kv: -kv[1])[: args.top]:
            if v >= 0.005:
                print(f"  {k[:50]:<50}{v:7.2f}")
        return r
    print(f"{spec} ({args.side}): wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s (worker {r.get('worker_cpu', 0):.2f}), "
          f"n_dim {r['n_dim']}, logp nodes {r['nodes']}, peak RSS {r['peak_rss_mb']:.0f} MB "
          f"(forked children {r.get('peak_rss_children_mb', 0):.0f} MB), parts {r.get('parts')}")
    for k, v in r["timings"].items():
        print(f"  stage {k:<36}{v:7.2f}")
    print(f"  numba functions compiled: {r['n_functions']}; cache loads {r['n_cache_loads']} ({r['cache_load_total']:.2f} s)")
    print(f"  inside LLVM (lock held): {r['llvm_total']:.2f} s; " + ", ".join(f"{k} {v:.2f}" for k, v in r["llvm_steps"].items()))
    for k, v in sorted(r["by_phase"].items(), key=lambda kv: -kv[1]):
        print(f"  phase {k:<36}{v:7.2f}  (of which in LLVM {r['llvm_by_phase'].get(k, 0):.2f})")
    passes = sorted(r["by_pass"].items(), key=lambda kv: -kv[1])[:12]
    print("  numba passes: " + ", ".join(f"{k} {v:.2f}" for k, v in passes))
    print(f"  {'function':<60}{'total':>7}{'typing':>8}{'lower':>8}{'llvm':>7}")
    for row in r["top"]:
        print(f"  {row['func'][:60]:<60}{row['total']:7.2f}{row.get('typing', 0):8.2f}{row.get('lowering', 0):8.2f}{row['llvm']:7.2f}")
    return r


if __name__ == "__main__":
    main()
