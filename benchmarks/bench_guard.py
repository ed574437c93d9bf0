"""What `rl`'s queue-health guard (slurm_rl/policies/guard.py) buys and costs, in the simulator.

1. The regime it is for: four 8-GPU jobs of 3-7 days fill a 4 x 8-GPU cluster; after 8 hours
   (past rl's protect_run_s) one 1-to-10-minute 1-GPU job arrives every 4 minutes on average,
   for 3 days. Prints the short jobs' mean wait under gittins, rl without the guard and rl with
   it (each mode), and the guard's switches.
2. What it costs where rl is good: the held-out ITP clusters of docs/eval/rl.toml (first 2,000
   jobs, 4-GPU nodes, loads 0.8 and 1.0), mean JCT of rl with the guard over rl without it, and
   over the best of fifo, sjf, tiresias and gittins, per cell; the worst cell first.
3. The monitor's cost at 10,000 pending jobs (one look, ms).

    .venv/bin/python benchmarks/bench_guard.py [--seeds 0,1,2] [--option guard_mode=switch ...]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.policies.gittins import Gittins
from slurm_rl.policies.guard import GuardConfig, starvation
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.run import Sizing, load_jobs, resolve_trace_path, simulate
from slurm_rl.sim.trace import TraceJob

DAY = 86400.0
HEURISTICS = ("fifo", "sjf", "tiresias", "gittins")
HELD_OUT = ("cluster02", "cluster04", "cluster09", "cluster10")


def burst(seed: int) -> tuple[TraceJob, ...]:
    r = random.Random(seed)
    jobs = [TraceJob(id=f"L{i}", submit=i * 600.0, duration=r.uniform(3, 7) * DAY, gpus=8)
            for i in range(4)]
    t, n = 8 * 3600.0, 0
    while t < 3 * DAY:
        t += r.expovariate(1 / 240.0)
        jobs.append(TraceJob(id=f"S{n}", submit=t, duration=r.uniform(60, 600), gpus=1))
        n += 1
    return tuple(sorted(jobs, key=lambda j: j.submit))


def mean_jct(jobs: tuple[TraceJob, ...], policy: Any, load: float) -> float:
    eng = EngineConfig(nodes=1, gpus_per_node=4, tick_s=60.0, restart_delay_s=30.0,
                       restart_grace_s=0.0, requeue_s=0.0,  # one-step: docs/rl.md's figures
                       restart_rules=False)  # free restarts, as they were run
    res = simulate(jobs, policy, Sizing(gpus_per_node=4, load=load), engine=eng)
    return statistics.mean(r.end - r.submit for r in res.jobs)


def short_wait(jobs: tuple[TraceJob, ...], policy: Any) -> float:
    eng = EngineConfig(nodes=4, gpus_per_node=8, tick_s=60.0, restart_delay_s=30.0,
                       restart_grace_s=0.0, requeue_s=0.0,  # one-step: docs/rl.md's figures
                       restart_rules=False)  # free restarts, as they were run
    res = simulate(jobs, policy, Sizing(gpus_per_node=8, nodes=4), engine=eng)
    return statistics.mean(r.start - r.submit for r in res.jobs if r.job_id.startswith("S"))


def monitor_ms() -> float:
    r = random.Random(0)
    now = 100_000.0
    pend = [JobView(id=JobId(f"p{i}"), state=JobState.PENDING, submit_time=now - r.uniform(0, DAY),
                    gpus=r.choice([1, 1, 1, 2, 4, 8])) for i in range(10_000)]
    run = []
    for i in range(64):
        ran = r.uniform(0, 80_000)
        run.append(JobView(id=JobId(f"r{i}"), state=JobState.RUNNING, submit_time=now - ran,
                           start_time=now - ran, gpus=4, attained_gpu_s=4 * ran))
    nodes = tuple(NodeView(name=NodeName(f"n{i}"), state=NodeState.ALLOCATED, gpus_total=4,
                           gpus_alloc=4) for i in range(64))
    snap = ClusterSnapshot(time=now, jobs=(*run, *pend), nodes=nodes)
    g, cfg = Gittins(), GuardConfig()
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        starvation(snap, g, cfg)
        best = min(best, time.process_time() - t)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0", help="seeds of the burst scenario (comma list)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an rl option for the guarded runs (e.g. guard_mode=switch)")
    args = ap.parse_args()
    opts = dict(o.split("=", 1) for o in args.option)

    print("== the regime: long wide jobs hold every GPU, short jobs arrive (mean wait, s)")
    for seed in (int(s) for s in args.seeds.split(",")):
        jobs = burst(seed)
        guarded = policies.make("rl", **opts)
        w = short_wait(jobs, guarded)
        print(f"seed {seed}: gittins {short_wait(jobs, policies.make('gittins')):.1f}  "
              f"rl unguarded {short_wait(jobs, policies.make('rl', guard='off')):.1f}  "
              f"rl guarded {w:.1f} ({guarded.guard_status().switches} switches)")  # type: ignore[attr-defined]

    print("== held-out ITP clusters (mean JCT ratios; worst cell first)")
    rows = []
    for name in HELD_OUT:
        jobs = load_jobs(resolve_trace_path(f"data:itp-deadline-{name}.csv"), "itp-deadline",
                         "0:2000")
        for load in (0.8, 1.0):
            best = min(mean_jct(jobs, policies.make(h), load) for h in HEURISTICS)
            off = mean_jct(jobs, policies.make("rl", guard="off"), load)
            guarded = policies.make("rl", **opts)
            on = mean_jct(jobs, guarded, load)
            rows.append((on / best, name, load, on / off, off / best,
                         guarded.guard_status().switches))  # type: ignore[attr-defined]
    rows.sort(reverse=True)
    for vs_best, name, load, vs_off, off_best, sw in rows:
        print(f"{name} @ {load}: guarded/best heuristic {vs_best:.3f}  guarded/unguarded "
              f"{vs_off:.3f}  unguarded/best {off_best:.3f}  switches {sw}")
    print(f"mean guarded/best heuristic {statistics.mean(r[0] for r in rows):.3f}, "
          f"mean guarded/unguarded {statistics.mean(r[3] for r in rows):.3f}")
    print(f"== one look of the monitor at 10,000 pending, 64 running: {monitor_ms():.1f} ms CPU")


if __name__ == "__main__":
    main()
