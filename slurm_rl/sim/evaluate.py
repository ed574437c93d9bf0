"""`slurm-rl evaluate --scenarios FILE.toml`: policies x traces x loads x seeds, into a folder.

Writes results.json (every run's metrics), results.md (a table: mean over seeds) and plots
(jct_cdf.png, deadline_vs_load.png, utilization.png). The TOML file:

    [evaluate]
    out = "eval-out"               # folder, relative to the TOML file; if it holds results
                                   # already, a new eval-out-2, -3...; --out DIR replaces
    policies = ["fifo", "sjf", "srtf-oracle", "tiresias"]
    loads = [0.6, 0.8, 1.0]        # size the cluster per trace and load; or `nodes = 16`
    gpus_per_node = 4
    seeds = [0]

    [engine]                       # any EngineConfig field but nodes, gpus_per_node, seed
    tick_s = 60.0
    time_limit = { model = "tsafrir" }   # or factor (the default), fixed: docs/simulator.md

    [[trace]]
    name = "cluster10"
    path = "data:itp-deadline-cluster10.csv"   # data: = shipped with slurm-rl
    format = "itp-deadline"
    window = "0:2000"              # optional

    [policy_options.tiresias]      # optional, per policy
    promote_knob = 8.0

Unknown keys are rejected with the list of valid ones. Runs go to `--workers` local processes,
or with `--executor slurm` to one Slurm job array (slurm_rl/executor.py); the results are the same.
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from slurm_rl import policies
from slurm_rl.executor import (
    ExecutorError,
    ExecutorKind,
    TaskRunner,
    executor_options,
    runner_from_cli,
)
from slurm_rl.sim import metrics
from slurm_rl.sim.config import EngineConfig, from_table
from slurm_rl.sim.run import Sizing, load_jobs, offered_load, resolve_trace_path, simulate


@dataclass(frozen=True, kw_only=True)
class TraceSpec:
    name: str
    path: str
    format: str
    window: str | None = None


@dataclass(frozen=True, kw_only=True)
class EvaluateSpec:
    policies: tuple[str, ...]
    out: str = "eval-out"
    loads: tuple[float, ...] = ()
    nodes: int | None = None
    gpus_per_node: int = 4
    seeds: tuple[int, ...] = (0,)
    title: str = "Policy evaluation"

    def __post_init__(self) -> None:
        if bool(self.loads) == (self.nodes is not None):
            raise ValueError("[evaluate] needs either loads = [...] or nodes = N")
        unknown = [p for p in self.policies if p not in policies.names()]
        if unknown:
            raise ValueError(f"[evaluate] unknown policies {unknown} "
                             f"(valid: {', '.join(policies.names())})")


@dataclass(frozen=True, kw_only=True)
class Scenarios:
    evaluate: EvaluateSpec
    traces: tuple[TraceSpec, ...]
    engine: dict[str, Any] = field(default_factory=dict)
    policy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    base: Path = Path(".")


def read_scenarios(path: Path) -> Scenarios:
    with path.open("rb") as fh:
        doc = tomllib.load(fh)
    top = {"evaluate", "engine", "trace", "policy_options"}
    unknown = sorted(set(doc) - top)
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(sorted(top))})")
    ev = dict(doc.get("evaluate", {}))
    for key in ("policies", "loads", "seeds"):
        if key in ev:
            ev[key] = tuple(ev[key])
    spec = from_table(EvaluateSpec, ev, where="evaluate")
    traces = tuple(from_table(TraceSpec, t, where="trace") for t in doc.get("trace", []))
    if not traces:
        raise ValueError(f"{path}: no [[trace]] tables")
    engine = dict(doc.get("engine", {}))
    reserved = {"nodes", "gpus_per_node", "seed"} & set(engine)
    if reserved:
        raise ValueError(f"[engine] may not set {', '.join(sorted(reserved))} "
                         "(use [evaluate] nodes/loads, gpus_per_node, seeds)")
    from_table(EngineConfig, {**engine, "nodes": 1, "gpus_per_node": 1}, where="engine")
    return Scenarios(evaluate=spec, traces=traces, engine=engine,
                     policy_options=dict(doc.get("policy_options", {})), base=path.parent)


@dataclass(frozen=True, kw_only=True)
class Task:
    trace: TraceSpec
    trace_path: str
    policy: str
    seed: int
    load: float | None
    nodes: int | None
    gpus_per_node: int
    engine: dict[str, Any]
    policy_options: dict[str, Any]


def run_task(task: Task) -> dict[str, Any]:
    """One run; returns its summary plus what the plots need (JCTs, a utilisation series)."""
    jobs = load_jobs(task.trace_path, task.trace.format, task.trace.window)
    sizing = Sizing(gpus_per_node=task.gpus_per_node, nodes=task.nodes, load=task.load)
    engine = from_table(EngineConfig, {**task.engine, "nodes": 1,
                                       "gpus_per_node": task.gpus_per_node})
    policy = policies.make(task.policy, **task.policy_options)
    result = simulate(jobs, policy, sizing, engine=engine, seed=task.seed)
    out = metrics.summary(result)
    out["declined"] = metrics.declined(policy)
    out.update(trace=task.trace.name, target_load=task.load,
               offered_load=offered_load(jobs, result.config.nodes, task.gpus_per_node),
               oracle=task.policy in policies.ORACLES)
    times, util = metrics.utilization_series(result, points=300)
    out["_jct"] = sorted(j.end - j.submit for j in result.jobs)
    out["_util"] = (times, util)
    return out


def plan(sc: Scenarios) -> list[Task]:
    ev = sc.evaluate
    sizes: list[tuple[float | None, int | None]] = (
        [(load, None) for load in ev.loads] if ev.loads else [(None, ev.nodes)])
    return [
        Task(trace=t, trace_path=str(resolve_trace_path(t.path, sc.base)), policy=p, seed=s,
             load=load, nodes=nodes, gpus_per_node=ev.gpus_per_node, engine=sc.engine,
             policy_options=sc.policy_options.get(p, {}))
        for t in sc.traces for load, nodes in sizes for p in ev.policies for s in ev.seeds
    ]


def run_all(tasks: list[Task], workers: int, progress: bool = True,
            runner: TaskRunner | None = None) -> list[dict[str, Any]]:
    """Every task's result, in order: in this process, `workers` processes, or through
    `runner` (executor.py: Slurm jobs, one job array for all tasks)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    if runner is not None:
        if progress:
            print(f"running {len(tasks)} simulations as one Slurm job array ...", flush=True)
        return runner.map(run_task, tasks)
    results: list[dict[str, Any]] = []
    columns = ("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    lines = progress and not sys.stderr.isatty()  # a log or a pipe: one line per finished run
    started = time.monotonic()

    def finished(task: Task) -> None:
        if lines:
            print(progress_line(len(results), len(tasks), time.monotonic() - started, task),
                  file=sys.stderr, flush=True)

    with Progress(*columns, disable=not progress or lines, transient=False) as bar:
        job = bar.add_task("simulating", total=len(tasks))
        if workers <= 1:
            for task in tasks:
                bar.update(job, description=f"{task.trace.name} {task.policy} "
                                            f"load={task.load} seed={task.seed}")
                results.append(run_task(task))
                bar.advance(job)
                finished(task)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                for task, res in zip(tasks, pool.map(run_task, tasks), strict=True):
                    results.append(res)
                    bar.advance(job)
                    finished(task)
    return results


def progress_line(done: int, total: int, elapsed_s: float, task: Task) -> str:
    """`[3/96] rigid-c10 fifo load=0.8 seed=0 done; 0:41 elapsed, about 12:40 left`."""
    def clock(seconds: float) -> str:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"

    left = elapsed_s / done * (total - done) if done else 0.0
    return (f"[{done}/{total}] {task.trace.name} {task.policy} load={task.load} "
            f"seed={task.seed} done; {clock(elapsed_s)} elapsed, about {clock(left)} left")


def fresh_folder(wanted: Path) -> Path:
    """`wanted` if it holds no results yet, else the first of `wanted-2`, `wanted-3`, ... that
    does not exist: earlier results (the shipped ones in docs/eval/) are never overwritten
    unless --out names their folder."""
    if not (wanted / "results.json").exists():
        return wanted
    n = 2
    while (candidate := wanted.with_name(f"{wanted.name}-{n}")).exists():
        n += 1
    return candidate


@click.command("evaluate")
@click.option("--scenarios", "scenarios_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder, replacing results already there (default: [evaluate] out, "
                   "relative to the TOML file, or if that holds results a new OUT-2, OUT-3...).")
@click.option("--workers", type=click.IntRange(min=1),
              help="Runs in parallel: processes (default 1), or with --executor slurm the "
                   "array tasks running at once (default: all).")
@executor_options
@click.option("--no-progress", is_flag=True,
              help="No progress bar (off a terminal: no line per finished run).")
def evaluate(scenarios_path: Path, out_dir: Path | None, workers: int | None, no_progress: bool,
             **executor_kw: Any) -> None:
    """Run policies x traces x loads x seeds; write a Markdown table, JSON and plots."""
    from slurm_rl.sim import report

    try:
        sc = read_scenarios(scenarios_path)
    except (ValueError, tomllib.TOMLDecodeError, TypeError) as exc:
        raise click.ClickException(f"{scenarios_path}: {exc}") from None
    out = out_dir or fresh_folder(sc.base / sc.evaluate.out)
    if out_dir is None and out != sc.base / sc.evaluate.out:
        click.echo(f"{sc.base / sc.evaluate.out} holds earlier results: writing to {out} "
                   "(--out names the folder to replace)", err=True)
    slurm = executor_kw["executor"] == ExecutorKind.SLURM.value
    runner = runner_from_cli(executor_kw, workers=workers or 1, parallelism=workers,
                             default_folder=out / "slurm-jobs",
                             default_name="slurm-rl-evaluate")
    out.mkdir(parents=True, exist_ok=True)
    try:
        results = run_all(plan(sc), workers or 1, progress=not no_progress,
                          runner=runner if slurm else None)
    except ExecutorError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        runner.close()
    runs = [{k: v for k, v in r.items() if not k.startswith("_")} for r in results]
    restarts = from_table(EngineConfig, {**sc.engine, "nodes": 1, "gpus_per_node": 1},
                          where="engine").restarts_line()
    (out / "results.json").write_text(json.dumps(
        {"scenarios": str(scenarios_path), "title": sc.evaluate.title, "restarts": restarts,
         "runs": runs}, indent=2) + "\n")
    table = report.markdown_table(runs, sc.evaluate.title, restarts)
    (out / "results.md").write_text(table)
    written = report.plots(results, out)
    click.echo(table)
    click.echo(f"wrote {out / 'results.md'}, {out / 'results.json'}, "
               + ", ".join(str(p) for p in written))
