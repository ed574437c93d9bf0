"""`slurm-rl train` on the command line: the options, the checks made before any work (the
checkpoint given to --init, the whole scenarios file, the settings), then the trainer, which
is imported only then (it loads torch), so `slurm-rl train --help` stays quick."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import click

from slurm_rl.checkpoint_errors import CheckpointError, one_line
from slurm_rl.executor import ExecutorError, executor_options, runner_from_cli
from slurm_rl.rl import fromdb
from slurm_rl.rl.config import TrainConfig, list_params
from slurm_rl.rl.env import Scenario, SchedulingEnv
from slurm_rl.rl.scenarios import read_scenarios
from slurm_rl.sim.config import from_table


@click.command("train")
@click.option("--scenarios", "scenarios_path", type=click.Path(exists=True, dir_okay=False,
                                                                path_type=Path),
              help="Scenarios TOML ([train], [[scenario]], [[validation]]). With --from-db: "
                   "its [train] and [[validation]] only.")
@click.option("--from-db", "from_db", type=click.Path(dir_okay=False, path_type=Path),
              help="Fine-tune on the jobs this daemon database recorded (needs --init).")
@click.option("--init", type=click.Path(dir_okay=False, path_type=Path),
              help="Start from this checkpoint (e.g. the one the daemon runs) instead of fresh "
                   "weights.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Checkpoint to write (the best validated); curve next to it (.csv, .png).")
@click.option("--workers", type=click.IntRange(min=1),
              help="Rollouts per iteration, each in its own process or Slurm job.")
@executor_options
@click.option("--seed", type=int, help="Overrides [train] seed.")
@click.option("--iterations", type=click.IntRange(min=0), help="Overrides [train] iterations.")
@click.option("--list-params", "list_params_", is_flag=True,
              help="Print every hyper-parameter and exit.")
def train_command(scenarios_path: Path | None, from_db: Path | None, init: Path | None,
                  out: Path | None, workers: int | None, seed: int | None,
                  iterations: int | None, list_params_: bool, **executor_kw: Any) -> None:
    """Train the `rl` policy with PPO on the scenarios' TRAINING traces, or fine-tune it on
    what the daemon recorded (--from-db; docs/rl.md, "Update scheme on a live cluster")."""
    if list_params_:
        click.echo(list_params())
        return
    if out is None or (scenarios_path is None and from_db is None):
        raise click.UsageError("--out and one of --scenarios or --from-db are required")
    if from_db is not None and init is None:
        raise click.UsageError("--from-db needs --init CKPT (the checkpoint to fine-tune: the "
                               "one the daemon runs)")
    if init is not None:
        from slurm_rl.rl import model as rl_model  # (torch: without it, one line saying so)

        try:
            rl_model.load(init)
        except CheckpointError as exc:
            raise click.UsageError(f"--init: checkpoint {init} does not load: {exc.reason}"
                                   ) from None
        except Exception as exc:  # noqa: BLE001 (torch raises many kinds; all mean the same)
            why = one_line(str(exc)) or type(exc).__name__
            raise click.UsageError(f"--init: checkpoint {init} does not load: {why}") from None
    if out.is_dir():
        raise click.BadParameter(f"{out} is a folder; give the checkpoint file to write",
                                 param_hint="'--out'")
    try:  # the whole scenarios file and the settings, before anything is written
        overrides: dict[str, Any] = {}
        sc: tuple[Scenario, ...] = ()
        val: tuple[Scenario, ...] = ()
        if scenarios_path is not None:
            overrides, sc, val = read_scenarios(scenarios_path, need_training=from_db is None)
        if from_db is not None:
            overrides = {**fromdb.FINE_TUNE, **overrides}
        over = {k: v for k, v in (("workers", workers), ("seed", seed),
                                  ("iterations", iterations)) if v is not None}
        cfg = from_table(TrainConfig, {**overrides, **over}, where="train")
    except (ValueError, TypeError, KeyError) as exc:
        where = f"{scenarios_path}: " if scenarios_path is not None else ""
        raise click.ClickException(f"{where}{one_line(str(exc), 400)}") from None
    made: list[Path] = []  # (written before training: removed again if it fails)
    try:
        meta: dict[str, Any] = {}
        if from_db is not None:
            made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
            recorded, meta = _recorded_scenarios(from_db, out)
            made.insert(0, Path(meta["trace"]))
            sc, val = recorded, val or recorded
        runner = runner_from_cli(executor_kw, workers=cfg.workers, parallelism=None,
                                 default_folder=out.with_name(out.name + ".slurm"),
                                 default_name="slurm-rl-train")
        click.echo(f"training on {len(sc)} scenarios, validating on {len(val)}; {cfg}")
        from slurm_rl.rl.train import train

        try:
            res = train(cfg, sc, val, out, echo=click.echo, runner=runner, init=init,
                        meta=meta)
        finally:
            runner.close()
    except BaseException as exc:
        for p in made:  # (the trace first, then the folders it needed, deepest first)
            with contextlib.suppress(OSError):
                if p.is_file():
                    p.unlink()
                else:
                    p.rmdir()
        if isinstance(exc, fromdb.FromDbError | ExecutorError):
            raise click.ClickException(str(exc)) from None
        raise
    start = (f"initial weights {res['untrained_val_return']:.5g}" if init else
             f"initial weights {res['untrained_val_return']:.5g}, after imitation "
             f"{res['initial_val_return']:.5g}")
    click.echo(f"done in {res['wall_s']:.0f} s: best validation return "
               f"{res['best_val_return']:.5g} ({start}); wrote {out}, "
               f"{out.with_suffix('.csv')}, {out.with_suffix('.png')}")


def _recorded_scenarios(db: Path, out: Path) -> tuple[tuple[Scenario, ...], dict[str, Any]]:
    """The daemon database's jobs as one scenario (written to OUT.trace.csv)."""
    rec = fromdb.read_db(db)
    path = out.with_name(out.stem + ".trace.csv")
    fromdb.write_trace(rec.jobs, path)
    size: dict[str, Any] = ({"nodes": rec.nodes, "gpus_per_node": rec.gpus_per_node}
                            if rec.nodes and rec.gpus_per_node else {"load": 1.0})
    scen = Scenario(trace=str(path.resolve()), fmt=fromdb.TRACE_FORMAT, **size)
    try:
        SchedulingEnv((scen,)).reset(options={"scenario": 0})
    except ValueError:
        path.unlink()  # nothing half-done
        where = (f"{rec.nodes} nodes x {rec.gpus_per_node} GPUs" if "nodes" in size
                 else "a cluster sized for load 1.0")
        raise fromdb.FromDbError(f"{db}: on {where} no recorded job ever waits while another "
                                 "could start: no decision to fine-tune on") from None
    click.echo(f"{db}: {fromdb.summary(rec)}")
    click.echo(f"wrote the recorded trace to {path}")
    return (scen,), {"from_db": str(db), "trace": str(path), "recorded_jobs": len(rec.jobs)}
