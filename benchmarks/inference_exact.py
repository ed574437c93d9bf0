"""Every inference scheduler against the exact offline optimum of small loaded streams
(docs/inference.md, "Against the exact optimum").

Instances (seeded): 2-4 preset devices, uniform links of 1-100 Gbit/s (log-uniform), 3-6
tasks of one model at load 0.3-0.9, noise 0; the models are four shipped profiles coarsened
into 4-5 blocks (exact.coarsen): vgg and mobilenet stay chains, resnet keeps a fork and join
(a residual block's main and downsample branches), bert a skip edge. Per instance: the optimum
by exact.optimum (dynamic programming over the tasks, exact), the HiGHS MILP (exact.solve)
as an independent check under a time cap, the optimal plan replayed through the simulator,
and each scheduler's mean latency over it: heft, lookahead, whole, and the shipped DRM-DQL
and vanilla DQL checkpoints (seeds 1-3).

    .venv/bin/python benchmarks/inference_exact.py [--instances 48] [--milp-seconds 60]
        [--csv docs/inference/exact.csv]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import exact
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import (
    EarliestFinish,
    Lookahead,
    RequestPlan,
    Scheduler,
    StreamPlan,
    WholeModel,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim, StreamConfig

CLUSTERS = (("a100", "t4"), ("t4", "cpu"), ("v100", "t4", "cpu"), ("a100", "v100", "t4"),
            ("a100", "v100", "t4", "t4"), ("a100", "t4", "cpu", "cpu"))
COARSE = {"vgg-4": ("vgg", (0, 7, 14, 21)), "mobilenet-5": ("mobilenet", (0, 12, 24, 36, 48)),
          "resnet-5": ("resnet", (0, 18, 23, 25, 50)), "bert-4": ("bert", (0, 2, 5, 22))}
CHAINS = ("vgg-4", "mobilenet-5")


def profiles() -> dict[str, Profile]:
    return {name: exact.coarsen(resolve(base), cuts, name)
            for name, (base, cuts) in COARSE.items()}


def instances(count: int, seed: int = 2026) -> list[dict[str, Any]]:
    """`count` seeded instances; every model, cluster size and load third is covered."""
    rng = np.random.default_rng(seed)
    models = list(COARSE)
    out = []
    for i in range(count):
        out.append({"instance": i, "cluster": "+".join(CLUSTERS[i % len(CLUSTERS)]),
                    "model": models[(i // len(CLUSTERS) + i) % len(models)],
                    "gbps": round(float(10 ** rng.uniform(0, 2)), 2),
                    "tasks": int(rng.integers(3, 7)),
                    "load": round(0.3 + 0.2 * (i % 3) + float(rng.uniform(0.0, 0.2)), 2),
                    "seed": 1000 + i})
    return out


def schedulers() -> dict[str, Scheduler]:
    out: dict[str, Scheduler] = {"heft": EarliestFinish(), "lookahead": Lookahead(),
                                 "request-plan": RequestPlan(), "stream-plan": StreamPlan(),
                                 "whole": WholeModel()}
    from slurm_rl.inference import dqn, experiments  # torch: only the benchmark needs it

    for agent, label in experiments.AGENTS.items():
        for s in (1, 2, 3):
            net, _ = dqn.load(experiments.checkpoint_path(experiments.DATA, agent, s))
            out[f"{label}-s{s}"] = dqn.QScheduler(net, f"{label}-s{s}")
    return out


def run(inst: dict[str, Any], profs: dict[str, Profile], scheds: dict[str, Scheduler],
        milp_seconds: float) -> dict[str, Any]:
    c = cl.make(inst["cluster"].split("+"), inst["gbps"])
    prof = profs[inst["model"]]
    cfg = StreamConfig(tasks=inst["tasks"], load=inst["load"], noise=0.0, seed=inst["seed"])
    s = exact.stream(c, [prof], cfg)
    means, plans = {}, []
    for name, sch in scheds.items():
        sim = InferenceSim(c, [prof], cfg)
        recs = run_episode(sim, WholeModel() if isinstance(sch, WholeModel) else sch)
        if sim.dropped:
            raise SystemExit(f"instance {inst['instance']}: {name} dropped a task")
        means[name] = metrics(recs).mean_s
        plans.append(tuple(r.devices for r in sorted(recs, key=lambda r: r.task)))
    row: dict[str, Any] = dict(inst)
    row["plans"] = exact.assignments(s)
    try:
        opt = exact.optimum(s, plans)
        best, proven, row["dp_s"], row["dp_states"] = opt.plan, True, opt.seconds, opt.states
    except exact.InstanceError:
        best, proven, row["dp_s"], row["dp_states"] = None, False, math.nan, -1
    milp = exact.solve(s, milp_seconds, plans)  # not given the DP's plan: an independent check
    row["milp_status"], row["milp_s"], row["milp_gap"] = milp.status, milp.seconds, milp.gap
    gap = 0.0
    if best is None:  # the DP gave up: the MILP's best plan and its proven gap
        best, proven, gap = milp.plan, milp.optimal, milp.gap
    opt_mean = exact.mean_latency(s, best)
    sim = InferenceSim(c, [prof], cfg)
    replay = metrics(run_episode(sim, exact.FixedPlan(best))).mean_s
    row["opt_ms"] = opt_mean * 1e3
    row["proven"] = proven
    row["gap"] = gap
    row["replay_rel_err"] = abs(replay - opt_mean) / opt_mean
    row["milp_agrees"] = abs(milp.mean_s - opt_mean) <= 1e-9 * opt_mean
    for name, m in means.items():
        row[name] = m / opt_mean
    return row


def geomean(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    """Per scheduler: the worst ratio first, then geo-means overall, by structure and by load
    band, and how many instances it solves optimally (none may be below 1)."""
    bands = ((0.3, 0.5), (0.5, 0.7), (0.7, 0.9 + 1e-9))
    lines = ["| scheduler | worst (instance) | geo-mean | chains | DAGs | load 0.3-0.5 | 0.5-0.7 "
             "| 0.7-0.9 | at the optimum | below it |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        r = [row[name] for row in rows]
        worst = max(range(len(rows)), key=lambda i: r[i])
        ch = [row[name] for row in rows if row["model"] in CHAINS]
        dag = [row[name] for row in rows if row["model"] not in CHAINS]
        by_load = [geomean([row[name] for row in rows if lo <= row["load"] < hi] or [math.nan])
                   for lo, hi in bands]
        lines.append(f"| {name} | {r[worst]:.3f} ({rows[worst]['instance']}) | {geomean(r):.3f} "
                     f"| {geomean(ch or [math.nan]):.3f} | {geomean(dag or [math.nan]):.3f} | "
                     + " | ".join(f"{g:.3f}" for g in by_load)
                     + f" | {sum(x <= 1 + 1e-9 for x in r)} of {len(r)} "
                     f"| {sum(x < 1 - 1e-9 for x in r)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=48)
    ap.add_argument("--milp-seconds", type=float, default=60.0,
                    help="Time cap of the MILP check per instance.")
    ap.add_argument("--csv", type=Path, default=Path("inference-exact.csv"))
    args = ap.parse_args(argv)
    if args.instances < 1:
        print("--instances: give at least 1", file=sys.stderr)
        return 2
    if not args.milp_seconds > 0:
        print("--milp-seconds: give a positive number", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    profs, scheds = profiles(), schedulers()
    rows = []
    for inst in instances(args.instances):
        row = run(inst, profs, scheds, args.milp_seconds)
        rows.append(row)
        how = "proven" if row["proven"] else f"gap {row['gap']:.2%}"
        print(f"{row['instance']:2d} {row['cluster']:<22} {row['model']:<11} "
              f"{row['gbps']:6.2f} Gbit/s {row['tasks']} tasks load {row['load']:.2f}: "
              f"opt {row['opt_ms']:.4f} ms ({how}"
              f", dp {row['dp_s']:.2f} s, {row['dp_states']} states; milp {row['milp_status']} "
              f"{row['milp_s']:.2f} s{'' if row['milp_agrees'] else ' DIFFERS'}) "
              f"heft {row['heft']:.3f} drm-s1 {row['drm-dql-s1']:.3f}", flush=True)
    names = list(scheds)
    print()
    print(table(rows, names))
    bad = [(r["instance"], n) for r in rows for n in names if r[n] < 1 - 1e-9]
    best = [min(r[n] for n in names) for r in rows]
    print(f"\nthe best scheduler per instance: geo-mean {geomean(best):.3f}, worst "
          f"{max(best):.3f}; the optimum is below every scheduler on "
          f"{sum(b > 1 + 1e-9 for b in best)} of {len(rows)} instances")
    print(f"\n{len(rows)} instances, {sum(r['proven'] for r in rows)} proven optimal; "
          f"replay error at most {max(r['replay_rel_err'] for r in rows):.1e}; "
          f"MILP agrees on {sum(r['milp_agrees'] for r in rows)} (proved optimal on "
          f"{sum(r['milp_status'] == 'Optimal' for r in rows)} within "
          f"{args.milp_seconds:g} s); DP {sum(r['dp_s'] for r in rows):.1f} s in all, at most "
          f"{max(r['dp_s'] for r in rows):.1f} s; scheduler below the optimum: "
          f"{bad or 'none'}; {time.perf_counter() - t0:.0f} s")
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    print(f"wrote {args.csv}")
    return 1 if bad or any(r["replay_rel_err"] > 1e-9 for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
