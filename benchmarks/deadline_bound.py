"""The most deadlines any policy could meet on a scenario file's traces: every deadline job
started at its submission on its fastest GPU count in its range (capped by the cluster at each
load), alone on the cluster, no queueing, no restart. A bound for docs/evaluation.md's
"≥ 99 % where GPUs suffice": no scheduler can pass it.

    .venv/bin/python benchmarks/deadline_bound.py                      # docs/eval/elastic.toml
    .venv/bin/python benchmarks/deadline_bound.py docs/eval/seeds.toml

Prints one line per trace × load and the pooled share per load (about 4 s of CPU). Uses
the simulator's own job model (sim/jobs.py: rates from the throughput curves, the same GPU
ranges and cluster sizes as `slurm-rl evaluate`), so it counts exactly what the evaluation
counts a hit: end <= deadline.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from slurm_rl.sim.config import EngineConfig, from_table
from slurm_rl.sim.evaluate import read_scenarios
from slurm_rl.sim.jobs import gpu_range, make_jobs
from slurm_rl.sim.run import Sizing, load_jobs, offered_load, resolve_trace_path


def bound(path: Path) -> list[tuple[str, float, float, int, int]]:
    """(trace, target load, offered load, deadline jobs, of them meetable) per trace × load."""
    sc = read_scenarios(path)
    ev = sc.evaluate
    rows = []
    for t in sc.traces:
        jobs = load_jobs(resolve_trace_path(t.path, sc.base), t.format, t.window)
        for load in ev.loads or (None,):
            sizing = Sizing(gpus_per_node=ev.gpus_per_node, nodes=ev.nodes, load=load)
            nodes = sizing.nodes_for(jobs)
            cfg = replace(from_table(EngineConfig, {**sc.engine, "nodes": nodes,
                                                    "gpus_per_node": ev.gpus_per_node}),
                          seed=ev.seeds[0])
            sim_jobs, _ = make_jobs(jobs, cfg)
            with_deadline = [j for j in sim_jobs if j.trace.deadline is not None]
            met = 0
            for j in with_deadline:
                lo, hi = gpu_range(j, cfg.capacity) or (j.gpus, j.gpus)
                best = min(j.remaining_at(g) for g in range(lo, hi + 1))
                met += j.trace.submit + best <= (j.trace.deadline or 0.0)
            rows.append((t.name, load or 0.0, offered_load(jobs, nodes, ev.gpus_per_node),
                         len(with_deadline), met))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="?", type=Path, default=Path("docs/eval/elastic.toml"))
    args = ap.parse_args()
    rows = bound(args.scenarios)
    print(f"{'trace':<12}{'load':>6}{'offered':>9}{'deadline jobs':>15}{'meetable':>10}"
          f"{'bound':>8}")
    for name, load, offered, n, met in rows:
        print(f"{name:<12}{load:>6.2f}{offered:>9.2f}{n:>15}{met:>10}{met / max(n, 1):>8.3f}")
    for load in sorted({r[1] for r in rows}):
        n = sum(r[3] for r in rows if r[1] == load)
        met = sum(r[4] for r in rows if r[1] == load)
        print(f"pooled at load {load:.2f}: {met}/{n} = {met / max(n, 1):.3f}")


if __name__ == "__main__":
    main()
