"""Experiments behind `slurm-rl inference train|evaluate` (docs/inference.md): training runs
with learning curves, the bandwidth x compute x structure sweep, the DP comparison, and plots.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.env import (
    HELD_OUT_MODELS,
    TRAIN_MODELS,
    InferenceEnv,
    Scenario,
    randomised_validation,
)
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import (
    EarliestFinish,
    Metrics,
    RequestPlan,
    Scheduler,
    StreamPlan,
    WholeModel,
    dp_chain,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim, StreamConfig

DATA = Path(__file__).resolve().parent.parent / "data" / "inference"
AGENTS = {"drm": "drm-dql", "vanilla": "vanilla-dql"}
DEFAULT_CHECKPOINT = DATA / "drm-dql-s1.pt"
BANDWIDTHS = (1.0, 10.0, 100.0)
STRUCTURES = TRAIN_MODELS + HELD_OUT_MODELS


def validation_scenarios() -> tuple[Scenario, ...]:
    """Fixed validation episodes (training structures, seeds training never draws)."""
    out = []
    for k, (mix, gbps) in enumerate(itertools.product(cl.MIXES, (2.0, 30.0))):
        out.append(Scenario(mix=mix, gbps=gbps, load=0.5, seed=900_000 + k))
    return tuple(out)


def checkpoint_path(out_dir: Path, agent: str, seed: int, tag: str = "") -> Path:
    return out_dir / f"{AGENTS[agent]}-s{seed}{tag}.pt"


def train_runs(agents: Sequence[str], seeds: Sequence[int], episodes: int, out_dir: Path,
               curve_dir: Path, log: Callable[[str], None], params: dict[str, Any] | None = None,
               tag: str = "") -> list[dict[str, Any]]:
    """Train each agent x seed; checkpoints to `out_dir`, curves-AGENT{tag}.csv per agent and
    learning_curves{tag}.png (every agent whose CSV is there) to `curve_dir`."""
    import time

    from slurm_rl.inference import dqn

    out_dir.mkdir(parents=True, exist_ok=True)
    curve_dir.mkdir(parents=True, exist_ok=True)
    # randomised training validates on random settings of its own range's last block
    val = randomised_validation() if (params or {}).get("randomised") else validation_scenarios()
    everything: list[dict[str, Any]] = []
    for agent in agents:
        rows: list[dict[str, Any]] = []
        for seed in seeds:
            cfg = dqn.TrainConfig(**{"seed": seed, "matching": agent == "drm",
                                     "episodes": episodes, **(params or {})})
            log(f"== {AGENTS[agent]} seed {seed}")
            t0 = time.perf_counter()
            net, curve = dqn.train(cfg, val, log=log)
            secs = time.perf_counter() - t0
            log(f"{AGENTS[agent]} seed {seed}: {secs:.0f} s")
            dqn.save(net, checkpoint_path(out_dir, agent, seed, tag),
                     {"agent": AGENTS[agent], "seed": seed, "episodes": episodes,
                      "train_seconds": round(secs, 1), "params": dict(params or {}),
                      "best_validation_slowdown": min(r["validation_slowdown"] for r in curve)})
            rows += [{"agent": AGENTS[agent], "seed": seed, **r} for r in curve]
        write_csv(rows, curve_dir / f"curves-{AGENTS[agent]}{tag}.csv")
        everything += rows
    replot(curve_dir, tag, params)
    return everything


def replot(curve_dir: Path, tag: str = "", params: dict[str, Any] | None = None) -> Path:
    """learning_curves{tag}.png from every curves-AGENT{tag}.csv in `curve_dir`, with the
    baselines on the validation episodes the run used (`params` as given to training:
    randomised training validates on `randomised_validation`; with a plan as the base, the
    request plan, and the stream plan for its base, are baselines too)."""
    from slurm_rl.inference.report import curve_summary

    params = params or {}
    val = randomised_validation() if params.get("randomised") else validation_scenarios()
    path = curve_dir / f"learning_curves{tag}.png"
    rows = read_curves(curve_dir, tag)
    scheds: list[Scheduler] = [EarliestFinish(), WholeModel()]
    if params.get("base") in ("plan", "stream"):
        scheds.append(RequestPlan())
    if params.get("base") == "stream":
        scheds.append(StreamPlan())
    base = {s.name: _validate(s, val) for s in scheds}
    plot_curves(rows, base, path)
    (curve_dir / f"learning_curves{tag}.md").write_text(curve_summary(rows, base) + "\n")
    return path


def read_curves(curve_dir: Path, tag: str = "") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for agent in AGENTS.values():
        p = curve_dir / f"curves-{agent}{tag}.csv"
        if p.is_file():
            with open(p) as fh:
                for r in csv.DictReader(fh):
                    rows.append({"agent": r["agent"], "seed": int(r["seed"]),
                                 **{k: float(v) for k, v in r.items()
                                    if k not in ("agent", "seed")}})
    return rows


def _validate(s: Scheduler, val: Sequence[Scenario]) -> float:
    env = InferenceEnv(val)
    out = []
    for sc in val:
        sim = env.make_sim(sc)
        out.append(metrics(run_episode(sim, s), sim.dropped).slowdown)
    return float(np.mean(out))


def plot_curves(rows: list[dict[str, Any]], baselines: dict[str, float], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for agent, colour in (("drm-dql", "tab:blue"), ("vanilla-dql", "tab:red")):
        seeds = sorted({r["seed"] for r in rows if r["agent"] == agent})
        for k, seed in enumerate(seeds):
            rr = [r for r in rows if r["agent"] == agent and r["seed"] == seed]
            ax.plot([r["episode"] for r in rr], [r["validation_slowdown"] for r in rr],
                    color=colour, alpha=0.8, label=agent if k == 0 else None)
    styles = (("--", "black"), (":", "black"), ("-.", "black"), ("-", "tab:green"))
    for (name, v), (style, colour) in zip(baselines.items(), styles, strict=False):
        ax.axhline(v, color=colour, linestyle=style, label=name, alpha=0.8)
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    if high < 10 * low:  # within a decade: label 2, 3, 4... (else no tick would carry a number)
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=tuple(range(1, 10))))
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training episode (0: after the warm start, where there is one)")
    ax.set_ylabel("validation mean slowdown (latency / model alone)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def sweep(schedulers: Callable[[int], dict[str, Scheduler]], seeds: Sequence[int],
          tasks: int, load: float) -> list[dict[str, Any]]:
    """Every cell x seed x scheduler: one episode of `tasks` tasks of the cell's model.
    `schedulers(seed)` gives the schedulers for a seed (each agent's seed-k checkpoint)."""
    rows = []
    for seed in seeds:
        scheds = schedulers(seed)
        for gbps, mix, model in itertools.product(BANDWIDTHS, cl.MIXES, STRUCTURES):
            c = cl.make(cl.MIXES[mix], gbps)
            prof = resolve(model)
            for name, s in scheds.items():
                rows.append({"gbps": gbps, "mix": mix, "model": model,
                             "held_out": model in HELD_OUT_MODELS, "seed": seed,
                             "scheduler": name, **_episode(c, prof, s, tasks, load, seed)})
    return rows


def grid_sweep(cells: Sequence[tuple[str, float | str, cl.Cluster]],
               models: Sequence[tuple[str, Profile]],
               schedulers: Callable[[int], dict[str, Scheduler]], seeds: Sequence[int],
               tasks: int, loads: Sequence[float]) -> list[dict[str, Any]]:
    """`sweep` over a grid file's cells: every (cluster name, bandwidth label, cluster) x
    (model label, profile) x load, each row labelled by them (`grid.Grid` gives both lists)."""
    rows = []
    for seed in seeds:
        scheds = schedulers(seed)
        for (name, bandwidth, c), (model, prof), load in itertools.product(cells, models,
                                                                           loads):
            for sched, s in scheds.items():
                rows.append({"cluster": name, "gbps": bandwidth, "model": model,
                             "load": load, "seed": seed, "scheduler": sched,
                             **_episode(c, prof, s, tasks, load, seed)})
    return rows


def _episode(c: cl.Cluster, prof: Profile, s: Scheduler, tasks: int, load: float,
             seed: int) -> dict[str, Any]:
    """One stream of `tasks` tasks of `prof` at `load` (stream seed 10000 + seed): metrics."""
    if isinstance(s, WholeModel):  # (it keeps per-task state: a fresh one per episode)
        s = WholeModel()
    sim = InferenceSim(c, [prof], StreamConfig(tasks=tasks, load=load, seed=10_000 + seed))
    m: Metrics = metrics(run_episode(sim, s), sim.dropped)
    return {"mean_ms": m.mean_s * 1e3, "p95_ms": m.p95_s * 1e3, "throughput": m.throughput,
            "slowdown": m.slowdown, "dropped": m.dropped}


def dp_rows(schedulers: dict[str, Scheduler]) -> list[dict[str, Any]]:
    """One task of each chain model alone on an idle cluster, estimated times (noise 0):
    each scheduler's latency over the DP optimum."""
    rows = []
    for gbps, mix, model in itertools.product(BANDWIDTHS, cl.MIXES, STRUCTURES):
        prof = resolve(model)
        if not prof.is_chain:
            continue
        c = cl.make(cl.MIXES[mix], gbps)
        best, _ = dp_chain(prof, c)
        row: dict[str, Any] = {"gbps": gbps, "mix": mix, "model": model, "dp_ms": best * 1e3}
        for name, s in schedulers.items():
            sim = InferenceSim(c, [prof], StreamConfig(tasks=1, noise=0.0))
            row[name] = run_episode(sim, s)[0].latency / best
        rows.append(row)
    return rows


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows written by `write_csv`: numbers as float, True/False as bool, text as is."""
    def value(v: str) -> Any:
        if v in ("True", "False"):
            return v == "True"
        try:
            return float(v)
        except ValueError:
            return v

    with open(path) as fh:
        return [{k: value(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
