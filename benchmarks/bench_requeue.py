#!/usr/bin/env python3
"""The daemon's resize sequence on the real cluster, timed, with `StartTime=now` and `now+1`.

    SLURM_CONF=... .venv/bin/python benchmarks/bench_requeue.py [-n 10] [--start now now+1 none]

Each run: a 1-GPU `sleep` job is submitted (top priority, its own name), waited for RUNNING,
then `scontrol requeuehold` → wait for PENDING → `update TresPerNode=gres:gpu:2 StartTime=X` →
`release`, and the job is watched until it runs again or fails. With `StartTime=now` a job
that restarts on the same node within the second of its requeue is killed by slurmctld
("Killing non-startable batch JobId=…: Job credential revoked": slurmd revoked the job's
credential at the requeue, to the second, and refuses one created in that second); `now+1`
is what slurm_rl/daemon/resize.py uses. Prints, per StartTime, the runs killed and the time
from the requeue to RUNNING again. Every job is cancelled at the end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid


def _state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _wait(job: str, states: tuple[str, ...], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = _state(job)
        if state in states:
            return state
        time.sleep(0.05)
    return state


def one_run(name: str, start: str) -> tuple[bool, float | None, str]:
    """(killed, seconds from requeue to RUNNING again, job id)."""
    out = subprocess.run(["sbatch", "--parsable", "--priority=1000000", "-J", name,
                          "--gres=gpu:1", "-t", "3", "-o", "/dev/null", "--wrap", "sleep 120"],
                         capture_output=True, text=True, check=True)
    job = out.stdout.strip().split(";")[0]
    if _wait(job, ("RUNNING",), 120) != "RUNNING":
        return False, None, job
    time.sleep(1.0)
    t0 = time.monotonic()
    subprocess.run(["scontrol", "requeuehold", job], check=True)
    _wait(job, ("PENDING",), 30)
    begin = [] if start == "none" else [f"StartTime={start}"]
    subprocess.run(["scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:2", *begin],
                   check=True)
    subprocess.run(["scontrol", "release", job], check=True)
    state = _wait(job, ("RUNNING", "FAILED", "COMPLETED", "CANCELLED"), 300)
    gap = time.monotonic() - t0 if state == "RUNNING" else None
    time.sleep(1.5)  # a killed launch shows as FAILED shortly after RUNNING
    killed = _state(job) == "FAILED"
    return killed, None if killed else gap, job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="runs per StartTime (default 10)")
    ap.add_argument("--start", nargs="+", default=["now", "now+1"],
                    help="StartTime values to try; 'none' leaves StartTime out (Slurm's own "
                         "begin time after a requeue applies)")
    args = ap.parse_args()
    name = f"bench-requeue-{uuid.uuid4().hex[:8]}"
    try:
        for start in args.start:
            killed, gaps = 0, []
            for _ in range(args.n):
                k, gap, job = one_run(name, start)
                killed += k
                gaps += [gap] if gap is not None else []
                subprocess.run(["scancel", job], check=False)
            line = f"StartTime={start}: {killed} of {args.n} killed at relaunch"
            if gaps:
                line += (f"; requeue -> RUNNING median {statistics.median(gaps):.2f} s "
                         f"(min {min(gaps):.2f}, max {max(gaps):.2f}, n={len(gaps)})")
            print(line, flush=True)
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
