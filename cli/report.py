"""What the commands write and print: traces (netCDF, trace plot, summary table), the bench table and chart, node counts.

Heavy modules (arviz, matplotlib, rich, numpy) are imported inside the functions, so importing this
module keeps ``pmfast --help`` fast.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

SUMMARY_ROWS = 30
SUMMARY_COLUMNS = ("mean", "sd", "hdi_3%", "hdi_97%", "ess_bulk", "ess_tail", "r_hat")
PLOT_VARS = 4
PLOT_ELEMENTS = 8


def write_netcdf(idata, path: Path) -> None:
    """Write ``idata`` to ``path`` atomically: a temp file in the same directory, then ``os.replace``."""
    path = Path(path)
    for key, value in list(idata.attrs.items()):
        if isinstance(value, bool):
            idata.attrs[key] = int(value)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        idata.to_netcdf(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sizes(posterior) -> dict[str, int]:
    """Elements per posterior variable, leaving out transformed (``*__``) variables when there are others."""
    sizes = {
        name: math.prod(n for d, n in var.sizes.items() if d not in ("chain", "draw"))
        for name, var in posterior.data_vars.items()
    }
    return {k: v for k, v in sizes.items() if not k.endswith("__")} or sizes


def complete_draws(idata) -> int:
    """Posterior draws every chain has finished (an interrupted run pads shorter chains with NaN)."""
    import numpy as np

    if "posterior" not in idata.groups() or not idata.posterior.data_vars:
        return 0
    var = next(iter(idata.posterior.data_vars.values()))
    finite = np.isfinite(var).all([d for d in var.dims if d not in ("chain", "draw")])
    return int(finite.sum("draw").min())


def write_trace_plot(idata, path: Path) -> list[str]:
    """Save an ``az.plot_trace`` PNG of the first few variables (first few elements of each dim)."""
    import matplotlib

    matplotlib.use("Agg")
    import arviz as az
    import matplotlib.pyplot as plt

    posterior = idata.posterior
    names = list(_sizes(posterior))[:PLOT_VARS]
    subset = posterior[names]
    subset = subset.isel({d: slice(0, PLOT_ELEMENTS) for d in subset.dims if d not in ("chain", "draw")})
    axes = az.plot_trace(subset, compact=True)
    fig = axes.ravel()[0].figure
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return names


def print_summary(idata, max_rows: int = SUMMARY_ROWS) -> None:
    """Print ``az.summary`` of the posterior as a table: smallest variables first, at most ``max_rows`` rows."""
    import arviz as az
    from rich.console import Console
    from rich.table import Table

    sizes = _sizes(idata.posterior)
    names, rows = [], 0
    for name, size in sorted(sizes.items(), key=lambda item: item[1]):
        if rows >= max_rows:
            break
        names.append(name)
        rows += size
    df = az.summary(idata, var_names=names).head(max_rows)
    df = df[[c for c in SUMMARY_COLUMNS if c in df.columns]]
    total = sum(sizes.values())
    title = f"posterior summary ({len(df)} of {total} rows)" if total > len(df) else "posterior summary"
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for column in df.columns:
        table.add_column(str(column), justify="right")
    for label, row in df.iterrows():
        table.add_row(str(label), *(f"{v:.0f}" if c.startswith("ess") else f"{v:.3g}" for c, v in row.items()))
    Console().print(table)


def spec_label(spec: str) -> str:
    """How a model spec is shown: a zoo spec as given, a file spec as ``file.py:function`` (the JSON keeps the path)."""
    head, sep, function = spec.partition(":")
    if not (head.endswith(".py") or "/" in head or "\\" in head):
        return spec
    return f"{Path(head).name}:{function or 'build_model'}"


def _parity(x: float) -> str:
    return "0" if x == 0 else "nan" if math.isnan(x) else f"{x:.0e}"


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


BENCH_COLUMNS = ("compile s", "RSS MB", "eval µs", "Δ")


def bench_lines(results, means, passes, cold) -> list[str]:
    """The bench table as plain lines: each model's spec whole on a line of its own, then its stock,
    pmfast and ratio rows in fixed columns (54 characters wide: readable at 80 columns)."""
    row = "{:<9}" + "{:>11}" * len(BENCH_COLUMNS)
    rule = "─" * len(row.format("", *BENCH_COLUMNS))
    lines = [f"pmfast (passes={passes}) vs stock, {'cold' if cold else 'warm'} numba cache", row.format("", *BENCH_COLUMNS), rule]
    for r in results:
        lines.append(spec_label(r["model"]))
        for side in ("stock", "pmfast"):
            x = r[side]
            lines.append(row.format(f"  {side}", f"{x['compile_s']:.2f}", _number(x["rss_mb"]), _number(x["eval_us"]), ""))
        ratios, parity = r["ratios"], r["parity"]
        delta = max(parity["logp"], parity["grad"]) if not any(map(math.isnan, parity.values())) else math.nan
        lines.append(row.format("  ratio", *(f"{ratios[k]:.2f}×" for k in ("compile", "rss", "eval")), _parity(delta)))
    lines += [rule, row.format("geomean", *(f"{means[k]:.2f}×" for k in ("compile", "rss", "eval")), "")]
    lines.append("ratio = pmfast/stock (below 1: pmfast is better)")
    lines.append("Δ = largest relative difference of logp and gradient at the first timing point")
    return lines


def write_bench_plot(results, means, path: Path) -> None:
    """Save a grouped bar chart of the compile/RSS/eval ratios per model (and their geomeans)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [spec_label(r["model"]) for r in results] + ["geomean"]
    keys = ("compile", "rss", "eval")
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(labels)), 4))
    for i, k in enumerate(keys):
        values = [r["ratios"][k] for r in results] + [means[k]]
        ax.bar(x + (i - 1) * 0.27, values, 0.27, label=k)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels, rotation=20, ha="right")
    ax.set_ylabel("pmfast / stock")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _op_name(op) -> str:
    scalar = getattr(op, "scalar_op", None)
    return f"{type(op).__name__}({type(scalar).__name__})" if scalar is not None else type(op).__name__


def node_counts(fn) -> dict[str, int]:
    """Apply nodes of a compiled pytensor function by op type (Elemwise with their scalar op)."""
    from collections import Counter

    return dict(Counter(_op_name(node.op) for node in fn.maker.fgraph.toposort()))


SAMPLER_COLUMNS = ("model", "side", "compile s", "per gradient µs (× stock)", "CPU per gradient µs (×)", "start-up s",
                   "first call +s", "first run s", "agreement")


def sampler_table(results, means) -> list[str]:
    """The sampler bench as markdown lines: one row per model and side, then the geometric means.

    First run = compile + the first call's extra + start-up + the gradients of a 1000 + 1000 run; agreement = largest |Δmean| of the
    long run's posterior against stock's, in Monte-Carlo standard errors ("(short)": the short runs', where the long runs' lengths differ)."""
    lines = ["| " + " | ".join(SAMPLER_COLUMNS) + " |", "|---|---|" + "---:|" * (len(SAMPLER_COLUMNS) - 2)]
    for r in results:
        label = spec_label(r["model"]).removesuffix(":build_model")
        for side, x in r["sides"].items():
            ratio = r["ratio"].get(side)
            grad = _number(x["per_grad_us"]) + (f" ({ratio:.2f}×)" if ratio is not None else "")
            cpu_ratio = r.get("cpu_ratio", {}).get(side)
            cpu = _number(x["per_grad_cpu_us"]) + (f" ({cpu_ratio:.2f}×)" if cpu_ratio is not None else "") if "per_grad_cpu_us" in x else ""
            agree = r["agreement"].get(side)
            cells = (label, side, f"{x['compile_s']:.1f}", grad, cpu, f"{x['startup_s']:.3f}",
                     f"{x['first_call_extra_s']:.2f}", f"{x['first_run_s']:.1f}", "" if agree is None else f"{agree:.1f}" + (" (short)" if r.get("agreement_run", {}).get(side) else ""))
            lines.append("| " + " | ".join(cells) + " |")
        for side, error in r["errors"].items():
            lines.append(f"| {label} | {side} | failed: {error} |" + " |" * (len(SAMPLER_COLUMNS) - 3))
    for side, mean in means.items():
        lines.append(f"| geometric mean | {side} | | **{mean:.2f}×** |" + " |" * (len(SAMPLER_COLUMNS) - 4))
    return lines


def write_sampler_plot(results, means, path: Path) -> None:
    """Save a bar chart of each side's per-gradient time over stock's, per model (and the geomeans)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sides = sorted({s for r in results for s in r["ratio"]})
    labels = [spec_label(r["model"]).removesuffix(":build_model") for r in results] + ["geomean"]
    x = np.arange(len(labels))
    width = 0.8 / max(len(sides), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels)), 4))
    for i, side in enumerate(sides):
        values = [r["ratio"].get(side, np.nan) for r in results] + [means.get(side, np.nan)]
        ax.bar(x + (i - (len(sides) - 1) / 2) * width, values, width, label=side)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, labels, rotation=25, ha="right")
    ax.set_ylabel("per gradient / stock")
    ax.set_title("time per gradient inside nutpie.sample")
    if sides:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_json(payload, path: Path) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (a temp file beside it, then ``os.replace``)."""
    import json

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
