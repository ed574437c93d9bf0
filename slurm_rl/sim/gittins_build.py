"""`slurm-rl gittins-table build`: the `gittins` policy's table rebuilt from trace files, on the
simulator's side of the layering (it loads traces as the simulator does); the table itself and
its index math are `slurm_rl/policies/gittins_table.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from slurm_rl.policies.gittins_table import (
    MIN_SURVIVORS,
    POINTS,
    QUANTUM_S,
    GittinsTable,
    build,
    dumps,
)
from slurm_rl.sim.run import load_jobs, resolve_trace_path
from slurm_rl.sim.trace import TraceError, TraceFormatError
from slurm_rl.splits import HELD_OUT, TRAINING, TRAINING_TRACES


def from_traces(traces: Sequence[str], fmt: str = "itp-deadline",
                points: int = POINTS) -> GittinsTable:
    """Build from trace files (or data:NAME), each job's (GPU count, duration)."""
    pairs: list[tuple[int, float]] = []
    for t in traces:
        pairs += [(j.gpus, j.duration) for j in load_jobs(resolve_trace_path(t), fmt)]
    cmd = "slurm-rl gittins-table build" + "".join(f" --traces {t}" for t in traces)
    if fmt != "itp-deadline":
        cmd += f" --format {fmt}"
    if points != POINTS:
        cmd += f" --points {points}"
    header = (
        "Gittins index of attained service per GPU-count bucket (policy `gittins`).",
        f"Built by: {cmd}",
        f"From {len(pairs)} jobs of: {', '.join(traces)}",
        f"index_per_s = max over D >= {QUANTUM_S:g} s of P(S-a <= D | S>a) / "
        "E[min(S-a, D) | S>a], S = trace duration (s) at the job's GPU count, a = attained_s;",
        f"rows with fewer than {MIN_SURVIVORS} survivors hold the bucket's lowest index.",
    )
    return build(pairs, header, points)


@click.group("gittins-table")
def gittins_table() -> None:
    """The Gittins-index table of the `gittins` policy."""


@click.command("build")
@click.option("--traces", "traces", multiple=True,
              help="Trace file or data:NAME (repeatable). Default: the training clusters "
                   f"{', '.join(TRAINING)} (never the held-out {', '.join(HELD_OUT)}).")
@click.option("--format", "fmt", default="itp-deadline", show_default=True,
              type=click.Choice(["itp", "itp-deadline", "philly", "swf"]))
@click.option("--points", type=click.IntRange(min=3), default=POINTS, show_default=True,
              help="Grid points per bucket.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("gittins-table.csv"), show_default=True,
              help="Output CSV (in the current folder by default; a maintainer rebuilding the "
                   "shipped table names it: --out slurm_rl/data/gittins/itp-training.csv).")
def build_command(traces: tuple[str, ...], fmt: str, points: int, out: Path) -> None:
    """Rebuild the table from traces (deterministic: same traces, same bytes)."""
    chosen = traces or TRAINING_TRACES
    held = [t for t in chosen if any(f"cluster{c}" in t for c in HELD_OUT)]
    if held:
        click.echo(f"warning: held-out trace(s) {', '.join(held)} used to build the table",
                   err=True)
    try:
        table = from_traces(chosen, fmt, points)
    except TraceFormatError as exc:
        raise click.BadParameter(str(exc), param_hint="'--format'") from None
    except (TraceError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    path = out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(table))
    for c in table.curves:
        click.echo(f"bucket {c.label:>5}: {c.samples:6d} jobs, index {c.index[0]:.3g}/s at 0 "
                   f"-> {c.index[-1]:.3g}/s at {c.attained[-1]:.0f} s")
    click.echo(f"wrote {path}")


gittins_table.add_command(build_command)
