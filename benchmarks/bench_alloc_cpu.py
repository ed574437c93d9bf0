#!/usr/bin/env python3
"""Utilisation of the CPUs Slurm allocated to deadline-only jobs (a benchmark, not a test).

    SLURM_CONF=... .venv/bin/python benchmarks/bench_alloc_cpu.py [-n 2] [--busy 1] [--seconds 8]

Submits N deadline-only jobs (`rlsbatch --rl-deadline +2h --rl-model resnet50 --rl-steps S`,
no GPU or CPU request), runs one `slurm-rl daemon --once` cycle that sizes and releases them
(daemon/sizing.py: GPUs from the deadline policy, [sizing] CPUs per GPU), and while they run
samples the CPU time of each job's processes from /proc (the processes whose environment holds
its SLURM_JOB_ID: utime + stime + children's). Each job runs `--busy` processes that spin for
`--seconds` (a stand-in for a data loader), at nice 19. Prints per job the GPUs and CPUs it
got and CPU-seconds used / (seconds sampled × CPUs allocated).

Why /proc and not Slurm: the test cluster has no accounting (AccountingStorageType=none,
JobAcctGatherType=none), so `sacct` says "Slurm accounting storage is disabled" and `sstat`
has no step data. The jobs' processes run on this host (native launcher; docker containers'
processes are in the host's /proc too), and reading other users' /proc/PID/environ needs
root. All jobs are cancelled at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")


def job_cpu_seconds(job_ids: set[str]) -> dict[str, float]:
    """CPU seconds of the live processes of each job (its own and its reaped children's)."""
    out = dict.fromkeys(job_ids, 0.0)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone, or not ours to read
        job = next((e[13:].decode() for e in env if e.startswith(b"SLURM_JOB_ID=")), None)
        if job not in job_ids:
            continue
        fields = stat.rpartition(")")[2].split()
        # after the command: state(0) ... utime(11) stime(12) cutime(13) cstime(14)
        out[job] += sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    return out


def squeue(ids: list[str]) -> dict[str, list[str]]:
    text = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o",
                           "%i|%T|%b|%C|%D"], capture_output=True, text=True).stdout
    return {row[0]: row[1:] for row in (line.split("|") for line in text.splitlines())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2, help="jobs (default 2)")
    ap.add_argument("--busy", type=int, default=1, help="spinning processes per job (default 1)")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long they spin")
    args = ap.parse_args()
    name = f"bench-cpu-{uuid.uuid4().hex[:8]}"
    ids: list[str] = []
    spin = f"import time\nend = time.time() + {args.seconds}\nwhile time.time() < end: pass\n"
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job.sh"
        # one process per busy "thread" (threads of one CPython process share the GIL)
        script.write_text("#!/bin/sh\n" + f"nice -n 19 python3 -c '{spin}' &\n" * args.busy
                          + "wait\n")
        db = Path(tmp) / "daemon.db"
        env = {**os.environ, "SLURM_RL_DB": str(db)}
        try:
            for _ in range(args.n):
                proc = subprocess.run(
                    [str(BIN / "rlsbatch"), "-J", name, "-o", "/dev/null", "-t", "5",
                     "--rl-deadline", "+2h", "--rl-model", "resnet50", "--rl-steps", "40000",
                     str(script)], capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    raise SystemExit(f"rlsbatch failed: {proc.stderr.strip()}")
                ids.append(proc.stdout.split()[-1])
            daemon = subprocess.run([str(BIN / "slurm-rl"), "daemon", "--once", "--db",
                                     str(db), "--only-name-prefix", name],
                                    capture_output=True, text=True)
            if daemon.returncode != 0:
                raise SystemExit(f"slurm-rl daemon --once failed: {daemon.stderr.strip()}")
            first: dict[str, tuple[float, float]] = {}
            last: dict[str, tuple[float, float]] = {}
            shape: dict[str, list[str]] = {}
            stop = time.monotonic() + args.seconds + 60
            while time.monotonic() < stop:
                rows = squeue(ids)
                running = {j for j, r in rows.items() if r[0] == "RUNNING"}
                shape.update({j: rows[j] for j in running})
                now = time.monotonic()
                for job, cpu in job_cpu_seconds(running).items():
                    if cpu > 0:
                        first.setdefault(job, (now, cpu))
                        last[job] = (now, cpu)
                if first and not running:
                    break
                time.sleep(0.5)
        finally:
            subprocess.run(["scancel", *ids], capture_output=True)
    print(f"{args.n} deadline-only jobs, {args.busy} busy process(es) each for {args.seconds:g} s "
          f"(nice 19), host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for job in ids:
        if job not in first or job not in shape:
            print(f"job {job}: never seen running with processes")
            continue
        (t0, c0), (t1, c1) = first[job], last[job]
        _, tres, cpus, nodes = shape[job]
        wall = t1 - t0
        util = (c1 - c0) / (wall * int(cpus)) if wall > 0 else float("nan")
        print(f"job {job}: {tres} on {nodes} node(s), {cpus} CPUs allocated; "
              f"{c1 - c0:.1f} CPU-s in {wall:.1f} s sampled: {100 * util:.0f} % of the "
              "allocated CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
