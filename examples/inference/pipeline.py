"""One Slurm task of a pipelined inference job (run by pipeline.sbatch through srun).

Each task builds the same chain model (torch, CPU, random weights, seed 0), learns which node
every task runs on, and runs the plan's stages that are on its own node; activations go to the
next stage's task with torch.distributed (gloo). Requests are sent one at a time, so each
measured latency is what the plan predicts: one request through the split model, transfers
included. The task that runs the first stage prints the figures, and for comparison the same
requests run with every layer on its own task (compute only, no transfer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from slurm_rl.inference import models
from slurm_rl.inference.profiler import _leaves


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    with open(args.plan) as fh:
        plan = json.load(fh)
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    torch.set_num_threads(1)  # the CPU profile was calibrated on one thread
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://{os.environ['MASTER_ADDR']}:"
                                        f"{os.environ['MASTER_PORT']}")
    names: list[str] = [""] * world
    dist.all_gather_object(names, os.environ["SLURMD_NODENAME"])
    rank_of = {n: r for r, n in enumerate(names)}
    stages = [(rank_of[s["node"]], s["first"], s["last"]) for s in plan["stages"]]

    torch.manual_seed(0)
    model, x = models.build(args.model, "cpu")
    layers = [m for _, m in _leaves(model)]
    meta, mx = models.build(args.model, "meta")
    shapes, h = [], mx
    with torch.no_grad():
        for m in (m for _, m in _leaves(meta)):
            h = m(h)
            shapes.append(tuple(h.shape))
    if stages[-1][2] != len(layers) - 1:
        raise SystemExit(f"the plan covers {stages[-1][2] + 1} layers, the model has "
                         f"{len(layers)}")
    head, tail = stages[0][0], stages[-1][0]
    lat: list[float] = []
    done = torch.zeros(1)
    with torch.no_grad():
        for req in range(args.warmup + args.requests):
            dist.barrier()
            t0 = time.perf_counter()
            act = x
            for k, (r, first, last) in enumerate(stages):
                prev = stages[k - 1][0] if k else r
                if rank == r:
                    if prev != r:
                        act = torch.empty(shapes[first - 1])
                        dist.recv(act, src=prev)
                    for i in range(first, last + 1):
                        act = layers[i](act)
                    nxt = stages[k + 1][0] if k + 1 < len(stages) else r
                    if nxt != r:
                        dist.send(act.contiguous(), dst=nxt)
            if tail != head:  # the head's clock times the whole request
                if rank == tail:
                    dist.send(done, dst=head)
                elif rank == head:
                    dist.recv(done, src=tail)
            if rank == head and req >= args.warmup:
                lat.append(time.perf_counter() - t0)
    local: list[float] = []  # the same requests with every layer on the head's task
    if rank == head:
        with torch.no_grad():
            for req in range(args.warmup + args.requests):
                t0 = time.perf_counter()
                act = x
                for m in layers:
                    act = m(act)
                if req >= args.warmup:
                    local.append(time.perf_counter() - t0)
        used = sorted({r for r, _, _ in stages})
        pred = plan["predicted_latency_s"]
        mean = statistics.mean(lat)
        print(f"pipeline {args.model}: {len(stages)} stages on tasks {used} of {world}; "
              f"measured mean {mean * 1e3:.2f} ms, median {statistics.median(lat) * 1e3:.2f} ms "
              f"over {len(lat)} requests; predicted {pred * 1e3:.2f} ms; "
              f"measured/predicted {mean / pred:.3f}; all layers on one task, no transfer: "
              f"{statistics.mean(local) * 1e3:.2f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
