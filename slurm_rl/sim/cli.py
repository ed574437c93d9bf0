"""`slurm-rl simulate`: run one policy over one trace on a simulated Slurm GPU cluster."""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from slurm_rl import policies
from slurm_rl.checkpoint_errors import one_line
from slurm_rl.policies.rl import RLPolicyError
from slurm_rl.sim import metrics, run
from slurm_rl.sim.cluster import BEST_FIT, PLACEMENTS
from slurm_rl.sim.config import WEEK_S, EngineConfig, TimeLimitEstimate, TimeLimitModel
from slurm_rl.sim.restart_model import RestartModel, read_restart_model
from slurm_rl.sim.results import SimulationError
from slurm_rl.sim.run import DATA_PREFIX, Sizing, load_jobs, resolve_trace_path
from slurm_rl.sim.trace import TraceError, TraceFormat, TraceFormatError, parse_window
from slurm_rl.sim.tsafrir import DEFAULT_BINS, HEAD_SHARE


def _check_window(_ctx: click.Context, param: click.Parameter, value: str | None
                  ) -> str | None:
    # A malformed window is a usage error (exit 2), like every other bad option.
    if value is not None:
        try:
            parse_window(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param=param) from None
    return value


def _check_trace(_ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value.startswith(DATA_PREFIX):
        try:
            resolve_trace_path(value)
        except FileNotFoundError as exc:
            raise click.BadParameter(str(exc), param=param) from None
        return value
    if Path(value).exists():
        return value
    hint = ""
    if (resources.files("slurm_rl") / "data" / "traces" / Path(value).name).is_file():
        hint = f" (the shipped trace is --trace {DATA_PREFIX}{Path(value).name})"
    raise click.BadParameter(f"no such file: {value}{hint}", param=param)


_TIME_LIMIT_PARAMS = {"factor": "time_limit_factor", "round_up_s": "time_limit_round",
                      "fixed_s": "time_limit_fixed", "max_s": "time_limit_max",
                      "bins": "time_limit_bins", "max_share": "time_limit_max_share"}
"""TimeLimitEstimate's settings and the parameters of the flags that set them."""


def _flag(key: str) -> str:
    return "--" + _TIME_LIMIT_PARAMS[key].replace("_", "-")


def _time_limit(ctx: click.Context, model: TimeLimitModel, **settings: Any
                ) -> TimeLimitEstimate:
    """The time-limit model of the command line: a flag another model reads is a usage error
    naming it (it would do nothing), as is --time-limit-model fixed without a limit."""
    given = {key for key, param in _TIME_LIMIT_PARAMS.items()
             if ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE}
    if "fixed_s" in given and (ctx.get_parameter_source("time_limit_model")
                               is not ParameterSource.COMMANDLINE):
        model = TimeLimitModel.FIXED  # --time-limit-fixed alone, as before the models
    reads = [key for key in TimeLimitEstimate.KEYS[model] if key in _TIME_LIMIT_PARAMS]
    for key in sorted(given - set(reads)):
        raise click.BadParameter(f"not read by --time-limit-model {model.value} (it reads "
                                 f"{', '.join(_flag(k) for k in reads)})",
                                 param_hint=f"'{_flag(key)}'")
    if model is TimeLimitModel.FIXED and settings["fixed_s"] is None:
        raise click.BadParameter("--time-limit-model fixed needs the limit (seconds)",
                                 param_hint="'--time-limit-fixed'")
    return TimeLimitEstimate(model=model, **settings)


def option_value(text: str) -> Any:
    """A --policy-option VALUE: read as JSON if it parses (0.5, true, [1, 2]), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@click.command("simulate")
@click.option("--trace", "trace_path", required=True, callback=_check_trace,
              help="Trace file, or data:NAME for a shipped trace "
                   "(data:itp-deadline-cluster10.csv).")
@click.option("--format", "fmt", required=True, type=click.Choice([f.value for f in TraceFormat]))
@click.option("--policy", required=True, help="Policy name (see `slurm-rl policies`).")
@click.option("--policy-option", "policy_options", multiple=True, metavar="KEY=VALUE",
              help="Policy option; VALUE is read as JSON if it parses (repeatable).")
@click.option("--nodes", type=click.IntRange(min=1), help="Cluster nodes (or use --load).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--load", type=click.FloatRange(min=0, min_open=True),
              help="Size the cluster: fewest nodes with mean demand / capacity <= LOAD.")
@click.option("--window", callback=_check_window,
              help="START:COUNT: jobs START..START+COUNT-1 in submit order.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tick", "tick_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Call the policy at least this often (s) while jobs wait; 0: events only.")
@click.option("--ticks-only", is_flag=True,
              help="Call the policy only on ticks, like the daemon's poll cycle.")
@click.option("--restart-delay", "restart_delay_s", type=click.FloatRange(min=0), default=30.0,
              show_default=True, help="The restore step: seconds a restarted job holds its "
              "GPUs without progress once it runs again (alone: the whole restart).")
@click.option("--restart-grace", "restart_grace_s", type=click.FloatRange(min=0),
              help="The grace step: seconds from the checkpoint signal to the requeue, GPUs "
              "held, no progress [default: 60, the daemon's grace_s].")
@click.option("--requeue-time", "requeue_s", type=click.FloatRange(min=0),
              help="The requeue step: seconds from the requeue (GPUs free) until the job may "
              "start again [default: 0.9, as measured].")
@click.option("--restart-model", "restart_model", type=click.Path(dir_okay=False),
              help="TOML file of a restart's steps ([restart] grace_s, requeue_s, restore_s), "
              "as benchmarks/calibrate_restart.py writes it; the three options above "
              "override it.")
@click.option("--restart-rules", "max_restarts", type=click.IntRange(0, 60),
              help="Restarts as the daemon makes them live (the default): jobs that opted in "
              "only, a grow only if it saves more than the restart costs, at most N restarts "
              "per job per hour (the daemon's [resize] max_per_hour) [default: 2].")
@click.option("--free-restarts", is_flag=True,
              help="Apply every preemption and resize that fits, to any job, as often as the "
              "policy asks (not what the daemon does live).")
@click.option("--opt-in-fraction", type=click.FloatRange(0, 1), default=0.0,
              show_default=True, help="Share of jobs that opted in to restarts at their own "
              "GPU count (--rl-elastic): with the daemon's rules only they, elastic jobs and "
              "a trace's elastic jobs are restarted.")
@click.option("--time-limit-model", type=click.Choice([m.value for m in TimeLimitModel]),
              default=TimeLimitModel.FACTOR.value, show_default=True,
              help="Time limits of jobs without one: factor x run time (rounded up), one "
              "fixed limit, or the round values users ask for (Tsafrir, Etsion & Feitelson, "
              "JSSPP 2005).")
@click.option("--time-limit-factor", type=click.FloatRange(min=0, min_open=True), default=2.0,
              show_default=True, help="factor: time limit = duration x this, ...")
@click.option("--time-limit-round", type=click.FloatRange(min=0), default=3600.0,
              show_default=True, help="... rounded up to a multiple of this (s).")
@click.option("--time-limit-fixed", type=click.FloatRange(min=0, min_open=True),
              help="fixed: one time limit (s) for every job without one (alone, it chooses "
              "the fixed model).")
@click.option("--time-limit-max", type=click.IntRange(min=3600), default=int(WEEK_S),
              show_default=True, help="tsafrir: the partition's maximum limit (s).")
@click.option("--time-limit-bins", type=click.IntRange(min=1), default=DEFAULT_BINS,
              show_default=True, help="tsafrir: distinct values users ask for.")
@click.option("--time-limit-max-share", type=click.FloatRange(0, HEAD_SHARE, min_open=True,
                                                              max_open=True),
              help="tsafrir: share of jobs asking for the maximum [default: the model's, "
              "0.217].")
@click.option("--no-backfill", is_flag=True, help="Strict priority order, no EASY backfill.")
@click.option("--bf-max-job-test", type=click.IntRange(min=0), default=500, show_default=True)
@click.option("--conservative", is_flag=True,
              help="Reserve for every job backfill examines (whole nodes), as slurmctld does, "
              "instead of EASY's one reservation.")
@click.option("--placement", type=click.Choice(PLACEMENTS), default=BEST_FIT,
              show_default=True, help="Node choice: fewest free GPUs, or Slurm's cons_tres.")
@click.option("--elastic-fraction", type=click.FloatRange(0, 1), default=0.0,
              show_default=True, help="Share of jobs made elastic (GPU range 1..64).")
@click.option("--audit", is_flag=True, help="Check the whole state after every event (slow).")
@click.option("--jobs-out", type=click.Path(dir_okay=False, writable=True),
              help="CSV: job_id,submit,start,end,gpus,restarts,deadline.")
@click.option("--intervals-out", type=click.Path(dir_okay=False, writable=True),
              help="CSV: job_id,start,end,gpus,nodes, one row per run at a fixed GPU count.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object of metrics.")
def simulate(trace_path: str, fmt: str, policy: str, policy_options: tuple[str, ...],
             nodes: int | None, gpus_per_node: int, load: float | None, window: str | None,
             seed: int, tick_s: float, ticks_only: bool, restart_delay_s: float,
             restart_grace_s: float | None, requeue_s: float | None, restart_model: str | None,
             max_restarts: int | None, free_restarts: bool, opt_in_fraction: float,
             time_limit_model: str, time_limit_factor: float,
             time_limit_round: float, time_limit_fixed: float | None, time_limit_max: int,
             time_limit_bins: int, time_limit_max_share: float | None,
             no_backfill: bool, bf_max_job_test: int,
             conservative: bool, placement: str, elastic_fraction: float, audit: bool,
             jobs_out: str | None, intervals_out: str | None, as_json: bool) -> None:
    """Replay a trace through POLICY on a simulated Slurm GPU cluster (priority order + EASY
    backfill planned from time limits, as slurmctld schedules)."""
    if (nodes is None) == (load is None):
        raise click.UsageError("give either --nodes N (with --gpus-per-node) or --load X")
    if free_restarts and max_restarts is not None:
        raise click.UsageError("--free-restarts and --restart-rules exclude each other")
    if policy not in policies.names():
        raise click.UsageError(f"unknown policy {policy!r} (valid: {', '.join(policies.names())})")
    time_limit = _time_limit(click.get_current_context(), TimeLimitModel(time_limit_model),
                             factor=time_limit_factor, round_up_s=time_limit_round,
                             fixed_s=time_limit_fixed, max_s=float(time_limit_max),
                             bins=time_limit_bins, max_share=time_limit_max_share)
    restart = _restart_steps(click.get_current_context(), restart_model, restart_delay_s,
                             restart_grace_s, requeue_s)
    options: dict[str, Any] = {}
    for item in policy_options:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--policy-option wants KEY=VALUE, got {item!r}")
        options[key.strip()] = option_value(value)
    try:  # built before the trace is read: an option the policy refuses is a usage error
        chosen = policies.make(policy, **options)
    except (TypeError, ValueError, RLPolicyError) as exc:
        raise click.BadParameter(one_line(str(exc), 300),
                                 param_hint="'--policy-option'" if options else "'--policy'"
                                 ) from None
    try:
        jobs = load_jobs(resolve_trace_path(trace_path), fmt, window)
        engine = restart.apply(EngineConfig(
            nodes=1, gpus_per_node=gpus_per_node, tick_s=tick_s, decide_on_events=not ticks_only,
            restart_rules=not free_restarts,
            max_restarts_per_hour=2 if max_restarts is None else max_restarts,
            opt_in_fraction=opt_in_fraction,
            backfill=not no_backfill,
            bf_max_job_test=bf_max_job_test, conservative=conservative, placement=placement,
            elastic_fraction=elastic_fraction, audit=audit,
            time_limit=time_limit))
        if not jobs:
            raise click.ClickException("the trace (window) holds no jobs")
        sizing = Sizing(gpus_per_node=gpus_per_node, nodes=nodes, load=load)
        result = run.simulate(jobs, chosen, sizing, engine=engine, seed=seed)
    except TraceFormatError as exc:  # the file is fine; --format is wrong: a usage error
        raise click.BadParameter(str(exc), param_hint="'--format'") from None
    except (TraceError, FileNotFoundError, SimulationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if jobs_out:
        metrics.write_jobs(jobs_out, result.jobs)
    if intervals_out:
        metrics.write_intervals(intervals_out, result.intervals)
    summary = metrics.summary(result)
    summary["trace"] = trace_path
    summary["restarts"] = engine.restarts_line()
    if load is not None:
        summary["load"] = load
    if as_json:
        click.echo(json.dumps(summary, sort_keys=False))
        return
    _print_summary(summary)


def _restart_steps(ctx: click.Context, path: str | None, restore_s: float,
                   grace_s: float | None, requeue_s: float | None) -> RestartModel:
    """The model file's steps, each option given overriding it; --restart-delay's value (30 s
    by default) where neither the file nor the option sets the restore. Steps left unset keep
    the engine's defaults (grace 60 s, requeue 0.9 s)."""
    model = RestartModel()
    if path is not None:
        try:
            model = read_restart_model(path)
        except ValueError as exc:
            raise click.BadParameter(one_line(str(exc), 300),
                                     param_hint="'--restart-model'") from None
    if model.restore_s is not None and (
            ctx.get_parameter_source("restart_delay_s") is ParameterSource.DEFAULT):
        restore_s = model.restore_s
    return RestartModel(grace_s=grace_s if grace_s is not None else model.grace_s,
                        requeue_s=requeue_s if requeue_s is not None else model.requeue_s,
                        restore_s=restore_s)


def _print_summary(s: dict[str, Any]) -> None:
    def dur(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f} s ({x / 3600:.2f} h)"

    hit = s["deadline_hit_rate"]
    lines = [
        f"policy {s['policy']} on {s['trace']}: {s['jobs']} jobs, "
        f"{s['nodes']} nodes x {s['gpus_per_node']} GPUs",
        f"  JCT avg {dur(s['avg_jct_s'])}  p50 {dur(s['p50_jct_s'])}",
        f"      p95 {dur(s['p95_jct_s'])}  p99 {dur(s['p99_jct_s'])}",
        f"  wait avg {dur(s['avg_wait_s'])}  makespan {dur(s['makespan_s'])}",
        f"  GPU utilisation {s['gpu_utilization']:.3f}  deadline hit rate "
        + ("-" if hit is None else f"{hit:.3f}"),
        f"  {s['decisions']} decisions, {s['preemptions']} preemptions, {s['resizes']} resizes,"
        f" {s['dropped_jobs']} jobs larger than the cluster dropped; {s['wall_s']:.1f} s",
        f"  {s['restarts']}",
    ]
    if s["declined_dropped_jobs"]:
        lines.append(f"  {s['declined_dropped_jobs']} jobs declined at admission and dropped by "
                     "the policy (never ran: not in the JCT figures; each a deadline miss)")
    if s["notes"]:
        lines.append("  ignored parts of decisions: "
                     + ", ".join(f"{k} ({v})" for k, v in sorted(s["notes"].items())))
    click.echo("\n".join(lines))
    if s["dropped_jobs"]:
        click.echo(f"warning: {s['dropped_jobs']} jobs need more GPUs than the cluster has",
                   err=True)
    sys.stdout.flush()
