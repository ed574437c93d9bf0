"""`slurm-rl trace`: synthetic workload families (slurm_rl/sim/workloads.py)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("trace")
def trace() -> None:
    """Synthetic traces from seeded workload families (docs/simulator.md)."""


@trace.command("families")
def families() -> None:
    """List the workload families, with their parameters."""
    from slurm_rl.sim.workloads import FAMILIES, HELD_OUT_FAMILIES

    for name, fam in FAMILIES.items():
        held = "  [held out of training]" if name in HELD_OUT_FAMILIES else ""
        click.echo(f"{name}{held}\n    {fam.describe()}")


@trace.command("generate")
@click.option("--family", required=True, help="A workload family (slurm-rl trace families).")
@click.option("--jobs", type=click.IntRange(min=1, max=10_000_000), default=3000,
              show_default=True, help="How many jobs.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The same family, jobs and seed give the same trace.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="CSV to write (the ITP layout: simulate it with --format itp).")
def generate(family: str, jobs: int, seed: int, out: Path) -> None:
    """Write JOBS jobs of a workload FAMILY to a CSV the simulator reads."""
    from slurm_rl.sim.workloads import FAMILIES, write_csv
    from slurm_rl.sim.workloads import generate as make

    if family not in FAMILIES:
        raise click.BadParameter(f"unknown family {family!r} (valid: {', '.join(FAMILIES)})",
                                 param_hint="--family")
    if not out.parent.is_dir():
        raise click.BadParameter(f"folder {str(out.parent)!r} does not exist",
                                 param_hint="--out")
    trace_jobs = make(family, jobs, seed)
    try:
        write_csv(trace_jobs, str(out))
    except OSError as exc:
        raise click.ClickException(f"--out {out}: {exc.strerror or exc}") from None
    span = trace_jobs[-1].submit / 86400.0
    gpu_h = sum(j.gpus * j.duration for j in trace_jobs) / 3600.0
    click.echo(f"{out}: {len(trace_jobs)} {family} jobs (seed {seed}) over {span:.1f} days, "
               f"{gpu_h:,.0f} GPU-hours; simulate with --trace {out} --format itp")
