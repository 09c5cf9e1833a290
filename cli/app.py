"""The ``pmfast`` command line: sample, bench, inspect and list models.

Heavy modules (pymc, nutpie, arviz, pmfast.frontend) are imported inside the
commands so that ``pmfast --help`` answers immediately.
"""

from __future__ import annotations

import contextlib
import functools
from inspect import cleandoc
import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from pmfast.cli.report import (
    bench_lines, complete_draws, node_counts, print_summary, write_bench_plot, write_json, write_netcdf, write_trace_plot,
)
from pmfast.loading import check_spec, load_model, one_line

app = typer.Typer(
    help="pmfast: compile PyMC models into fast numba kernels for nutpie, sample them, and measure the gain.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

MODEL_HELP = "A zoo model (`pmfast models`; size kwargs as name:key=val,key=val) or path/to/file.py[:function]."
PASSES_HELP = "Passes to run: all, none, or a comma list of pass names."


def fail(message, code: int = 1):
    """Print ``error: message`` on one line to stderr and exit with ``code``."""
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


def user_errors(command):
    """Turn exceptions in ``command`` into one ``error:`` line (set PMFAST_TRACEBACK=1 to see tracebacks)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:
            if os.environ.get("PMFAST_TRACEBACK"):
                raise
            ours = type(exc).__module__.split(".")[0] in ("pmfast", "cli")
            fail(str(exc) if ours else f"{type(exc).__name__}: {exc}")

    return wrapper


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _check_passes(passes: str) -> None:
    from pmfast import passes as registry

    registry.select(passes)


def _load_checked(spec: str):
    from pmfast.frontend import check_model

    model, initial_point = load_model(spec)
    check_model(model)
    return model, initial_point


class StageProgress:
    """A ``progress(stage, seconds)`` callback for pmfast.compile: a spinner per stage, then its time."""

    def __init__(self, console):
        self.console, self.status = console, None

    def __call__(self, stage: str, seconds: float | None) -> None:
        self.close()
        if seconds is None:
            self.status = self.console.status(f"compile: {stage} …")
            self.status.start()
        else:
            self.console.print(f"  [green]✓[/] {stage:<26} {seconds:7.2f} s")

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _positive(**values) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            fail(f"--{name} must be positive, got {value}")


@app.command()
@user_errors
def sample(
    model: Annotated[Optional[str], typer.Argument(help=MODEL_HELP + " Default: the zoo's default model.")] = None,
    draws: Annotated[int, typer.Option(help="Posterior draws per chain.")] = 1000,
    tune: Annotated[int, typer.Option(help="Tuning (warmup) draws per chain.")] = 1000,
    chains: Annotated[int, typer.Option(help="Number of chains.")] = 4,
    cores: Annotated[Optional[int], typer.Option(help="Chains sampled in parallel (default: nutpie's choice).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed.")] = None,
    target_accept: Annotated[Optional[float], typer.Option(help="NUTS target acceptance rate, in (0, 1).")] = None,
    passes: Annotated[str, typer.Option(help=PASSES_HELP)] = "all",
    out: Annotated[Optional[Path], typer.Option(help="Write the trace to this netCDF file (atomically).")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write an arviz trace plot PNG here.")] = None,
    progress: Annotated[bool, typer.Option(help="Show compile stages and nutpie's progress bar.")] = True,
):
    """Compile MODEL with pmfast and sample it with nutpie; print a summary, optionally save trace and plot.

    Ctrl-C during sampling stops early and keeps the draws so far (written to --out if given).
    """
    from pmfast import models

    _positive(draws=draws, chains=chains, cores=cores)
    if tune < 0:
        fail(f"--tune must be non-negative, got {tune}")
    if target_accept is not None and not 0 < target_accept < 1:
        fail(f"--target-accept must be in (0, 1), got {target_accept}")
    for path in (out, plot):
        if path is not None and not path.parent.is_dir():
            fail(f"directory does not exist: {path.parent}")
    _check_passes(passes)
    spec = model or models.DEFAULT
    console = _console()
    with console.status(f"loading {spec} …"):
        m, initial_point = _load_checked(spec)
    kwargs = {"cores": cores, "target_accept": target_accept, "initial_points": initial_point}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    console.print(f"[bold]{spec}[/]: {len(m.free_RVs)} free variables, passes={passes}")
    import pmfast

    stages = StageProgress(console)
    try:
        idata = pmfast.sample(
            m, draws=draws, tune=tune, chains=chains, seed=seed, passes=passes,
            progress=stages if progress else False, **kwargs,
        )
    finally:
        stages.close()
    interrupted = bool(idata.attrs.get("pmfast_interrupted"))
    n_draws = complete_draws(idata)
    if n_draws:
        shown = idata.isel(draw=slice(0, n_draws)) if interrupted else idata
        try:
            print_summary(shown)
        except Exception as exc:
            console.print(f"summary unavailable: {type(exc).__name__}: {one_line(exc)}")
        if "sample_stats" in shown.groups() and "diverging" in shown.sample_stats:
            console.print(f"divergences: {int(shown.sample_stats['diverging'].sum())}")
    console.print(
        f"compile {idata.attrs.get('pmfast_compile_seconds', float('nan')):.2f} s, "
        f"sampling {idata.attrs.get('pmfast_sample_seconds', float('nan')):.2f} s"
    )
    if out is not None:
        write_netcdf(idata, out)
        console.print(f"wrote {out}" + (f" ({n_draws} draws per chain so far)" if interrupted else ""))
    if plot is not None and n_draws:
        names = write_trace_plot(shown, plot)
        console.print(f"wrote {plot} ({', '.join(names)})")
    if interrupted:
        console.print(f"[yellow]interrupted[/] during sampling after {n_draws} posterior draws per chain")
        raise typer.Exit(130)


@app.command()
@user_errors
def bench(
    model_specs: Annotated[Optional[list[str]], typer.Argument(metavar="MODELS", help=MODEL_HELP + " Default: a few small zoo models.")] = None,
    passes: Annotated[str, typer.Option(help=PASSES_HELP)] = "all",
    repeats: Annotated[int, typer.Option(help="Timing repeats per side (median reported; at least 5).")] = 7,
    cold: Annotated[bool, typer.Option("--cold", help="Compile with a fresh, empty numba cache.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write all numbers to this JSON file.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write a bar chart PNG of the pmfast/stock ratios.")] = None,
    point: Annotated[str, typer.Option(help="Where kernels are timed: typical (initial point + seeded N(0, 0.3) noise), draw (draws of a short stock nutpie run), or initial.")] = "typical",
    sampler: Annotated[bool, typer.Option("--sampler", help="Time nutpie.sample instead of the kernels (see below).")] = False,
    catalogue: Annotated[Optional[Path], typer.Option(help="--sampler: a checkout of the PyMC model catalogue (ricardoV94/pymc-model-catalogue).")] = None,
    core: Annotated[bool, typer.Option("--core", help="--sampler: the catalogue's core models (BENCHMARK_CORE.md).")] = False,
    models_: Annotated[Optional[str], typer.Option("--models", help="--sampler: catalogue models, a comma list of names (BEST,ar2).")] = None,
    sides: Annotated[str, typer.Option(help="--sampler: comma list of stock, pmfast, jax.")] = "stock,pmfast",
    chains: Annotated[int, typer.Option(help="--sampler: chains (on as many cores).")] = 2,
    tune: Annotated[int, typer.Option(help="--sampler: tuning draws per chain of the long run.")] = 1000,
    draws: Annotated[int, typer.Option(help="--sampler: draws per chain of the long run.")] = 1000,
    short: Annotated[int, typer.Option(help="--sampler: tuning and draws per chain of the short runs.")] = 200,
    seed: Annotated[int, typer.Option(help="--sampler: random seed, the same for every side.")] = 1,
    length: Annotated[Optional[list[str]], typer.Option("--length", help="--sampler: a model's own run lengths, NAME=TUNE,DRAWS[,SHORT] (repeatable; NAME is the file's stem).")] = None,
    timeout: Annotated[float, typer.Option(help="--sampler: seconds after which a side's worker is stopped (its row says so).")] = 3600.0,
):
    """Compare pmfast against stock nutpie/pytensor per model: compile time, peak RSS, eval time, parity.

    Compile time and peak RSS: each side in its own subprocess, timing what that side's user waits
    for: stock is nutpie.compile_pymc_model(model, backend="numba"), pmfast is pmfast.compile(model)
    (wall seconds; the JSON also has process CPU seconds, forked children included). Eval: a third
    subprocess times both logp+grad kernels alternately (CPU time of the timing thread, median of
    the repeats), so load from other jobs hits both sides alike. Ratios are pmfast/stock (below 1 is better).

    Without --cold, compile times include what earlier runs left in the caches (the stock side runs first and can warm kernels the pmfast side shares): use --cold (an empty pytensor compiledir and numba cache per side) to compare compile times.

    With --sampler: per model, each side (stock nutpie numba, pmfast, nutpie's JAX backend) in a fresh process with empty caches compiles, then runs nutpie.sample short, then long and short again (three times when cheap), with one seed. Per gradient is the median difference of a long and a short run's walls over the difference of their leapfrog steps (warm-up included), times the chains; a long run predicted under 3 s is lengthened (up to 30×), one over 120 s shortened. Start-up is the rest of the short run; the first call's extra is the first short run less the later ones. First run = compile + first call's extra + start-up + the gradients of 1000 + 1000 draws per chain (at the long run's steps per draw). Agreement: the largest |Δmean| of the long run's posterior against stock's, in Monte-Carlo standard errors (the short runs', marked, where a side's long run was shortened and the lengths differ). Prints a markdown table; --json and --plot write the numbers and a chart of per-gradient ratios.
    """
    from pmfast import bench as measure

    if sampler:
        from pmfast.cli.sampler import bench_sampler

        return bench_sampler(model_specs, passes, json_out, plot, catalogue, core, models_, sides, chains, tune, draws, short, seed,
                             length, timeout)
    if catalogue is not None or core or models_ is not None or length:
        fail("--catalogue, --core, --models and --length need --sampler")

    if repeats < measure.MIN_REPEATS:
        fail(f"--repeats must be at least {measure.MIN_REPEATS}, got {repeats}")
    _check_passes(passes)
    if point not in measure.POINTS:
        fail(f"--point must be one of {', '.join(measure.POINTS)}, got {point!r}")
    specs = list(model_specs or measure.DEFAULT_MODELS)
    specs = [str(s.path.resolve()) + f":{s.function}" if s.path else s.text for s in map(check_spec, specs)]
    console = _console()
    status = console.status("starting …")
    status.start()
    try:
        results = measure.compare(
            specs, passes, repeats, cold, progress=lambda m, side: status.update(f"{Path(m).name}: {side} …"), point=point
        )
    finally:
        status.stop()
    means = measure.geomeans(results)
    print_bench(results, means, passes, cold)
    if json_out is not None:
        payload = {"passes": passes, "repeats": repeats, "cold": cold, "point": point, "results": results, "geomean": means}
        write_json(payload, json_out)
        console.print(f"wrote {json_out}")
    if plot is not None:
        write_bench_plot(results, means, plot)
        console.print(f"wrote {plot}")


def print_bench(results, means, passes, cold) -> None:
    """Print :func:`bench_lines` on stdout."""
    typer.echo("\n".join(bench_lines(results, means, passes, cold)))


@app.command()
@user_errors
def inspect(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    passes: Annotated[str, typer.Option(help=PASSES_HELP)] = "all",
    dprint: Annotated[bool, typer.Option("--dprint", help="Print the optimized logp+grad graph.")] = False,
):
    """Show which passes fired on MODEL, node counts before/after them, and compile time by stage."""
    from rich.console import Console
    from rich.table import Table

    import pmfast

    _check_passes(passes)
    console = _console()
    with console.status(f"loading {model} …"):
        m, initial_point = _load_checked(model)
    t0 = time.perf_counter()
    with console.status("stock graph (passes=none) …"):
        stock_fn, _ = pmfast.logp_dlogp_function(m, "none")
    stock_s = time.perf_counter() - t0
    stages = StageProgress(console)
    try:
        compiled = pmfast.compile(m, passes=passes, progress=stages, initial_points=initial_point)
    finally:
        stages.close()
    fn = compiled.logp_func
    out = Console()
    fired = pmfast.fired(compiled)
    table = Table(title=f"passes fired ({passes})", title_justify="left")
    table.add_column("pass")
    table.add_column("count", justify="right")
    for p in pmfast.passes.select(passes):
        table.add_row(p.name, str(fired.get(p.name, 0)))
    if not compiled.passes:
        table.add_row("(no passes selected)", "")
    out.print(table)
    before, after = node_counts(stock_fn), node_counts(fn)
    table = Table(title="logp+grad nodes by op", title_justify="left")
    for column in ("op", "stock", passes, "Δ"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for op in sorted(set(before) | set(after), key=lambda o: (-after.get(o, 0), -before.get(o, 0), o)):
        b, a = before.get(op, 0), after.get(op, 0)
        table.add_row(op, str(b), str(a), f"{a - b:+d}" if a != b else "")
    table.add_section()
    b, a = sum(before.values()), sum(after.values())
    table.add_row("total", str(b), str(a), f"{a - b:+d}")
    out.print(table)
    table = Table(title="compile time by stage", title_justify="left")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_row("stock logp+grad graph (no numba)", f"{stock_s:.2f}")
    table.add_section()
    for stage, seconds in compiled.timings.items():
        table.add_row(stage, f"{seconds:.2f}")
    table.add_row("total", f"{sum(compiled.timings.values()):.2f}")
    out.print(table)
    if dprint:
        import pytensor

        pytensor.dprint(fn)


def _cluster_client(scheduler: str | None, workers: int | None):
    """A Dask client for ``--scheduler`` (``local``: a LocalCluster of ``--workers`` processes), or None."""
    if scheduler is None:
        if workers is not None:
            fail("--workers needs --scheduler local")
        return contextlib.nullcontext()
    from pmfast.many.dask_runner import require_distributed

    distributed = require_distributed()
    if scheduler == "local":
        import logging

        cluster = distributed.LocalCluster(
            n_workers=workers or 2, threads_per_worker=1, processes=True,
            dashboard_address=None, silence_logs=logging.ERROR,
        )
        return _closing_client(distributed.Client(cluster), cluster)
    if workers is not None:
        fail("--workers applies to --scheduler local only (a running scheduler has its own workers)")
    return _closing_client(distributed.Client(scheduler, timeout="10s"))


@contextlib.contextmanager
def _closing_client(client, cluster=None):
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def load_dataset(path: Path) -> dict:
    """The arrays of an ``.npz`` file, by name."""
    import zipfile

    import numpy as np

    if not zipfile.is_zipfile(path):
        raise ValueError("not an .npz file (write one with numpy.savez)")
    with np.load(path, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


@app.command("fit-many")
@user_errors
def fit_many_command(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    data: Annotated[list[Path], typer.Argument(metavar="DATA...", help=".npz files whose arrays are named after the model's pm.Data.")],
    out: Annotated[Path, typer.Option(help="Directory for the fits: DIR/<data file stem>.nc (created if missing).")],
    scheduler: Annotated[Optional[str], typer.Option(help="Spread the fits over Dask: a scheduler ADDRESS, or 'local' for a LocalCluster.")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Worker processes of --scheduler local (default 2).")] = None,
    draws: Annotated[int, typer.Option(help="Posterior draws per chain.")] = 1000,
    tune: Annotated[int, typer.Option(help="Tuning (warmup) draws per chain.")] = 1000,
    chains: Annotated[int, typer.Option(help="Number of chains per fit.")] = 4,
    seed: Annotated[Optional[int], typer.Option(help="Random seed (each data file gets its own seed from it and its position).")] = None,
    passes: Annotated[str, typer.Option(help=PASSES_HELP)] = "all",
    progress: Annotated[bool, typer.Option(help="Show compile stages and a progress bar over the fits.")] = True,
):
    """Fit MODEL once per DATA file from one compile; each fit is written atomically to --out.

    A rerun skips the fits already written (resume). Failed datasets are listed at the end and make
    the exit code 1; the other fits are written all the same. Ctrl-C keeps the fits written so far.
    """
    from pmfast.many import FitError, fit_many, seeds

    _positive(draws=draws, chains=chains, workers=workers)
    if tune < 0:
        fail(f"--tune must be non-negative, got {tune}")
    missing = [str(p) for p in data if not p.is_file()]
    if missing:
        fail(f"data file{'s' if len(missing) > 1 else ''} not found: {', '.join(missing)}")
    stems = [p.stem for p in data]
    repeated = sorted({s for s in stems if stems.count(s) > 1})
    if repeated:
        fail(f"data files must have distinct names (each fit is written to DIR/<stem>.nc); repeated: {', '.join(repeated)}")
    if out.exists() and not out.is_dir():
        fail(f"--out is not a directory: {out}")
    _check_passes(passes)
    console = _console()
    with console.status(f"loading {model} …"):
        m, initial_point = _load_checked(model)
    out.mkdir(parents=True, exist_ok=True)
    all_seeds = seeds(seed, len(data))
    todo = [i for i, p in enumerate(data) if not (out / f"{p.stem}.nc").is_file()]
    skipped = len(data) - len(todo)
    if skipped:
        console.print(f"{skipped} of {len(data)} fits already in {out}: skipped")
    failures: dict[int, str] = {}
    datasets, order = [], []
    for i in todo:
        try:
            datasets.append(load_dataset(data[i]))
            order.append(i)
        except Exception as exc:
            failures[i] = f"cannot read it: {one_line(exc)}"
    written = []

    def write(k, result):
        i = order[k]
        if isinstance(result, FitError):
            failures[i] = result.reason
            return
        result.attrs["pmfast_dataset"] = i
        result.attrs["pmfast_data_file"] = data[i].name
        write_netcdf(result, out / f"{data[i].stem}.nc")
        written.append(i)

    kwargs = {"initial_points": initial_point} if initial_point is not None else {}
    with _cluster_client(scheduler, workers) as client:
        if client is not None:
            console.print(f"Dask: {len(client.nthreads())} workers at {client.scheduler_info()['address']}")
        results = fit_many(
            m, datasets, client=client, draws=draws, tune=tune, chains=chains, seed=[all_seeds[i] for i in order],
            passes=passes, progress=progress, on_result=write, **kwargs,
        )
        interrupted = any(isinstance(r, FitError) and r.reason == "not fitted: interrupted" for r in results)
    console.print(f"wrote {len(written)} fit{'s' if len(written) != 1 else ''} to {out}" + (f" ({skipped} already there)" if skipped else ""))
    if failures:
        console.print(f"[red]{len(failures)} failed[/]:")
        for i in sorted(failures):
            console.print(f"  {data[i].name}: {failures[i]}", soft_wrap=True)
    if interrupted:
        console.print("[yellow]interrupted[/]: rerun the same command to fit the rest")
        raise typer.Exit(130)
    if failures:
        raise typer.Exit(1)


@app.command("models")
def list_models():
    """List the model zoo, one line each (* marks the default)."""
    from pmfast import models

    width = max(map(len, models.ZOO))
    for name, line in models.describe():
        typer.echo(f"{'*' if name == models.DEFAULT else ' '} {name:<{width}}  {line}")


def reflow(doc: str | None) -> str | None:
    """``doc`` with each paragraph on one line, so rich wraps it to the terminal as prose.

    typer keeps a docstring's single line breaks, and rich then wraps each source line on its own:
    sentences broken mid-way. Lines that start a list item (``-``, ``*``) or are indented (code)
    keep their own line.
    """
    if doc is None:
        return None
    paragraphs = []
    for paragraph in cleandoc(doc).split("\n\n"):
        lines = []
        for line in paragraph.splitlines():
            if lines and not line.startswith((" ", "-", "*", "\b")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


for _command in app.registered_commands:
    _command.callback.__doc__ = reflow(_command.callback.__doc__)


def main():
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
