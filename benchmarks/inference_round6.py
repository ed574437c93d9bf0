"""The sixth round of DRM-DQL tries (docs/inference-rounds.md, "Sixth round"): DRM-DQL without
demonstrations, a shorter discount, a validation set shaped like the sweep, and two ways of
placing with the trained Q-network that lean on HEFT.

    inference_round6.py train DIR --agent drm --gamma 0.9   # -> DIR/drm-dql-s1.pt, snapshots
    inference_round6.py score DIR --vanilla CKPT --loads 0.6,0.9 --deltas 0,0.01,0.03 --ks 1,5

`train`: seed 1, no warm start, HEFT's 3 candidates plus the input's (fifth round's H), 300
episodes, validated every 10 on `sweeplike_validation()` (single-structure streams of the
training structures at loads 0.6 and 0.9, seeds neither training nor the sweep draws); it keeps
the best-validated network and the network at every validation (`snapshots-AGENT.npz`).

`score`: the sweep's 45 cells with seed 1's streams (the fourth and fifth rounds' proxy) for
- `Guarded(q, delta)`: HEFT's device unless the network's best candidate scores more than
  `delta` above it (deviate only where the Q-estimate is confident), for DRM-DQL and vanilla
  DQL alike;
- `Ensemble`: the mean Q of the last K validation snapshots;
against HEFT and the vanilla checkpoint `--vanilla`, printed as better / within 0.5 % / worse
and the geo-mean ratio; "both": better than HEFT and vanilla by more than 0.5 %.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import dqn
from slurm_rl.inference.env import TRAIN_MODELS, Scenario
from slurm_rl.inference.experiments import BANDWIDTHS, STRUCTURES, _validate
from slurm_rl.inference.features import candidate_mask, device_features
from slurm_rl.inference.profile import resolve
from slurm_rl.inference.schedulers import EarliestFinish, Scheduler, metrics, run_episode
from slurm_rl.inference.sim import InferenceSim, StreamConfig

BASE = {"demo_episodes": 0, "eps_start": 1.0, "learning_rate": 0.001, "buffer": 100_000,
        "validate_every": 10, "candidates": 3, "episodes": 300}


def sweeplike_validation() -> tuple[Scenario, ...]:
    """9 episodes: mix x training structure, one structure per stream, 3 or 30 Gbit/s, load
    0.6 or 0.9 (the sweep streams one structure at 0.6 and 0.9)."""
    return tuple(Scenario(mix=mix, gbps=(3.0, 30.0)[k % 2], models=(m,),
                          load=(0.6, 0.9)[(k // 2) % 2], tasks=16, seed=910_000 + k)
                 for k, (mix, m) in enumerate(itertools.product(cl.MIXES, TRAIN_MODELS)))


def heft_choice(sim: InferenceSim) -> int:
    _, _, finish, feasible = sim.options()
    return int(np.argmin(np.where(feasible, finish, np.inf)))


def guarded_choice(q: np.ndarray, ok: np.ndarray, heft: int, delta: float) -> int:
    """The best-scoring allowed device if it beats HEFT's by more than `delta`, else HEFT's."""
    qv = np.where(ok, q, -np.inf)
    a = int(np.argmax(qv))
    return a if a != heft and qv[a] - qv[heft] > delta else heft


class Ensemble(dqn.QScheduler):
    """Greedy on the mean Q of several weight sets of one architecture."""

    def __init__(self, net: dqn.QNet, weights: Sequence[list[tuple[np.ndarray, np.ndarray]]],
                 name: str) -> None:
        super().__init__(net, name)
        self.sets = list(weights)

    def q_values(self, f: np.ndarray, ok: np.ndarray,
                 gap: np.ndarray | None = None) -> np.ndarray:
        total = np.zeros(f.shape[0])
        for w in self.sets:
            self.w = w
            total += super().q_values(f, ok, gap)
        return total / len(self.sets)


class Guarded:
    def __init__(self, q: dqn.QScheduler, delta: float, name: str) -> None:
        self.q, self.delta, self.name = q, delta, name

    def choose(self, sim: InferenceSim) -> int:
        f, _ = device_features(sim)
        ok = candidate_mask(sim, self.q.candidates)
        return guarded_choice(self.q.q_values(f, ok), ok, heft_choice(sim), self.delta)


def train(out: Path, agent: str, gamma: float) -> None:
    snaps: list[list[tuple[np.ndarray, np.ndarray]]] = []
    plain = dqn.validate

    def validate(sched: dqn.QScheduler, scenarios: Sequence[Scenario], env: object) -> float:
        snaps.append([(a.copy(), b.copy()) for a, b in sched.w])  # the network as validated
        return plain(sched, scenarios, env)  # type: ignore[arg-type]

    dqn.validate = validate  # type: ignore[assignment]  # train() has no per-validation hook
    cfg = dqn.TrainConfig(seed=1, matching=agent == "drm", gamma=gamma, **BASE)  # type: ignore[arg-type]
    t0 = time.process_time()
    net, curve = dqn.train(cfg, sweeplike_validation())
    out.mkdir(parents=True, exist_ok=True)
    name = "drm-dql" if agent == "drm" else "vanilla-dql"
    dqn.save(net, out / f"{name}-s1.pt", {"gamma": gamma, "validation": "sweeplike"})
    arrays = {f"s{i}_{j}_{k}": a for i, s in enumerate(snaps) for j, p in enumerate(s)
              for k, a in enumerate(p)}
    np.savez(out / f"snapshots-{agent}.npz", **arrays)  # type: ignore[arg-type]
    print(f"{name}: best sweep-like validation {min(r['validation_slowdown'] for r in curve):.3f}"
          f" (HEFT {_validate(EarliestFinish(), sweeplike_validation()):.3f}), "
          f"CPU {time.process_time() - t0:.0f} s")


def snapshots(path: Path) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    z = np.load(path)
    n = 1 + max(int(k[1:].split("_")[0]) for k in z.files)
    return [[(z[f"s{i}_{j}_0"], z[f"s{i}_{j}_1"]) for j in range(5)] for i in range(n)]


def _cells(scheds: dict[str, Scheduler], load: float) -> list[dict[str, float]]:
    rows = []
    for gbps, mix, model in itertools.product(BANDWIDTHS, cl.MIXES, STRUCTURES):
        c, prof = cl.make(cl.MIXES[mix], gbps), resolve(model)
        row = {}
        for name, s in scheds.items():
            sim = InferenceSim(c, [prof], StreamConfig(tasks=24, load=load, seed=10_001))
            row[name] = metrics(run_episode(sim, s), sim.dropped).mean_s
        rows.append(row)
    return rows


def _count(r: np.ndarray) -> str:
    return (f"{(r < 0.995).sum()}/{((r >= 0.995) & (r <= 1.005)).sum()}/{(r > 1.005).sum()}; "
            f"{np.exp(np.log(r).mean()):.3f}")


def score(d: Path, vanilla: Path, loads: list[float], deltas: list[float], ks: list[int]) -> None:
    net, _ = dqn.load(d / "drm-dql-s1.pt")
    vnet, _ = dqn.load(vanilla)
    drm, van = dqn.QScheduler(net), dqn.QScheduler(vnet, "vanilla-dql")
    scheds: dict[str, Scheduler] = {"heft": EarliestFinish()}
    if 0.0 not in deltas:  # the plain greedy pair: what the ensembles are compared with
        deltas = [0.0, *deltas]
    for delta in deltas:
        scheds[f"drm d={delta}"] = Guarded(drm, delta, "drm")
        scheds[f"vanilla d={delta}"] = Guarded(van, delta, "vanilla")
    snap = d / "snapshots-drm.npz"
    for k in ks if snap.is_file() else []:
        ens = Ensemble(net, snapshots(snap)[-k:], f"last {k}")
        print(f"ensemble of the last {k}: sweep-like validation "
              f"{_validate(ens, sweeplike_validation()):.3f}")
        scheds[f"drm last {k}"] = ens
    for load in loads:
        rows = _cells(scheds, load)
        for name in scheds:
            if not name.startswith("drm"):
                continue
            vname = name.replace("drm", "vanilla") if "d=" in name else "vanilla d=0.0"
            me = np.array([r[name] for r in rows])
            h, v = np.array([r["heft"] for r in rows]), np.array([r[vname] for r in rows])
            both = int(((me < 0.995 * h) & (me < 0.995 * v)).sum())
            print(f"load {load} {name}: vs HEFT {_count(me / h)} | vs {vname} {_count(me / v)}"
                  f" | both {both}", flush=True)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("dir", type=Path)
    t.add_argument("--agent", choices=("drm", "vanilla"), default="drm")
    t.add_argument("--gamma", type=float, default=0.9)
    s = sub.add_parser("score")
    s.add_argument("dir", type=Path)
    s.add_argument("--vanilla", type=Path, required=True)
    s.add_argument("--loads", default="0.6,0.9")
    s.add_argument("--deltas", default="0,0.01,0.03")
    s.add_argument("--ks", default="")
    a = p.parse_args(argv)
    if a.cmd == "train":
        train(a.dir, a.agent, a.gamma)
    else:
        floats = [[float(x) for x in v.split(",") if x] for v in (a.loads, a.deltas)]
        score(a.dir, a.vanilla, floats[0], floats[1], [int(x) for x in a.ks.split(",") if x])


if __name__ == "__main__":
    main(sys.argv[1:])
