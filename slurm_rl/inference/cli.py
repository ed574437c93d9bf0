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

DOCS = Path(__file__).resolve().parents[2] / "docs" / "inference"


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
              help="Where profiles/*.json go (default: the shipped ones); cpu_times.csv and "
                   "cpu_device.json go to its parent.")
@click.option("--time/--no-time", "time_cpu", default=True,
              help="Also time every layer on this CPU and fit the `cpu` device.")
@click.option("--reps", type=click.IntRange(1, 100), default=5, show_default=True)
def profile_command(out_dir: Path | None, time_cpu: bool, reps: int) -> None:
    """Regenerate the layer profiles of the five shipped structures from torch modules."""
    from slurm_rl.inference import profiler

    kwargs = {"out_dir": out_dir} if out_dir else {}
    profiler.regenerate(time_cpu=time_cpu, reps=reps, echo=click.echo, **kwargs)


@inference.command("train")
@click.option("--agent", type=click.Choice(["drm", "vanilla", "both"]), default="both",
              show_default=True)
@click.option("--seeds", default="1,2,3", show_default=True)
@click.option("--episodes", type=click.IntRange(1, 100_000), default=40, show_default=True)
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Checkpoints (default: slurm_rl/data/inference, the shipped ones).")
@click.option("--curve-dir", type=click.Path(file_okay=False, path_type=Path), default=DOCS,
              show_default=True, help="curves-AGENT.csv and learning_curves.png.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Override a training setting (--list-params shows them).")
@click.option("--tag", default="", help="Suffix of checkpoint and curve file names.")
@click.option("--list-params", is_flag=True, help="Print the training settings and exit.")
@click.option("--plot-only", is_flag=True,
              help="Only redraw learning_curves{tag}.png from the CSVs in --curve-dir.")
def train_command(agent: str, seeds: str, episodes: int, out_dir: Path | None,
                  curve_dir: Path, params: tuple[str, ...], tag: str, list_params: bool,
                  plot_only: bool) -> None:
    """Train DRM-DQL and/or vanilla DQL (same network, budget, scenarios and seeds)."""
    from slurm_rl.inference import dqn, experiments

    if list_params:
        click.echo(dqn.list_params())
        return
    if not all(c.isalnum() or c in "-_" for c in tag):
        raise click.BadParameter("letters, digits, - and _ only", param_hint="--tag")
    if plot_only:
        click.echo(experiments.replot(curve_dir, tag))
        return
    agents = ["drm", "vanilla"] if agent == "both" else [agent]
    experiments.train_runs(agents, _seeds(seeds), episodes, out_dir or experiments.DATA,
                           curve_dir, click.echo, _params(params, dqn.TrainConfig), tag)


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
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=DOCS,
              show_default=True, help="sweep.csv, dp.csv, sweep.png, summary.md.")
@click.option("--report-only", is_flag=True,
              help="Only rewrite summary.md and sweep.png from sweep.csv and dp.csv.")
def evaluate_command(checkpoint_dir: Path | None, seeds: str, tasks: int, load: float,
                     out_dir: Path, report_only: bool) -> None:
    """The bandwidth x compute-mix x structure sweep (held-out structures included) and the
    DP comparison, for DRM-DQL, vanilla DQL, HEFT, whole-model and lookahead."""
    from slurm_rl.inference import dqn, experiments
    from slurm_rl.inference.schedulers import EarliestFinish, Lookahead, Scheduler, WholeModel

    if report_only:
        _report(experiments.read_csv(out_dir / "sweep.csv"),
                experiments.read_csv(out_dir / "dp.csv"), out_dir)
        return

    ck_dir = checkpoint_dir or experiments.DATA
    seed_list = _seeds(seeds)
    nets = {}
    for agent in ("drm", "vanilla"):
        for s in seed_list:
            p = experiments.checkpoint_path(ck_dir, agent, s)
            if not p.is_file():
                raise click.BadParameter(f"{p} is missing (slurm-rl inference train)",
                                         param_hint="--checkpoint-dir")
            nets[(agent, s)] = dqn.load(p)[0]

    def scheds(seed: int) -> dict[str, Scheduler]:
        return {"drm-dql": dqn.QScheduler(nets[("drm", seed)], "drm-dql"),
                "vanilla-dql": dqn.QScheduler(nets[("vanilla", seed)], "vanilla-dql"),
                "heft": EarliestFinish(), "whole": WholeModel(), "lookahead": Lookahead()}

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = experiments.sweep(scheds, seed_list, tasks, load)
    experiments.write_csv(rows, out_dir / "sweep.csv")
    dp = experiments.dp_rows(scheds(seed_list[0]))
    experiments.write_csv(dp, out_dir / "dp.csv")
    _report(rows, dp, out_dir)


def _report(rows: list[dict[str, Any]], dp: list[dict[str, Any]], out_dir: Path) -> None:
    from slurm_rl.inference import report
    from slurm_rl.inference.env import HELD_OUT_MODELS

    report.plot_sweep(rows, out_dir / "sweep.png", HELD_OUT_MODELS)
    text = "\n\n".join([report.win_counts(rows, HELD_OUT_MODELS),
                        report.mix_model_grid(rows),
                        report.sweep_table(rows, HELD_OUT_MODELS), report.dp_table(dp)])
    (out_dir / "summary.md").write_text(text + "\n")
    click.echo(text)


@inference.command("place")
@click.argument("model")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="A cluster file (TOML, docs/inference.md).")
@click.option("--scheduler", type=click.Choice(["drm-dql", "heft", "whole"]),
              default="drm-dql", show_default=True)
@click.option("--checkpoint", type=click.Path(dir_okay=False, path_type=Path), default=None)
def place_command(model: str, cluster_file: Path, scheduler: str,
                  checkpoint: Path | None) -> None:
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
    click.echo(plan.format_plan(place_or_fail(prof, c, scheduler, checkpoint)))


def place_or_fail(prof: Profile, c: Cluster, scheduler: str, checkpoint: Path | None) -> Plan:
    """`plan.place`, its errors as one-line click errors (`inference place`, `slurm-rl plan`)."""
    from slurm_rl.inference import plan

    try:
        return plan.place(prof, c, scheduler, checkpoint)
    except plan.CheckpointError as exc:
        raise click.BadParameter(str(exc), param_hint="--checkpoint") from None
    except plan.NoRoomError as exc:
        raise click.ClickException(str(exc)) from None
