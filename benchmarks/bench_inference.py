"""Two benchmarks for the inference placement (docs/inference.md); not timed tests.

Placement (default): the trained DRM-DQL agent places a 50-layer model (the first 50 layers of
the ResNet-style profile, skips included) on a 16-device cluster (a100/v100/t4/cpu, 10 Gbit/s),
without the placement guard and with it (as `inference place` runs it: the agent's plan, then
the request plan's estimate; plan.py), then the heuristics.
Prints milliseconds per whole-model placement, process CPU time and wall time (median of
--reps; checkpoint loading reported apart), then the CPU time per model in a loaded stream of
--stream-tasks such models (--load), where the stream plan also plans the requests it expects
behind each one. Target: <= 10 ms on CPU. On a shared machine the
wall time includes waiting for a core; the CPU time does not.

Gloo hop (`--gloo`): what one pipeline hop of examples/inference/pipeline.py costs, two
processes on this host exchanging tensors with torch.distributed's gloo backend over loopback.
For each size the sender computes for --gap-ms (a busy loop, as a pipeline stage does) while
the receiver waits in `recv`, then sends; one hop is send start on the sender to recv end on the
receiver (one host: one clock). Prints the median and p90 per size and `hop = latency + bytes /
bandwidth` fitted robustly to the medians (latency: the median over the sizes up to 10 kB, where
the fixed cost dominates; bandwidth: the median over the sizes from 1 MB, where the bytes
dominate, of bytes / (hop - latency)): the
`link_latency_s` and `bandwidth_gbps` a cluster file gives the plan
(examples/inference/pipeline-cluster.toml). On a busy host both grow (docs/inference.md).

    .venv/bin/python benchmarks/bench_inference.py
    .venv/bin/python benchmarks/bench_inference.py --checkpoint PATH.pt --reps 100
    .venv/bin/python benchmarks/bench_inference.py --gloo [--reps 40] [--gap-ms 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import plan
from slurm_rl.inference.experiments import DEFAULT_CHECKPOINT
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import EarliestFinish, RequestPlan, Scheduler, StreamPlan
from slurm_rl.inference.sim import InferenceSim, StreamConfig

# float32 elements: the done message (1), 1 kB, 10 kB, MobileNet's 100 kB and 400 kB
# activations, 1.6 MB, VGG's largest (3.2 MB)
GLOO_SIZES = (1, 256, 2560, 25088, 100352, 401408, 802816)


def placement(args: argparse.Namespace) -> None:
    full = resolve("resnet")
    prof = Profile(model=f"resnet[:{args.layers}]", input_bytes=full.input_bytes,
                   layers=full.layers[: args.layers])
    types = (cl.MIXES["mixed"] * (args.devices // 8 + 1))[: args.devices]
    cluster = cl.make(types, 10.0)
    t0 = time.perf_counter()
    from slurm_rl.inference import dqn

    agent = dqn.QScheduler(dqn.load(args.checkpoint)[0])
    load_ms = (time.perf_counter() - t0) * 1e3
    scheds: list[Scheduler] = [agent, EarliestFinish(), RequestPlan(), StreamPlan()]
    print(f"{len(prof.layers)} layers on {cluster.n} devices; checkpoint {args.checkpoint.name} "
          f"loaded in {load_ms:.0f} ms (torch import included)")
    for s, guard in [(agent, False), *((x, True) for x in scheds)]:
        wall, cpu = [], []
        for _ in range(args.reps):
            t, c = time.perf_counter(), time.process_time()
            p = plan.place(prof, cluster, s, guard=guard)
            wall.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        name = s.name if guard or s is not agent else f"{s.name} (no guard)"
        print(f"{name:12s} placement: CPU median {statistics.median(cpu):.2f} ms, wall median "
              f"{statistics.median(wall):.2f} ms (max {max(wall):.2f}) per model "
              f"({len(p.stages)} stages, predicted latency {p.latency_s * 1e3:.3f} ms)")
    # in a loaded stream, where the stream plan also plans the requests behind each task
    print(f"a stream of {args.stream_tasks} such models at load {args.load} (CPU per model):")
    fresh: list[Scheduler] = [agent, EarliestFinish(), RequestPlan(), StreamPlan()]
    for s in fresh:
        sim = InferenceSim(cluster, [prof], StreamConfig(tasks=args.stream_tasks, load=args.load))
        per_task: list[float] = []
        while not sim.done:
            if sim.layer == 0:
                per_task.append(0.0)
            c = time.process_time()
            d = s.choose(sim)
            per_task[-1] += (time.process_time() - c) * 1e3
            sim.place(d)
        print(f"{s.name:12s} CPU median {statistics.median(per_task):.2f} ms, max "
              f"{max(per_task):.2f} ms per model")


def _gloo_rank(rank: int, port: int, reps: int, gap_s: float, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            init_method=f"tcp://127.0.0.1:{port}")
    stamps: list[list[float]] = []
    for n in GLOO_SIZES:
        buf = torch.ones(n)
        row = []
        for _ in range(reps + 2):  # the first two warm the connection and the buffers
            dist.barrier()
            if rank == 0:
                end = time.perf_counter() + gap_s
                while time.perf_counter() < end:  # a stage computing
                    pass
                row.append(time.perf_counter())
                dist.send(buf, dst=1)
            else:
                dist.recv(buf, src=0)
                row.append(time.perf_counter())
        stamps.append(row[2:])
    out.put((rank, stamps))
    dist.barrier()
    dist.destroy_process_group()


def fit_hop(sizes: list[float], secs: list[float]) -> tuple[float, float]:
    """`secs = latency + sizes / bandwidth` from per-size medians, robustly (one slow size
    does not swing it, as it does a least-squares line on a shared machine): the latency is
    the median time of the sizes <= 10 kB, the bandwidth the median over the sizes >= 1 MB of
    bytes / (time - latency). Returns (latency s, bandwidth bytes/s)."""
    small = [t for b, t in zip(sizes, secs, strict=True) if b <= 1.1e4]
    if not small:
        raise ValueError("no size <= 10 kB to take the latency from")
    lat = statistics.median(small)
    rates = [b / (t - lat) for b, t in zip(sizes, secs, strict=True) if b >= 1e6 and t > lat]
    if not rates:
        raise ValueError("no size >= 1 MB took longer than the smallest message")
    return lat, statistics.median(rates)


def gloo(args: argparse.Namespace) -> None:
    import multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_gloo_rank, args=(r, port, args.reps, args.gap_ms / 1e3, q))
             for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    load = os.getloadavg()[0]
    print(f"gloo send -> recv over loopback, 2 processes, 1 thread each, sender busy "
          f"{args.gap_ms:g} ms before each send, {args.reps} hops per size; load {load:.1f} "
          f"on {os.cpu_count()} CPUs")
    print("| bytes | median ms | p90 ms | min ms |")
    print("|---|---|---|---|")
    sizes, meds = [], []
    for n, sent, recv in zip(GLOO_SIZES, got[0], got[1], strict=True):
        hops = sorted((r - s) * 1e3 for s, r in zip(sent, recv, strict=True))
        med = statistics.median(hops)
        print(f"| {n * 4} | {med:.3f} | {hops[int(0.9 * (len(hops) - 1))]:.3f} | "
              f"{hops[0]:.3f} |")
        sizes.append(n * 4.0)
        meds.append(med / 1e3)
    lat, bw = fit_hop(sizes, meds)
    print(f"fit to the medians: link_latency_s = {lat:.2e} ({lat * 1e6:.0f} us), "
          f"bandwidth_gbps = {bw * 8 / 1e9:.1f} ({bw / 1e9:.2f} GB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--reps", type=int, default=None,
                    help="placements per scheduler (50), or hops per size with --gloo (40)")
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--stream-tasks", type=int, default=40,
                    help="models in the loaded stream placed after the idle-cluster runs")
    ap.add_argument("--load", type=float, default=0.8, help="the stream's load")
    ap.add_argument("--gloo", action="store_true", help="the gloo hop benchmark instead")
    ap.add_argument("--gap-ms", type=float, default=5.0,
                    help="--gloo: the sender's busy time before each send")
    args = ap.parse_args()
    if args.gloo:
        args.reps = args.reps or 40
        gloo(args)
    else:
        args.reps = args.reps or 50
        placement(args)


if __name__ == "__main__":
    main()
