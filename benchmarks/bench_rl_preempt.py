"""The preemptive `rl` (`policies/rl/preempting.py`, docs/rl.md "Preemption"): its decision time on
bench_decide's 10,000-job snapshot, and where its time goes in bench_sim's 100k-job run.
Prints figures; not a timed test.

    .venv/bin/python benchmarks/bench_rl_preempt.py              # decision time (seconds)
    .venv/bin/python benchmarks/bench_rl_preempt.py --split      # ... and the 100k split (~1 min)

Decision time: one more pending job arriving at the snapshot's time, caches cleared, CPU ms,
best of 5, for order-only `rl`, the preemptive one's `futile` (what the simulator asks first)
and its `decide` (always a whole plan: the order, every unprotected running job scored, the
requeues). The split: CPU seconds of the 100k-job simulation (bench_sim's trace and cluster)
spent in each part of the policy.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from bench_decide import build_snapshot
from bench_sim import build_trace

from slurm_rl import policies
from slurm_rl.policies.rl import LearnedOrder
from slurm_rl.policies.rl import preempting as rl_preempt
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator


def decision_time() -> None:
    snap, extra = build_snapshot(10_000, 200, 64, 8)
    arrived = dataclasses.replace(extra, submit_time=snap.time)
    snap = dataclasses.replace(snap, jobs=(*snap.jobs, arrived))
    print(f"snapshot: {len(snap.pending)} pending (one arrived now), {len(snap.running)} "
          f"running, {len(snap.nodes)} nodes x 8 GPUs")
    order_only = policies.make("rl")
    assert isinstance(order_only, LearnedOrder)
    pre = policies.make("rl", preempt_margin=0.0)
    assert isinstance(pre, rl_preempt.RLPreempting)
    calls: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        ("order-only rl", order_only.decide), ("preemptive rl, futile", pre.futile),
        ("preemptive rl, decide", pre.decide))
    for label, call in calls:
        best = float("inf")
        for _ in range(5):
            order_only._rows.clear()
            pre._rows.clear()
            pre.reset()
            t = time.process_time()
            d = call(snap)
            best = min(best, time.process_time() - t)
        what = (f"{d}" if isinstance(d, bool)
                else f"{len(d.order)} ordered, {len(d.preemptions)} requeues")
        print(f"{label:>28}: {best * 1e3:6.1f} ms CPU ({what})")


def split(jobs: int) -> None:
    spent: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()

    def timed(owner: Any, name: str, label: str) -> None:
        f: Callable[..., Any] = getattr(owner, name)

        def g(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[label] += time.process_time() - t
                calls[label] += 1
        setattr(owner, name, g)

    cls = rl_preempt.RLPreempting
    for owner, name, label in (
            (rl_preempt, "_one_fits", "gate (fit check)"), (rl_preempt, "shown_rows", "shown rows"),
            (rl_preempt, "decision_from_scores", "decision_from_scores"),
            (rl_preempt, "plan_preemptions_by_prefix", "planner (incl. its syncs)"),
            (rl_preempt, "running_rows", "running_rows"), (cls, "_sync", "sync"),
            (cls, "scores", "network"), (cls, "_arrival_may_preempt", "arrival checks"),
            (cls, "futile", "futile (incl. the gate and arrival checks)"),
            (cls, "decide", "decide")):
        timed(owner, name, label)
    trace_jobs = build_trace(jobs)
    nodes = trace.nodes_for_load(trace_jobs, 0.8, 4)
    sim = Simulator(trace_jobs, policies.make("rl", preempt_margin=0.0),
                    EngineConfig(nodes=nodes, gpus_per_node=4, tick_s=60.0,
                                 restart_grace_s=0.0, requeue_s=0.0,  # one-step restarts,
                                 restart_rules=False))  # free: every job may be requeued
    t = time.process_time()
    result = sim.run()
    print(f"{jobs} jobs: {time.process_time() - t:.1f} s CPU in all, {result.preemptions} "
          f"requeues")
    for label, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {label:>26} {s:6.1f} s  {calls[label]:7d} calls")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", action="store_true", help="also the 100k-job split")
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs for --split")
    args = ap.parse_args()
    decision_time()
    if args.split:
        split(args.jobs)


if __name__ == "__main__":
    main()
