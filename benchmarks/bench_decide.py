"""Time of one decision on a large queue: every registered non-oracle policy, on a plain
`ClusterSnapshot` (as the daemon builds one) of 10,000 pending jobs, some running, 64+ nodes.
Prints ms per decide; not a timed test.

    .venv/bin/python benchmarks/bench_decide.py
    .venv/bin/python benchmarks/bench_decide.py --pending 20000 --nodes 128

cold: the first call of a fresh policy instance; warm: the next call, on the same snapshot
with one more pending job (what a daemon cycle or a simulator event usually brings). The jobs
come from the shipped ITP deadline traces (intent: deadline, model, steps), a tenth of them
with a GPU range, with users, time limits and some history. The target: well under 100 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from importlib import resources

from slurm_rl import policies
from slurm_rl.core import (
    ClusterSnapshot,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
)
from slurm_rl.sim import trace


def build_snapshot(pending: int, running: int, nodes: int, per_node: int,
                   seed: int = 0) -> tuple[ClusterSnapshot, JobView]:
    """The snapshot, and one more pending job for the warm call."""
    rng = random.Random(seed)
    folder = resources.files("slurm_rl") / "data" / "traces"
    src = trace.load(str(folder / "itp-deadline-cluster04.csv"), "itp-deadline").jobs
    now = max(j.submit for j in src[: pending + running + 1]) + 1.0
    jobs: list[JobView] = []
    free = [per_node] * nodes
    for i, t in enumerate(src[: pending + running + 1]):
        ranged = rng.random() < 0.1
        intent = Intent(deadline=t.deadline, total_steps=t.total_steps, model=t.model,
                        batch_size=t.batch_size,
                        gpus_min=1 if ranged else None, gpus_max=8 if ranged else None)
        base = dict(id=JobId(str(i + 1)), user=f"u{rng.randrange(40)}", submit_time=t.submit,
                    time_limit_s=2 * t.duration + 3600, gpus=min(t.gpus, per_node),
                    intent=intent)
        if i < running:
            node = next((n for n in range(nodes) if free[n] >= base["gpus"]), None)  # type: ignore[operator]
            if node is not None:
                free[node] -= base["gpus"]  # type: ignore[operator]
                start = now - rng.uniform(0, t.duration)
                done = int((t.total_steps or 0) * rng.random())
                jobs.append(JobView(**base, state=JobState.RUNNING, start_time=start,  # type: ignore[arg-type]
                                    attained_gpu_s=base["gpus"] * (now - start),  # type: ignore[operator]
                                    progress=Progress(steps_done=done, steps_total=t.total_steps,
                                                      rate=1.0, updated_at=now)))
                continue
        jobs.append(JobView(**base, state=JobState.PENDING,  # type: ignore[arg-type]
                            attained_gpu_s=rng.choice([0.0, 0.0, 5000.0])))
    extra = jobs.pop()
    views = tuple(NodeView(name=NodeName(f"node{n + 1}"), gpus_total=per_node,
                           gpus_alloc=per_node - free[n],
                           state=NodeState.IDLE if free[n] == per_node else NodeState.MIXED)
                  for n in range(nodes))
    return ClusterSnapshot(time=now, jobs=tuple(jobs), nodes=views), extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--running", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--policy", action="append", help="default: every non-oracle policy")
    args = ap.parse_args()
    snap, extra = build_snapshot(args.pending, args.running, args.nodes, args.gpus_per_node)
    warm = dataclasses.replace(snap, jobs=(*snap.jobs, extra))
    print(f"snapshot: {len(snap.pending)} pending, {len(snap.running)} running, "
          f"{len(snap.nodes)} nodes x {args.gpus_per_node} GPUs")
    names = args.policy or [n for n in policies.names() if n not in policies.oracles()]
    print(f"{'policy':>14} {'cold ms':>8} {'warm ms':>8} {'reasons ms':>10}")
    for name in names:
        policy = policies.make(name)
        t0 = time.perf_counter()
        policy.decide(snap)
        t1 = time.perf_counter()
        d = policy.decide(warm)
        t2 = time.perf_counter()
        for o in d.order:  # what the daemon does when it records the decision
            o.reason  # noqa: B018
        t3 = time.perf_counter()
        print(f"{name:>14} {1e3 * (t1 - t0):8.1f} {1e3 * (t2 - t1):8.1f} "
              f"{1e3 * (t3 - t2):10.1f}", flush=True)


if __name__ == "__main__":
    main()
