"""Time of the RL policy's shared path on a large queue: `policies.rl.features.features`
(observation, with a row cache kept between calls as a policy keeps its own) and
`policies.rl.action.decision_from_scores` (scores -> Decision) on the plain `ClusterSnapshot` of
bench_decide.py (10,000 pending jobs, 200 running, 64 nodes x 8 GPUs). Prints ms (CPU, best
of --repeat); the target is well under 100 ms. The network's own time is not included.

    .venv/bin/python benchmarks/bench_features.py
    .venv/bin/python benchmarks/bench_features.py --pending 20000 --max-jobs 128
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_decide import build_snapshot

from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.features import FeatureConfig, RowCache, features


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--running", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--max-jobs", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    snap, _ = build_snapshot(args.pending, args.running, args.nodes, args.gpus_per_node)
    cfg = FeatureConfig(max_jobs=args.max_jobs)
    rng = np.random.default_rng(0)
    cache = RowCache()
    best_f = best_d = float("inf")
    for _ in range(args.repeat):
        t0 = time.process_time()
        f = features(snap, cfg, cache=cache)
        t1 = time.process_time()
        d = decision_from_scores(snap, f.shown_ids, rng.uniform(-1, 1, args.max_jobs),
                                 rng.uniform(0, 1, args.max_jobs))
        t2 = time.process_time()
        best_f, best_d = min(best_f, t1 - t0), min(best_d, t2 - t1)
    print(f"snapshot: {len(snap.pending)} pending, {len(snap.running)} running, "
          f"{len(snap.nodes)} nodes; max_jobs {args.max_jobs}; {len(d.order)} jobs ranked")
    print(f"features: {1e3 * best_f:.1f} ms  decision_from_scores: {1e3 * best_d:.1f} ms  "
          f"total: {1e3 * (best_f + best_d):.1f} ms (CPU, best of {args.repeat})")


if __name__ == "__main__":
    main()
