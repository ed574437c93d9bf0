"""Placement time of the trained DRM-DQL agent: a 50-layer model (the first 50 layers of the
ResNet-style profile, skips included) on a 16-device cluster (a100/v100/t4/cpu, 10 Gbit/s).
Prints milliseconds per whole-model placement, process CPU time and wall time (median of
--reps; checkpoint loading reported apart); not a timed test. Target: <= 10 ms on CPU. On a
shared machine the wall time includes waiting for a core; the CPU time does not.

    .venv/bin/python benchmarks/bench_inference.py
    .venv/bin/python benchmarks/bench_inference.py --checkpoint PATH.pt --reps 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import plan
from slurm_rl.inference.experiments import DEFAULT_CHECKPOINT
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import EarliestFinish, Scheduler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--devices", type=int, default=16)
    args = ap.parse_args()
    full = resolve("resnet")
    prof = Profile(model=f"resnet[:{args.layers}]", input_bytes=full.input_bytes,
                   layers=full.layers[: args.layers])
    types = (cl.MIXES["mixed"] * (args.devices // 8 + 1))[: args.devices]
    cluster = cl.make(types, 10.0)
    t0 = time.perf_counter()
    from slurm_rl.inference import dqn

    agent = dqn.QScheduler(dqn.load(args.checkpoint)[0])
    load_ms = (time.perf_counter() - t0) * 1e3
    scheds: list[Scheduler] = [agent, EarliestFinish()]
    print(f"{len(prof.layers)} layers on {cluster.n} devices; checkpoint {args.checkpoint.name} "
          f"loaded in {load_ms:.0f} ms (torch import included)")
    for s in scheds:
        wall, cpu = [], []
        for _ in range(args.reps):
            t, c = time.perf_counter(), time.process_time()
            p = plan.place(prof, cluster, s)
            wall.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        print(f"{s.name:8s} placement: CPU median {statistics.median(cpu):.2f} ms, wall median "
              f"{statistics.median(wall):.2f} ms (max {max(wall):.2f}) per model "
              f"({len(p.stages)} stages, predicted latency {p.latency_s * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
