"""`slurm-rl replay --since 7d --policy NAME`: what if another policy had been deciding?

The jobs the daemon recorded (sim/recorded.py: those that ran and ended in the window) become a
trace, replayed in the simulator under NAME and, as a check on the simulator itself, under the
policy that actually ran; both are shown next to what happened on the cluster: average JCT,
deadlines met, GPU utilisation (the same definitions as `slurm-rl simulate`). The simulator plans
backfill conservatively with time limits, as slurmctld does (docs/sim-to-real.md), on a cluster
of the recorded node count with the most common GPU count per node; a job wider than that
cluster is left out of every column and counted in "left out" (`fit_to_cluster`).

What the replay can not know: jobs outside the database (none, if the daemon saw the whole
queue), a job's run time at another GPU count (it replays at the count it ran with), and
interference between jobs. The "simulated, as it ran" column shows how far the simulator is
from the cluster on this very trace; read the what-if column against that one.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_rl.sim.recorded import ActualJob, RecordedTrace, parse_span

if TYPE_CHECKING:  # (the simulator is imported when a replay runs, not for --help)
    from slurm_rl.sim.config import EngineConfig


@dataclass(frozen=True, kw_only=True)
class Outcome:
    label: str
    jobs: int
    avg_jct_s: float | None
    deadline_jobs: int
    deadlines_met: int
    gpu_utilization: float | None
    jct_s: tuple[float, ...]
    """Each job's JCT, sorted (for the plot)."""


def outcome(label: str, rows: Sequence[tuple[float, float, float, int, float | None]],
            capacity: int) -> Outcome:
    """rows: (submit, start, end, gpus, deadline) per job (pure)."""
    jct = sorted(end - submit for submit, _s, end, _g, _d in rows)
    with_deadline = [(end, d) for _su, _st, end, _g, d in rows if d is not None]
    util = None
    if rows and capacity > 0:
        span = max(r[2] for r in rows) - min(r[0] for r in rows)
        busy = sum(g * (end - start) for _su, start, end, g, _d in rows)
        util = busy / (capacity * span) if span > 0 else None
    return Outcome(label=label, jobs=len(rows), avg_jct_s=sum(jct) / len(jct) if jct else None,
                   deadline_jobs=len(with_deadline),
                   deadlines_met=sum(1 for end, d in with_deadline if end <= d),
                   gpu_utilization=util, jct_s=tuple(jct))


def actual_outcome(jobs: Sequence[ActualJob], capacity: int) -> Outcome:
    return outcome("what happened", [(j.submit, j.start, j.end, j.gpus, j.deadline)
                                     for j in jobs], capacity)


def _engine(trace: RecordedTrace) -> EngineConfig:
    """The replayed cluster: the recorded node count x the most common GPU count per node."""
    from slurm_rl.sim.config import EngineConfig

    return EngineConfig(nodes=trace.nodes, gpus_per_node=trace.gpus_per_node, conservative=True)


def fit_to_cluster(trace: RecordedTrace) -> RecordedTrace:
    """`trace` without the jobs the simulator would drop as wider than the replayed cluster
    (sim/jobs.py's `make_jobs`, the rule the engine applies), counted in `skipped`: every
    column then counts the same jobs, and the difference from what the database holds is in
    "left out". The replayed cluster can be smaller than the real one: nodes with more GPUs
    than the most common count are replayed with that count, and nodes the daemon has not
    recorded are missing."""
    from slurm_rl.sim.jobs import make_jobs

    engine = _engine(trace)
    held = {j.trace.id for j in make_jobs(trace.jobs, engine)[0]}
    if len(held) == len(trace.jobs):
        return trace
    skipped = dict(trace.skipped)
    why = f"wider than the replayed {trace.nodes} x {trace.gpus_per_node} GPUs"
    skipped[why] = skipped.get(why, 0) + len(trace.jobs) - len(held)
    return replace(trace, jobs=tuple(j for j in trace.jobs if j.id in held),
                   actual=tuple(a for a in trace.actual if a.job_id in held), skipped=skipped)


def simulated_outcome(label: str, trace: RecordedTrace, policy: str,
                      options: dict[str, Any]) -> Outcome:
    from slurm_rl.sim.run import Sizing, simulate

    engine = _engine(trace)
    result = simulate(trace.jobs, policy, Sizing(nodes=trace.nodes,
                                                 gpus_per_node=trace.gpus_per_node),
                      engine=engine, policy_options=options)
    from slurm_rl.sim.metrics import gpu_utilization

    rows = [(j.submit, j.start, j.end, j.gpus, j.deadline) for j in result.jobs]
    out = outcome(label, rows, trace.nodes * trace.gpus_per_node)
    # Utilisation from intervals, as `simulate` reports it (GPU counts may change mid-run).
    return replace(out, gpu_utilization=gpu_utilization(result) if result.jobs else None)


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    return f"{s:.0f} s" if s < 600 else f"{s / 3600:.2f} h" if s >= 7200 else f"{s / 60:.1f} min"


def _met(o: Outcome) -> str:
    if not o.deadline_jobs:
        return "- (no deadlines)"
    return f"{o.deadlines_met}/{o.deadline_jobs} ({100 * o.deadlines_met / o.deadline_jobs:.0f} %)"


def print_table(trace: RecordedTrace, outcomes: Sequence[Outcome], window: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"replay of {len(trace.jobs)} jobs since {window} on {trace.nodes} "
                        f"nodes x {trace.gpus_per_node} GPUs", title_justify="left")
    table.add_column("")
    for o in outcomes:
        table.add_column(o.label, justify="right")
    table.add_row("jobs", *[str(o.jobs) for o in outcomes])
    table.add_row("avg JCT", *[_fmt_s(o.avg_jct_s) for o in outcomes])
    table.add_row("deadlines met", *[_met(o) for o in outcomes])
    table.add_row("GPU utilisation", *["-" if o.gpu_utilization is None else
                                       f"{100 * o.gpu_utilization:.1f} %" for o in outcomes])
    Console(width=140).print(table)
    if trace.skipped:
        click.echo("left out: " + ", ".join(f"{n} {why}" for why, n in
                                            sorted(trace.skipped.items())))


def plot(outcomes: Sequence[Outcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(11, 4))
    for o in outcomes:
        if o.jct_s:
            ys = [(i + 1) / len(o.jct_s) for i in range(len(o.jct_s))]
            cdf.step(o.jct_s, ys, where="post", label=f"{o.label} (avg {_fmt_s(o.avg_jct_s)})")
    cdf.set_xlabel("job completion time (s)")
    cdf.set_ylabel("share of jobs")
    cdf.set_title("JCT distribution")
    cdf.legend(fontsize=8)
    names = ["deadlines met", "GPU utilisation"]
    width = 0.8 / max(1, len(outcomes))
    for i, o in enumerate(outcomes):
        met = o.deadlines_met / o.deadline_jobs if o.deadline_jobs else math.nan
        util = o.gpu_utilization if o.gpu_utilization is not None else math.nan
        bars.bar([k + i * width for k in range(len(names))], [met, util], width, label=o.label)
    bars.set_xticks([k + width * (len(outcomes) - 1) / 2 for k in range(len(names))], names)
    bars.set_ylim(0, 1)
    bars.set_title("share")
    bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@click.command("replay")
@click.option("--since", "since_text", default="7d", show_default=True,
              help="How far back: jobs submitted in the last 7d, 12h, 30m, 90s, 2w.")
@click.option("--policy", required=True, help="The policy to replay (slurm-rl policies).")
@click.option("--policy-option", "policy_option", multiple=True, metavar="KEY=VALUE",
              help="An option for the policy (repeatable).")
@click.option("--managed-only", is_flag=True,
              help="Only jobs in the daemon's scope (default: every job it recorded).")
@click.option("--only-name-prefix", metavar="PREFIX", help="Only jobs whose name starts so.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a PNG: JCT distribution and shares, side by side.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the table.")
@click.option("--config", "config_file",
              type=click.Path(dir_okay=False, readable=False, path_type=Path))
@click.option("--db", "db_path", envvar="SLURM_RL_DB",
              help="The daemon's database (default: $SLURM_RL_DB, else [database] path).",
              type=click.Path(dir_okay=False, readable=False, path_type=Path))
def replay(since_text: str, policy: str, policy_option: tuple[str, ...], managed_only: bool,
           only_name_prefix: str | None, plot_path: Path | None, as_json: bool,
           config_file: Path | None, db_path: Path | None) -> None:
    """Replay the jobs the daemon recorded under another policy, next to what happened."""
    from slurm_rl import policies
    from slurm_rl.cli_common import parse_policy_options
    from slurm_rl.db.readonly import ReadOnlyError, database_path, read_only_session
    from slurm_rl.sim.recorded import read_recorded

    try:
        span = parse_span(since_text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--since'") from None
    if policy not in policies.names():
        raise click.BadParameter(f"unknown policy {policy!r} (valid: "
                                 f"{', '.join(policies.names())})", param_hint="'--policy'")
    try:
        options = parse_policy_options(policy_option)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--policy-option'") from None
    try:
        path = database_path(config_file, db_path)
        with read_only_session(path) as session:
            trace = read_recorded(session, since=time.time() - span, managed_only=managed_only,
                                  name_prefix=only_name_prefix)
    except ReadOnlyError as exc:
        raise click.ClickException(str(exc)) from None
    if not trace.jobs:
        left = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items())) or "none"
        raise click.ClickException(f"no finished jobs recorded in the last {since_text} in "
                                   f"{path} (left out: {left})")
    if trace.nodes < 1:
        raise click.ClickException(f"{path}: no GPU nodes recorded; can not size the cluster")
    trace = fit_to_cluster(trace)
    if not trace.jobs:
        left = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items()))
        raise click.ClickException(f"no recorded job in the last {since_text} fits the "
                                   f"replayed cluster (left out: {left})")
    capacity = trace.nodes * trace.gpus_per_node
    outcomes = [actual_outcome(trace.actual, capacity)]
    ran = trace.policy_that_ran
    try:
        if ran is not None and ran in policies.names() and ran != policy:
            outcomes.append(simulated_outcome(f"simulated: {ran} (as it ran)", trace, ran, {}))
        outcomes.append(simulated_outcome(f"simulated: {policy}", trace, policy, options))
    except (TypeError, ValueError) as exc:
        raise click.ClickException(f"policy {policy!r}: {exc}") from None
    if plot_path is not None:
        plot(outcomes, plot_path)
    if as_json:
        click.echo(json.dumps({
            "since": since_text, "origin": trace.origin, "nodes": trace.nodes,
            "gpus_per_node": trace.gpus_per_node, "policy_that_ran": ran,
            "skipped": dict(trace.skipped),
            "outcomes": [{k: v for k, v in o.__dict__.items() if k != "jct_s"}
                         for o in outcomes]}, indent=1))
    else:
        print_table(trace, outcomes, since_text)
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
