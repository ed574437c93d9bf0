"""Sim-to-real check: the same small trace on the real test cluster and in the simulator.

A window of an ITP trace is time-compressed into `sleep` jobs (a few minutes in all, heavy
contention on 4 nodes x 4 GPUs), submitted with rlsbatch at their compressed submit times while
`slurm-rl daemon` runs with a policy, and read back from Slurm (start/end, 1 s resolution). The
simulator then runs the same jobs with the real submit times, the daemon's cycle as its policy
tick, and the jobs' Slurm time limits for backfill. Reported: Kendall tau-b of start times and
the per-job JCT error, per policy. Needs the test cluster (docker/cluster up, SLURM_CONF set).

    .venv/bin/python benchmarks/sim_to_real.py --policies fifo,deadline --out docs/sim-to-real.md
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.trace import TraceJob
from slurm_rl.slurm.parse import parse_time

BIN = Path(sys.executable).parent
NODES, GPUS_PER_NODE = 4, 4
TIME_LIMIT_MIN = 5


@dataclass(frozen=True, kw_only=True)
class ReplayJob:
    name: str
    submit_offset: float
    seconds: int
    gpus: int
    deadline_offset: float | None


def compressed_workload(trace: str, start: int, count: int, median_s: float, min_s: int,
                        max_s: int, load: float) -> list[ReplayJob]:
    """`count` jobs from `start` of an ITP deadline trace, compressed to a short replay.

    Durations are scaled so their median is `median_s` (clamped to min_s..max_s); deadlines keep
    their slack relative to duration; submit times are spread so that the offered load on the
    16 GPUs is `load` (>1: a queue builds up).
    """
    path = resources.files("slurm_rl") / "data" / "traces" / trace
    with path.open() as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: int(r["submission_time"]))
    rows = rows[start:start + count]
    durations = sorted(int(r["duration"]) for r in rows)
    scale = median_s / durations[len(durations) // 2]
    jobs = []
    for r in rows:
        seconds = int(min(max_s, max(min_s, round(int(r["duration"]) * scale))))
        gpus = min(int(r["num_gpu"]), NODES * GPUS_PER_NODE)
        if gpus > GPUS_PER_NODE:
            gpus = math.ceil(gpus / GPUS_PER_NODE) * GPUS_PER_NODE
        slack = (int(r["deadline"]) - int(r["submission_time"])) / max(1, int(r["duration"]))
        jobs.append(ReplayJob(name=r["job_id"][:8], submit_offset=float(r["submission_time"]),
                              seconds=seconds, gpus=gpus, deadline_offset=slack * seconds))
    work = sum(j.seconds * j.gpus for j in jobs)
    span = work / (load * NODES * GPUS_PER_NODE)
    t0, t1 = jobs[0].submit_offset, jobs[-1].submit_offset
    return [
        ReplayJob(name=j.name, submit_offset=(j.submit_offset - t0) / max(1.0, t1 - t0) * span,
                  seconds=j.seconds, gpus=j.gpus,
                  deadline_offset=None if j.deadline_offset is None
                  else max(j.seconds + 5.0, j.deadline_offset))
        for j in jobs
    ]


@dataclass(frozen=True, kw_only=True)
class RealJob:
    job: ReplayJob
    job_id: str
    submit: float
    start: float
    end: float
    deadline: float | None


def _gres_args(gpus: int) -> list[str]:
    if gpus <= GPUS_PER_NODE:
        return [f"--gres=gpu:{gpus}"]
    return [f"--gres=gpu:{GPUS_PER_NODE}", f"--nodes={gpus // GPUS_PER_NODE}"]


def run_real(jobs: list[ReplayJob], policy: str, prefix: str) -> list[RealJob]:
    workdir = Path(tempfile.mkdtemp(prefix="sim2real-"))
    db = workdir / "d.db"
    subprocess.run([BIN / "slurm-rl", "db", "upgrade", "--db", db], check=True,
                   capture_output=True)
    log = (workdir / "daemon.log").open("w")
    daemon = subprocess.Popen([BIN / "slurm-rl", "daemon", "--policy", policy, "--interval", "1",
                               "--db", db, "--only-name-prefix", prefix],
                              stdout=log, stderr=subprocess.STDOUT)
    submitted: list[tuple[ReplayJob, str, float | None, float]] = []
    t0 = time.time() + 2.0
    try:
        for j in jobs:
            delay = t0 + j.submit_offset - time.time()
            if delay > 0:
                time.sleep(delay)
            args = [str(BIN / "rlsbatch"), "--parsable", "-J", f"{prefix}{j.name}",
                    "-t", str(TIME_LIMIT_MIN), "-o", "/dev/null", *_gres_args(j.gpus)]
            deadline = None
            if j.deadline_offset is not None and policy != "fifo":
                left = max(1, round(t0 + j.submit_offset + j.deadline_offset - time.time()))
                deadline = time.time() + left
                args += ["--rl-deadline", f"+{left}s"]
            args += ["--wrap", f"sleep {j.seconds}"]
            before = time.time()
            out = subprocess.run(args, capture_output=True, text=True, check=True)
            # slurmctld stamps the job while rlsbatch runs: take the midpoint, not squeue's
            # whole-second SubmitTime, so that the simulator's policy ticks do not all land
            # exactly on arrivals.
            submitted.append((j, out.stdout.strip().split(";")[0], deadline,
                              (before + time.time()) / 2))
        ids = [s[1] for s in submitted]
        while True:
            rows = _squeue(ids)
            if len(rows) == len(ids) and all(r[0] == "COMPLETED" for r in rows.values()):
                break
            bad = [i for i, r in rows.items() if r[0] in ("FAILED", "CANCELLED", "TIMEOUT")]
            if bad:
                raise SystemExit(f"jobs {bad} did not complete; see {workdir}")
            time.sleep(2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        log.close()
    rows = _squeue(ids)
    return [RealJob(job=j, job_id=jid, submit=at,
                    start=_must(parse_time(rows[jid][2])), end=_must(parse_time(rows[jid][3])),
                    deadline=deadline)
            for j, jid, deadline, at in submitted]


def _must(x: float | None) -> float:
    assert x is not None
    return x


def _squeue(ids: list[str]) -> dict[str, list[str]]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o",
                          "%i|%T|%V|%S|%e"], capture_output=True, text=True, check=True)
    return {line.split("|")[0]: line.split("|")[1:] for line in out.stdout.splitlines()}


def run_sim(real: list[RealJob], policy: str, overhead_s: float) -> dict[str, tuple[float, float]]:
    from slurm_rl import policies

    t0 = min(r.submit for r in real)
    trace = [
        TraceJob(id=r.job_id, submit=r.submit - t0, duration=r.job.seconds + overhead_s,
                 gpus=r.job.gpus, time_limit_s=TIME_LIMIT_MIN * 60.0,
                 deadline=None if r.deadline is None else r.deadline - t0)
        for r in real
    ]
    cfg = EngineConfig(nodes=NODES, gpus_per_node=GPUS_PER_NODE, tick_s=1.0,
                       decide_on_events=False, conservative=True,
                       time_limit=TimeLimitEstimate(fixed_s=TIME_LIMIT_MIN * 60.0))
    result = Simulator(trace, policies.make(policy), cfg).run()
    return {j.job_id: (j.start + t0, j.end + t0) for j in result.jobs}


def kendall_tau_b(xs: list[float], ys: list[float]) -> float:
    conc = disc = tx = ty = 0
    n = len(xs)
    for i in range(n):
        for k in range(i + 1, n):
            dx, dy = xs[i] - xs[k], ys[i] - ys[k]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else 1.0


def compare(real: list[RealJob], sim: dict[str, tuple[float, float]]) -> dict[str, float]:
    # Slurm's timestamps are whole seconds: compare start times at that resolution.
    rs = [r.start for r in real]
    ss = [float(math.floor(sim[r.job_id][0])) for r in real]
    errors = []
    for r in real:
        real_jct = r.end - r.submit
        sim_jct = sim[r.job_id][1] - r.submit
        errors.append(abs(sim_jct - real_jct) / real_jct)
    errors.sort()
    return {"jobs": len(real), "kendall_tau_b": round(kendall_tau_b(rs, ss), 4),
            "mean_jct_error": round(sum(errors) / len(errors), 4),
            "p90_jct_error": round(errors[int(0.9 * (len(errors) - 1))], 4),
            "mean_real_jct_s": round(sum(r.end - r.submit for r in real) / len(real), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="fifo,deadline")
    ap.add_argument("--trace", default="itp-deadline-cluster10.csv")
    ap.add_argument("--start", type=int, default=100)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--median-s", type=float, default=12.0)
    ap.add_argument("--min-s", type=int, default=4)
    ap.add_argument("--max-s", type=int, default=45)
    ap.add_argument("--load", type=float, default=2.0)
    ap.add_argument("--overhead-s", type=float, default=0.0,
                    help="launch/teardown time added to each job's sleep in the simulator")
    ap.add_argument("--out", type=Path, help="write a Markdown report here")
    ap.add_argument("--raw", type=Path, help="write real and simulated times (JSON) here")
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("set SLURM_CONF (eval \"$(docker/cluster env)\")")
    jobs = compressed_workload(args.trace, args.start, args.count, args.median_s, args.min_s,
                               args.max_s, args.load)
    results, raw = {}, {}
    for policy in args.policies.split(","):
        print(f"== {policy}: replaying {len(jobs)} jobs on the test cluster", flush=True)
        real = run_real(jobs, policy, prefix=f"s2r{os.getpid()}-{policy}-")
        sim = run_sim(real, policy, args.overhead_s)
        results[policy] = compare(real, sim)
        raw[policy] = [{"job_id": r.job_id, "gpus": r.job.gpus, "sleep": r.job.seconds,
                        "submit": r.submit, "deadline": r.deadline,
                        "real_start": r.start, "real_end": r.end,
                        "sim_start": sim[r.job_id][0], "sim_end": sim[r.job_id][1]}
                       for r in real]
        print(json.dumps({"policy": policy, **results[policy]}), flush=True)
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    if args.out:
        cmd = "python benchmarks/sim_to_real.py " + " ".join(sys.argv[1:])
        lines = ["| policy | jobs | Kendall τ-b (start) | mean JCT error | p90 JCT error "
                 "| mean real JCT |", "|---|---|---|---|---|---|"]
        for p, r in results.items():
            lines.append(f"| {p} | {r['jobs']} | {r['kendall_tau_b']:.3f} | "
                         f"{100 * r['mean_jct_error']:.1f} % | {100 * r['p90_jct_error']:.1f} % "
                         f"| {r['mean_real_jct_s']:.0f} s |")
        args.out.write_text("\n".join(lines) + f"\n\nCommand: `{cmd}`\n")


if __name__ == "__main__":
    main()
