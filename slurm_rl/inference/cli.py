"""`slurm-rl inference profile|train|evaluate|place` (docs/inference.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_rl.inference.cluster import ClusterError
from slurm_rl.inference.profile import ProfileError, resolve

if TYPE_CHECKING:  # (plan pulls in the simulator: imported when a command runs)
    from slurm_rl.inference.cluster import Cluster
    from slurm_rl.inference.plan import Plan
    from slurm_rl.inference.profile import Profile

PROFILE_OUT = "inference-profile"
TRAIN_OUT = "inference-train"
EVALUATE_OUT = "inference-eval"
"""Default output folders, in the current directory: the shipped files (profiles and CPU
calibration in slurm_rl/data/inference/, tables and plots in docs/inference/) are rewritten
only when --out-dir names their folder."""
SWEEP_FILES = ("sweep.csv", "dp.csv", "sweep.png", "summary.md")
GRID_FILES = ("sweep.csv", "summary.md")


def _output_folder(given: Path | None, default: str, writes: list[str]) -> Path:
    """The folder a command writes `writes` (names in it) to: `given`, replacing what is there
    (how a maintainer regenerates the shipped files), else `default` in the current directory,
    or the first of `default-2`, `default-3`, ... that holds none of them, so a run never
    replaces earlier output unless told to (as `slurm-rl evaluate` does)."""
    if given is not None:
        return given
    wanted = Path(default)
    out, n = wanted, 2
    while any((out / name).exists() for name in writes):
        out, n = wanted.with_name(f"{wanted.name}-{n}"), n + 1
    if out != wanted:
        click.echo(f"{wanted} holds earlier output: writing to {out} "
                   "(--out-dir names the folder to replace)", err=True)
    return out


def _seeds(text: str) -> list[int]:
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of whole numbers",
                                 param_hint="--seeds") from None
    if not out or any(s < 0 for s in out):
        raise click.BadParameter("give at least one non-negative seed", param_hint="--seeds")
    return out


@click.group("inference")
def inference() -> None:
    """Layer-aware DNN inference placement with DRM-DQL (docs/inference.md)."""


@inference.command("profile")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Folder for profiles/*.json, cpu_times.csv and cpu_device.json (default: "
                   f"./{PROFILE_OUT}/, or {PROFILE_OUT}-2, -3... if that holds a profile; "
                   "slurm_rl/data/inference regenerates the shipped files, which are what "
                   "every command reads).")
@click.option("--time/--no-time", "time_cpu", default=True,
              help="Also time every layer on this CPU and fit the `cpu` device.")
@click.option("--reps", type=click.IntRange(1, 100), default=5, show_default=True)
def profile_command(out_dir: Path | None, time_cpu: bool, reps: int) -> None:
    """Profile the layers of the five shipped structures from torch modules (and calibrate
    this CPU), into a new folder unless --out-dir names one."""
    from slurm_rl.inference import profiler

    out = _output_folder(out_dir, PROFILE_OUT, [profiler.PROFILES, profiler.CPU_TIMES,
                                                profiler.CPU_DEVICE])
    profiler.regenerate(out, time_cpu=time_cpu, reps=reps, echo=click.echo)
    click.echo(f"wrote {out / profiler.PROFILES}"
               + (f", {out / profiler.CPU_TIMES}, {out / profiler.CPU_DEVICE}"
                  if time_cpu else ""))


@inference.command("train")
@click.option("--agent", type=click.Choice(["drm", "vanilla", "both"]), default="both",
              show_default=True)
@click.option("--seeds", default="1,2,3", show_default=True)
@click.option("--episodes", type=click.IntRange(1, 100_000), default=40, show_default=True)
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Checkpoints (default: ./{TRAIN_OUT}/, or {TRAIN_OUT}-2, -3... if that "
                   "holds this run's checkpoints or curves; slurm_rl/data/inference replaces "
                   "the shipped ones, which evaluate, place and plan read).")
@click.option("--curve-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="curves-AGENT.csv, learning_curves.png and .md (default: the checkpoints' "
                   "folder; docs/inference replaces the shipped ones).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Override a training setting (--list-params shows them).")
@click.option("--tag", default="", help="Suffix of checkpoint and curve file names.")
@click.option("--list-params", is_flag=True, help="Print the training settings and exit.")
@click.option("--plot-only", is_flag=True,
              help="Only redraw learning_curves{tag}.png from the CSVs in --curve-dir (give the "
                   "run's --param settings: its baselines are scored on its validation).")
def train_command(agent: str, seeds: str, episodes: int, out_dir: Path | None,
                  curve_dir: Path | None, params: tuple[str, ...], tag: str, list_params: bool,
                  plot_only: bool) -> None:
    """Train DRM-DQL and/or vanilla DQL (same network, budget, scenarios and seeds)."""
    from slurm_rl.inference import dqn, experiments

    if list_params:
        click.echo(dqn.list_params())
        return
    if not all(c.isalnum() or c in "-_" for c in tag):
        raise click.BadParameter("letters, digits, - and _ only", param_hint="--tag")
    if plot_only:
        folder = curve_dir or out_dir or Path(TRAIN_OUT)
        if not experiments.read_curves(folder, tag):
            raise click.BadParameter(f"no curves-*{tag}.csv in {folder} (train first, or name "
                                     "their folder)", param_hint="--curve-dir")
        # the baselines are scored on the run's validation episodes: pass its --param settings
        click.echo(experiments.replot(folder, tag, _params(params, dqn.TrainConfig)))
        return
    agents = ["drm", "vanilla"] if agent == "both" else [agent]
    seed_list = _seeds(seeds)
    settings = _params(params, dqn.TrainConfig)
    writes = [experiments.checkpoint_path(Path(), a, s, tag).name
              for a in agents for s in seed_list]
    out = _output_folder(out_dir, TRAIN_OUT, writes + [
        f"curves-{experiments.AGENTS[a]}{tag}.csv" for a in agents if curve_dir is None])
    experiments.train_runs(agents, seed_list, episodes, out, curve_dir or out, click.echo,
                           settings, tag)
    click.echo(f"wrote {', '.join(str(out / w) for w in writes)}; curves in {curve_dir or out}")


def _params(items: tuple[str, ...], cls: type) -> dict[str, object]:
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields or key in ("seed", "matching", "episodes"):
            valid = ", ".join(k for k in fields if k not in ("seed", "matching", "episodes"))
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE with KEY one of {valid}",
                                     param_hint="--param")
        kind: Any = type(fields[key].default)
        try:
            out[key] = (text.lower() in ("1", "true", "yes") if kind is bool else kind(text))
        except ValueError:
            raise click.BadParameter(f"{item!r}: {text!r} is not a {kind.__name__}",
                                     param_hint="--param") from None
    try:
        cls(**out)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--param") from None
    return out


@inference.command("evaluate")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Where drm-dql-sN.pt and vanilla-dql-sN.pt are "
                                 "(default: the shipped ones).")
@click.option("--seeds", default="1,2,3", show_default=True)
@click.option("--tasks", type=click.IntRange(1, 100_000), default=24, show_default=True)
@click.option("--load", type=click.FloatRange(0.01, 10.0), default=0.6, show_default=True)
@click.option("--grid", "grid_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None,
              help="A grid file (TOML, docs/inference.md): your clusters, bandwidths, models, "
                   "loads, seeds and schedulers instead of the built-in sweep; writes "
                   "sweep.csv and summary.md.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"Folder for sweep.csv, dp.csv, sweep.png, summary.md (default: "
                   f"./{EVALUATE_OUT}/, or {EVALUATE_OUT}-2, -3... if that holds a sweep; "
                   "docs/inference replaces the shipped ones).")
@click.option("--report-only", is_flag=True,
              help=f"Only rewrite summary.md and sweep.png from sweep.csv and dp.csv in "
                   f"--out-dir (default ./{EVALUATE_OUT}/); after --grid, summary.md from "
                   "sweep.csv.")
def evaluate_command(checkpoint_dir: Path | None, seeds: str, tasks: int, load: float,
                     grid_file: Path | None, out_dir: Path | None, report_only: bool) -> None:
    """The bandwidth x compute-mix x structure sweep (held-out structures included) and the
    DP comparison, for DRM-DQL, vanilla DQL, HEFT, whole-model and lookahead; or, with
    --grid, the cells a grid file names."""
    from slurm_rl.inference import experiments
    from slurm_rl.inference.schedulers import EarliestFinish, Lookahead, Scheduler, WholeModel

    if report_only:
        folder = out_dir or Path(EVALUATE_OUT)
        if not (folder / "sweep.csv").is_file():
            raise click.BadParameter(f"no sweep.csv in {folder} (run evaluate first, or name "
                                     "its folder)", param_hint="--out-dir")
        rows = experiments.read_csv(folder / "sweep.csv")
        if rows and "cluster" in rows[0]:
            _grid_report(rows, folder)
            return
        if not (folder / "dp.csv").is_file():
            raise click.BadParameter(f"no dp.csv in {folder} (run evaluate first, or name "
                                     "its folder)", param_hint="--out-dir")
        _report(rows, experiments.read_csv(folder / "dp.csv"), folder)
        return
    if grid_file is not None:
        _evaluate_grid(grid_file, checkpoint_dir, seeds, tasks, load, out_dir)
        return

    seed_list = _seeds(seeds)
    nets = _agent_nets(checkpoint_dir, ("drm", "vanilla"), seed_list)

    def scheds(seed: int) -> dict[str, Scheduler]:
        from slurm_rl.inference import dqn

        return {"drm-dql": dqn.QScheduler(nets[("drm", seed)], "drm-dql"),
                "vanilla-dql": dqn.QScheduler(nets[("vanilla", seed)], "vanilla-dql"),
                "heft": EarliestFinish(), "whole": WholeModel(), "lookahead": Lookahead()}

    out = _output_folder(out_dir, EVALUATE_OUT, list(SWEEP_FILES))
    out.mkdir(parents=True, exist_ok=True)
    rows = experiments.sweep(scheds, seed_list, tasks, load)
    experiments.write_csv(rows, out / "sweep.csv")
    dp = experiments.dp_rows(scheds(seed_list[0]))
    experiments.write_csv(dp, out / "dp.csv")
    _report(rows, dp, out)
    click.echo(f"wrote {', '.join(str(out / name) for name in SWEEP_FILES)}")


def _agent_nets(checkpoint_dir: Path | None, agents: tuple[str, ...], seeds: list[int]
                ) -> dict[tuple[str, int], Any]:
    """Each agent's seed-k network from --checkpoint-dir (default: the shipped ones), every
    one loaded before any work (one-line --checkpoint-dir errors)."""
    from slurm_rl.inference import dqn, experiments

    ck_dir = checkpoint_dir or experiments.DATA
    nets = {}
    for agent in agents:
        for s in seeds:
            p = experiments.checkpoint_path(ck_dir, agent, s)
            if not p.is_file():
                raise click.BadParameter(f"{p} is missing (slurm-rl inference train)",
                                         param_hint="--checkpoint-dir")
            try:
                nets[(agent, s)] = dqn.load(p)[0]
            except dqn.CheckpointError as exc:
                raise click.BadParameter(str(exc), param_hint="--checkpoint-dir") from None
    return nets


def _evaluate_grid(grid_file: Path, checkpoint_dir: Path | None, seeds: str, tasks: int,
                   load: float, out_dir: Path | None) -> None:
    """`evaluate --grid`: the whole file and the checkpoints it needs are checked first;
    sweep.csv and summary.md are written only after every cell has run."""
    from slurm_rl.inference import experiments, grid
    from slurm_rl.inference.schedulers import HEURISTICS, Scheduler

    try:
        g = grid.read_grid(grid_file)
    except grid.GridError as exc:
        raise click.BadParameter(str(exc), param_hint="--grid") from None
    ctx = click.get_current_context()
    for option, key, given in (("--seeds", "seeds", g.seeds), ("--tasks", "tasks", g.tasks),
                               ("--load", "load", g.loads)):
        if given is not None and ctx.get_parameter_source(key) is \
                click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{option}: {grid_file} gives {key}{'s' * (key == 'load')}"
                                   " (leave one out)")
    seed_list = list(g.seeds) if g.seeds is not None else _seeds(seeds)
    agents = tuple(grid.AGENT_SCHEDULERS[s] for s in g.schedulers if s in grid.AGENT_SCHEDULERS)
    nets = _agent_nets(checkpoint_dir, agents, seed_list)

    def scheds(seed: int) -> dict[str, Scheduler]:
        from slurm_rl.inference import dqn

        out: dict[str, Scheduler] = {}
        for name in g.schedulers:
            if name in grid.AGENT_SCHEDULERS:
                out[name] = dqn.QScheduler(nets[(grid.AGENT_SCHEDULERS[name], seed)], name)
            else:
                out[name] = HEURISTICS[name]()
        return out

    rows = experiments.grid_sweep([(c.name, c.bandwidth, c.cluster) for c in g.clusters],
                                  g.models, scheds, seed_list, g.tasks or tasks,
                                  list(g.loads or (load,)))
    out = _output_folder(out_dir, EVALUATE_OUT, list(GRID_FILES))
    out.mkdir(parents=True, exist_ok=True)
    experiments.write_csv(rows, out / "sweep.csv")
    _grid_report(rows, out)
    click.echo(f"wrote {', '.join(str(out / name) for name in GRID_FILES)}")


def _grid_report(rows: list[dict[str, Any]], out_dir: Path) -> None:
    from slurm_rl.inference import report

    text = report.grid_summary(rows)
    (out_dir / "summary.md").write_text(text + "\n")
    click.echo(text)


def _report(rows: list[dict[str, Any]], dp: list[dict[str, Any]], out_dir: Path) -> None:
    from slurm_rl.inference import report
    from slurm_rl.inference.env import HELD_OUT_MODELS

    report.plot_sweep(rows, out_dir / "sweep.png", HELD_OUT_MODELS)
    text = "\n\n".join([report.win_counts(rows, HELD_OUT_MODELS),
                        report.mix_model_grid(rows),
                        report.sweep_table(rows, HELD_OUT_MODELS), report.dp_table(dp)])
    (out_dir / "summary.md").write_text(text + "\n")
    click.echo(text)


NO_GUARD_HELP = ("Print drm-dql's own plan even where the request plan is predicted to finish "
                 "sooner (by default that one is printed, with a line saying so).")


@inference.command("place")
@click.argument("model")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="A cluster file (TOML, docs/inference.md).")
@click.option("--scheduler", type=click.Choice(["drm-dql", "heft", "whole", "request-plan"]),
              default="drm-dql", show_default=True)
@click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--no-guard", is_flag=True, help=NO_GUARD_HELP)
def place_command(model: str, cluster_file: Path, scheduler: str,
                  checkpoint: Path | None, no_guard: bool) -> None:
    """Place MODEL (a shipped structure or a profile file) on an idle cluster and print the
    plan: one line per layer with its device and estimated finish time."""
    from slurm_rl.inference import cluster, plan

    try:
        prof = resolve(model)
    except ProfileError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL") from None
    try:
        c = cluster.load(cluster_file)
    except ClusterError as exc:
        raise click.BadParameter(str(exc), param_hint="--cluster") from None
    click.echo(plan.format_plan(place_or_fail(prof, c, scheduler, checkpoint,
                                              guard=not no_guard)))


def place_or_fail(prof: Profile, c: Cluster, scheduler: str, checkpoint: Path | None, *,
                  guard: bool = True) -> Plan:
    """`plan.place`, its errors as one-line click errors (`inference place`, `slurm-rl plan`)."""
    from slurm_rl.inference import plan

    try:
        return plan.place(prof, c, scheduler, checkpoint, guard=guard)
    except plan.CheckpointError as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint") from None
    except plan.NoRoomError as exc:
        raise click.ClickException(str(exc)) from None
