"""How much any scheduler could gain on HEFT in each cell of the inference sweep
(docs/inference.md, "Results"): an analysis that prints figures, not a timed test.

For every cell of `slurm-rl inference evaluate` (bandwidth x mix x structure, 24 tasks at load
0.6, streams 10001-10003), HEFT's mean latency is compared with a lower bound no placement can
beat: each task's critical path with every layer at its fastest device, its actual (noisy)
compute time, no transfers and no queueing. Where HEFT is within `--tie` (0.5 %, the sweep's
tie) of that bound, no scheduler can be "better" than HEFT there. It also prints whole-model /
HEFT and lookahead / HEFT, the two other heuristics, per cell.

    .venv/bin/python benchmarks/bench_inference_headroom.py [--tie 0.005] [--load 0.6]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.experiments import BANDWIDTHS, STRUCTURES
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import (
    EarliestFinish,
    Lookahead,
    Scheduler,
    WholeModel,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim, StreamConfig, tables

SEEDS = (1, 2, 3)
TASKS, LOAD, NOISE = 24, 0.6, 0.1


def lower_bound(c: cl.Cluster, prof: Profile, seed: int) -> float:
    """Mean over the stream's tasks of the critical path at the fastest device per layer,
    with the task's actual compute factors (the simulator's noise draw), nothing else."""
    best = tables(prof, c).comp.min(axis=1)
    out = []
    for k in range(TASKS):
        f = np.random.default_rng([seed, 1, k]).lognormal(-NOISE * NOISE / 2, NOISE,
                                                          (len(prof.layers), 3))[:, 0]
        fin: list[float] = []
        for i, lay in enumerate(prof.layers):
            fin.append(max([0.0] + [fin[j] for j in lay.inputs if j >= 0]) + f[i] * best[i])
        out.append(max(fin))
    return float(np.mean(out))


def mean_latency(c: cl.Cluster, prof: Profile, make: type[Scheduler],
                 load: float = LOAD) -> float:
    vals = []
    for s in SEEDS:
        sim = InferenceSim(c, [prof], StreamConfig(tasks=TASKS, load=load, noise=NOISE,
                                                   seed=10_000 + s))
        vals.append(metrics(run_episode(sim, make()), sim.dropped).mean_s)
    return float(np.mean(vals))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tie", type=float, default=0.005)
    ap.add_argument("--load", type=float, default=LOAD, help="arrival load (the sweep's)")
    args = ap.parse_args()
    room = 0
    print("Gbit/s mix    model      heft/bound whole/heft lookahead/heft")
    for gbps, mix, model in itertools.product(BANDWIDTHS, cl.MIXES, STRUCTURES):
        c, prof = cl.make(cl.MIXES[mix], gbps), resolve(model)
        heft = mean_latency(c, prof, EarliestFinish, args.load)
        bound = float(np.mean([lower_bound(c, prof, 10_000 + s) for s in SEEDS]))
        whole = mean_latency(c, prof, WholeModel, args.load)
        look = mean_latency(c, prof, Lookahead, args.load)
        has_room = heft > bound * (1 + args.tie)
        room += has_room
        print(f"{gbps:6g} {mix:6s} {model:10s} {heft / bound:10.3f} {whole / heft:10.3f} "
              f"{look / heft:13.3f}{'' if has_room else '  no room'}")
    n = len(BANDWIDTHS) * len(cl.MIXES) * len(STRUCTURES)
    print(f"cells where HEFT is more than {args.tie:.1%} above the bound: {room} of {n}")


if __name__ == "__main__":
    main()
