"""``pmfast bench --sampler``: the models it runs, its status line, table, JSON and plot."""

from __future__ import annotations

from pathlib import Path

import typer

from pmfast.cli.app import _console, _positive, fail
from pmfast.cli.report import sampler_table, write_json, write_sampler_plot
from pmfast.loading import check_spec


def sampler_specs(model_specs, catalogue, core, names) -> list[str]:
    """The models of a --sampler run: MODELS as given, then the catalogue's (--core, --models)."""
    from pmfast import sampler_bench

    specs = [str(s.path.resolve()) + f":{s.function}" if s.path else s.text for s in map(check_spec, model_specs or [])]
    names = [n.strip() for n in (names or "").split(",") if n.strip()]
    if catalogue is None:
        if core or names:
            fail("--core and --models need --catalogue DIR")
    elif not catalogue.is_dir():
        fail(f"catalogue directory not found: {catalogue}")
    else:
        specs += sampler_bench.catalogue_models(catalogue, names, core)
    if not specs:
        fail("--sampler needs models: MODELS, --catalogue DIR --core, or --catalogue DIR --models NAMES")
    return specs


def bench_sampler(model_specs, passes, json_out, plot, catalogue, core, names, sides, chains, tune, draws, short, seed,
                  length=None, timeout=3600.0) -> None:
    """``pmfast bench --sampler``: :func:`pmfast.sampler_bench.compare` with a status line, a table, JSON and plot."""
    from pmfast import sampler_bench

    _positive(chains=chains, draws=draws, short=short)
    if tune < 0:
        fail(f"--tune must be non-negative, got {tune}")
    if 2 * short >= tune + draws:
        fail(f"--short ({short}) must be shorter than the long run (--tune {tune} + --draws {draws})")
    try:
        chosen = sampler_bench.check_sides(sides)
    except ValueError as exc:
        fail(f"--sides: {exc}")
    try:
        lengths = sampler_bench.parse_lengths(length)
    except ValueError as exc:
        fail(f"--length: {exc}")
    if not timeout > 0:
        fail(f"--timeout must be positive, got {timeout}")
    if passes != "all":
        fail("--passes does not apply to --sampler (pmfast compiles with all passes)")
    for path in (json_out, plot):
        if path is not None and not path.parent.is_dir():
            fail(f"directory does not exist: {path.parent}")
    specs = sampler_specs(model_specs, catalogue, core, names)
    console = _console()
    status = console.status("starting …")
    status.start()
    done = []

    def progress(spec, side):
        done.append(side)
        console.print(f"[{len(done)}/{len(specs) * len(chosen)}] {Path(spec.partition(':')[0]).stem}: {side}")
        status.update(f"{Path(spec.partition(':')[0]).stem}: {side} ({len(done)} of {len(specs) * len(chosen)}) …")

    def payload(results):
        return {"chains": chains, "long": [tune, draws], "short": [short, short], "seed": seed, "sides": chosen,
                "results": results, "geomean": sampler_bench.geomeans(results),
                "geomean_cpu": sampler_bench.geomeans(results, "cpu_ratio")}

    def partial(results):
        if json_out is not None:
            write_json({**payload(results), "partial": len(results) < len(specs)}, json_out)

    try:
        results = sampler_bench.compare(specs, chosen, chains, (tune, draws), (short, short), seed, progress=progress,
                                        lengths=lengths, timeout=timeout, on_row=partial)
    finally:
        status.stop()
    means = sampler_bench.geomeans(results)
    typer.echo(f"nutpie.sample, {chains} chains; long run {tune} + {draws}, short runs {short} + {short}; seed {seed}")
    typer.echo("\n".join(sampler_table(results, means)))
    if json_out is not None:
        write_json(payload(results), json_out)
        console.print(f"wrote {json_out}")
    if plot is not None:
        write_sampler_plot(results, means, plot)
        console.print(f"wrote {plot}")
