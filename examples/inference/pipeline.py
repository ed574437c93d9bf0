"""One Slurm task of a pipelined inference job (run by pipeline.sbatch through srun).

Each task builds the same chain model (torch, CPU, random weights, seed 0), learns which node
every task runs on, and runs the plan's stages that are on its own node; activations go to the
next stage's task with torch.distributed (gloo). Requests are sent one at a time, so each
measured latency is what the plan predicts: one request through the split model, transfers
included. The task that runs the first stage prints the figures, and for comparison the same
requests run with every layer on its own task (compute only, no transfer).

With --breakdown every task also records, per request, when each of its stages received its
input, finished computing (wall and thread CPU time) and handed its output on; the head task
prints a table of the parts (per-stage compute, each hop with its tensor size, the completion
message, the rest) next to what the plan predicts for each, the first request apart (warm-up),
and every task's thread counts. Hops are timed from the sender's clock to the receiver's, so
they are printed only when all tasks run on one kernel (the same boot id: one monotonic clock,
as for the test cluster's nodes, processes or containers on one host).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from slurm_rl.inference import models
from slurm_rl.inference.profiler import _leaves

Stamp = dict[str, Any]
QUIET_DELAY_S = 5e-4
"""A request during which the threads of all tasks together waited less than this for a core
ran as on an idle host (what the plan predicts)."""


def run_delay() -> float:
    """Seconds this process's threads have so far spent runnable but waiting for a core (the
    run-queue delay in /proc/self/task/*/schedstat); NaN where the kernel does not say."""
    total = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return float("nan")
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except FileNotFoundError:  # a thread that just ended
            continue
        except (OSError, ValueError, IndexError):
            return float("nan")
    return total / 1e9


def run_request(rank: int, stages: list[tuple[int, int, int]], layers: list[torch.nn.Module],
                shapes: list[tuple[int, ...]], x: torch.Tensor, done: torch.Tensor) -> Stamp:
    """One request through the pipeline; this task's timestamps (perf_counter seconds).

    A stage hands its output on with `isend` and goes on (to receive the completion message,
    or its next stage's input); the sends are waited for once the request is done. A blocking
    `send` would hold the task until gloo reports the send complete, which on the docker test
    cluster came 5-6 ms after the receiver already had the data (docs/inference.md)."""
    head, tail = stages[0][0], stages[-1][0]
    delay0, proc0 = run_delay(), time.process_time()
    st: Stamp = {"t0": time.perf_counter(), "stages": {}}
    sends = []
    act = x
    for k, (r, first, last) in enumerate(stages):
        if rank != r:
            continue
        prev = stages[k - 1][0] if k else r
        if prev != r:
            act = torch.empty(shapes[first - 1])
            dist.recv(act, src=prev)
        t_in, c_in = time.perf_counter(), time.thread_time()
        for i in range(first, last + 1):
            act = layers[i](act)
        t_out, c_out = time.perf_counter(), time.thread_time()
        nxt = stages[k + 1][0] if k + 1 < len(stages) else r
        if nxt != r:
            sends.append(dist.isend(act.contiguous(), dst=nxt))
        st["stages"][k] = (t_in, t_out, c_out - c_in)
    if tail != head:  # the head's clock times the whole request
        if rank == tail:
            st["done_sent"] = time.perf_counter()
            sends.append(dist.isend(done, dst=head))
        elif rank == head:
            dist.recv(done, src=tail)
    st["t_end"] = time.perf_counter()
    st["delay"] = run_delay() - delay0
    st["proc_cpu"] = time.process_time() - proc0  # every thread of this task
    for w in sends:
        if w is not None:
            w.wait()
    return st


def local_run(layers: list[torch.nn.Module], x: torch.Tensor,
              stages: list[tuple[int, int, int]]) -> tuple[float, list[float], float]:
    """Every layer on this task: (wall seconds, wall seconds of each stage's layers, CPU s)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    act, parts = x, []
    for _, first, last in stages:
        t = time.perf_counter()
        for i in range(first, last + 1):
            act = layers[i](act)
        parts.append(time.perf_counter() - t)
    return time.perf_counter() - t0, parts, time.thread_time() - c0


def _ms(v: list[float]) -> str:
    return f"{statistics.mean(v) * 1e3:.2f}" if v else "n/a"


def _med(v: list[float]) -> str:
    return f"{statistics.median(v) * 1e3:.2f}" if v else "n/a"


def breakdown(plan: dict[str, Any], stages: list[tuple[int, int, int]], shapes: list[Any],
              stamps: list[list[Stamp]], clocks: list[str], warmup: int,
              local: list[tuple[float, list[float], float]]) -> list[str]:
    """The head's table: measured mean (ms over the timed requests) against predicted."""
    head = stages[0][0]
    one_clock = len(set(clocks)) == 1
    pst = plan["stages"]
    reqs = range(warmup, len(stamps[head]))
    rows: list[tuple[str, str, str, str, str]] = []  # part, wall mean, median, CPU, predicted
    parts_sum = [0.0] * len(reqs)
    for k, (r, first, last) in enumerate(stages):
        wall = [stamps[r][q]["stages"][k][1] - stamps[r][q]["stages"][k][0] for q in reqs]
        cpu = [stamps[r][q]["stages"][k][2] for q in reqs]
        loc = [local[q][1][k] for q in reqs]
        parts_sum = [a + b for a, b in zip(parts_sum, wall, strict=True)]
        rows.append((f"stage {k} compute, task {r}, layers {first}-{last} (alone on one "
                     f"task: {_ms(loc)})", _ms(wall), _med(wall), _ms(cpu),
                     f"{(pst[k]['done_s'] - pst[k]['start_s']) * 1e3:.2f}"))
        if k + 1 < len(stages) and stages[k + 1][0] != r:
            nr = stages[k + 1][0]
            nbytes = 4 * int(torch.Size(shapes[last]).numel())
            hop = [stamps[nr][q]["stages"][k + 1][0] - stamps[r][q]["stages"][k][1]
                   for q in reqs] if one_clock else []
            parts_sum = [a + b for a, b in zip(parts_sum, hop or [0.0] * len(reqs), strict=True)]
            rows.append((f"hop {r}->{nr}, {nbytes} B", _ms(hop),
                         _med(hop), "",
                         f"{(pst[k + 1]['start_s'] - pst[k]['done_s']) * 1e3:.2f}"))
    tail = stages[-1][0]
    if tail != head:
        dn = [stamps[head][q]["t_end"] - stamps[tail][q]["done_sent"] for q in reqs
              ] if one_clock else []
        parts_sum = [a + b for a, b in zip(parts_sum, dn or [0.0] * len(reqs), strict=True)]
        rows.append((f"completion message {tail}->{head}, 4 B (the link latency)", _ms(dn),
                     _med(dn), "", f"{plan.get('link_latency_s', 0.0) * 1e3:.2f}"))
    total = [stamps[head][q]["t_end"] - stamps[head][q]["t0"] for q in reqs]
    rest = [t - s for t, s in zip(total, parts_sum, strict=True)] if one_clock else []
    rows.append(("rest: Python between parts, clock skew", _ms(rest), _med(rest), "", "0"))
    rows.append((f"total, {len(reqs)} requests", _ms(total), _med(total), "",
                 f"{predicted(plan, stages) * 1e3:.2f}"))
    delay = [sum(stamps[r][q]["delay"] for r in range(len(stamps))) for q in reqs]
    rows.append(("waiting for a core: run-queue delay, all threads of all tasks (within the "
                 "parts above)", _ms(delay), _med(delay), "", "0"))
    cpu = [sum(stamps[r][q]["stages"][k][2] for k, (r, _, _) in enumerate(stages))
           for q in reqs]
    calm = [i for i, d in enumerate(delay) if d < QUIET_DELAY_S]
    rows.append((f"uncontended requests (run-queue delay < {QUIET_DELAY_S * 1e3:g} ms): "
                 f"{len(calm)} of {len(total)}; CPU: their stages' compute",
                 _ms([total[i] for i in calm]), _med([total[i] for i in calm]),
                 _ms([cpu[i] for i in calm]), f"{predicted(plan, stages) * 1e3:.2f}"))
    req0 = stamps[head][0]
    rows.append(("first request (warm-up, not in the mean)",
                 f"{(req0['t_end'] - req0['t0']) * 1e3:.2f}", "", "", ""))
    alone = [local[q][0] for q in reqs]
    rows.append(("all layers on one task, no transfer", _ms(alone), _med(alone),
                 _ms([local[q][2] for q in reqs]), ""))
    out = ["| part | measured mean ms | median ms | CPU mean ms | predicted ms |",
           "|---|---|---|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def predicted(plan: dict[str, Any], stages: list[tuple[int, int, int]]) -> float:
    """What the head's clock should read: the plan's latency (the last layer done) plus, when
    the last stage runs on another task, the completion message back (one link latency)."""
    back = plan.get("link_latency_s", 0.0) if stages[-1][0] != stages[0][0] else 0.0
    return float(plan["predicted_latency_s"] + back)


def task_info(default_threads: int) -> dict[str, Any]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = socket.gethostname()
    return {"host": socket.gethostname(), "boot": boot,
            "node": os.environ.get("SLURMD_NODENAME", "?"),
            "torch_threads": torch.get_num_threads(), "default_threads": default_threads,
            "interop_threads": torch.get_num_interop_threads(),
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "slurm_cpus_per_task": os.environ.get("SLURM_CPUS_PER_TASK", "unset"),
            "slurm_cpus_on_node": os.environ.get("SLURM_CPUS_ON_NODE", "?"),
            "loadavg": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true",
                    help="print where the time goes (a table; docs/inference.md)")
    args = ap.parse_args()
    with open(args.plan) as fh:
        plan = json.load(fh)
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    default_threads = torch.get_num_threads()
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
    head = stages[0][0]
    mine: list[Stamp] = []
    done = torch.zeros(1)
    with torch.no_grad():
        for _ in range(args.warmup + args.requests):
            dist.barrier()
            mine.append(run_request(rank, stages, layers, shapes, x, done))
    local: list[tuple[float, list[float], float]] = []  # every layer on the head's task
    if rank == head:
        with torch.no_grad():
            local = [local_run(layers, x, stages) for _ in range(args.warmup + args.requests)]
    stamps: list[Any] = [None] * world
    infos: list[Any] = [None] * world
    if args.breakdown:
        dist.all_gather_object(stamps, mine)
        dist.all_gather_object(infos, task_info(default_threads))
    if rank == head:
        lat = [s["t_end"] - s["t0"] for s in mine[args.warmup:]]
        loc = [t for t, _, _ in local[args.warmup:]]
        used = sorted({r for r, _, _ in stages})
        pred = predicted(plan, stages)
        mean = statistics.mean(lat)
        print(f"pipeline {args.model}: {len(stages)} stages on tasks {used} of {world}; "
              f"measured mean {mean * 1e3:.2f} ms, median {statistics.median(lat) * 1e3:.2f} ms "
              f"over {len(lat)} requests; predicted {plan['predicted_latency_s'] * 1e3:.2f} ms "
              f"+ completion message {(pred - plan['predicted_latency_s']) * 1e3:.2f} ms = "
              f"{pred * 1e3:.2f} ms; "
              f"measured/predicted {mean / pred:.3f}; all layers on one task, no transfer: "
              f"{statistics.mean(loc) * 1e3:.2f} ms", flush=True)
        if args.breakdown:
            for line in breakdown(plan, stages, shapes, stamps, [i["boot"] for i in infos],
                                  args.warmup, local):
                print(line)
            for r, i in enumerate(infos):
                busy = statistics.mean(stamps[r][q]["proc_cpu"]
                                       for q in range(args.warmup, len(stamps[r])))
                print(f"task {r} on {i['node']} ({i['host']}): CPU {busy * 1e3:.2f} ms per "
                      f"request, all threads; torch threads "
                      f"{i['torch_threads']} (torch's default here {i['default_threads']}; "
                      f"interop {i['interop_threads']}), "
                      f"{i['cpus_allowed']} CPUs allowed, SLURM_CPUS_PER_TASK "
                      f"{i['slurm_cpus_per_task']}, SLURM_CPUS_ON_NODE "
                      f"{i['slurm_cpus_on_node']}; host load {i['loadavg']:.2f}")
            print(flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
