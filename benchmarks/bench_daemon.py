"""Daemon cycle time at 10,000 pending jobs on the real test cluster.

Submits N held jobs through sbatch with rlsbatch's intent comment (parallel sbatch processes;
array tasks would pend as one record, so every job is submitted on its own), then runs daemon
cycles in-process with the chosen policy and prints each cycle's time split into
poll / persist / decide / act: the first cycle (every job new: 10,000 rows, 10,000 decision
entries, 10,000 SiteFactor updates) and steady-state cycles, alternately quiet and with one new
job with a deadline 15 minutes away (held, as all of them: `deadline` ranks held jobs
best-effort, so that job is usually the one update). The policy is wrapped and the process set
up as `slurm-rl daemon` does (daemon/guarded.py, daemon/collector.py). Cancels every job it
submitted at the end.

    .venv/bin/python benchmarks/bench_daemon.py [--jobs 10000] [--steady 6] [--workers 6]

`--keep` leaves the jobs in the queue and prints their name; `--name NAME` then cycles over them
again (submitting only what is missing), so that a change can be measured without submitting
10,000 jobs anew. `--profile FILE` writes a cProfile of the steady-state cycles (pstats format).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.config import Config
from slurm_rl.core import Intent
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.cli import policy_spec, scope_rule
from slurm_rl.daemon.collector import collect_less
from slurm_rl.daemon.loop import Daemon
from slurm_rl.daemon.report import CycleReport
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import SubprocessRunner
from slurm_rl.submit.intent import compose_comment

REPO = Path(__file__).resolve().parents[1]


def cluster_env() -> None:
    if "SLURM_CONF" in os.environ:
        return
    out = subprocess.run([str(REPO / "docker" / "cluster"), "env"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        os.environ[key] = value.strip("'\"")


def intent_for(i: int, now: float, rng: random.Random) -> Intent:
    if i % 3 == 0:
        return Intent(deadline=now + rng.randint(3600, 86400))
    if i % 5 == 0:
        return Intent(gpus_min=1, gpus_max=4)
    return Intent()


def sbatch(name: str, comment: str, gpus: int) -> str:
    for attempt in range(5):
        out = subprocess.run(
            ["sbatch", "--parsable", "-H", "-J", name, f"--gres=gpu:{gpus}", "-t", "10",
             "-o", "/dev/null", "-e", "/dev/null", f"--comment={comment}", "--wrap", "true"],
            capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.strip()
        if "Unable to contact" not in out.stderr:
            break
        time.sleep(2 ** attempt)  # slurmctld busy or restarting: wait and retry
    raise RuntimeError(f"sbatch failed: {out.stderr.strip()}")


def submit_all(name: str, n: int, workers: int) -> float:
    rng = random.Random(1)
    now = time.time()
    args = [(name, compose_comment("", intent_for(i, now, rng)), 1 + i % 4) for i in range(n)]
    start = time.perf_counter()
    done = 0
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(lambda a: sbatch(*a), args):
            done += 1
            if done % 1000 == 0:
                print(f"  submitted {done}/{n} ({time.perf_counter() - start:.0f}s)",
                      flush=True)
    return time.perf_counter() - start


def count_named(runner: SubprocessRunner, name: str) -> int:
    """Jobs named `name` that squeue shows pending."""
    out = runner.run(["squeue", "-h", "-t", "PD", "-n", name, "-o", "%i"])
    return len(out.stdout.splitlines())


@dataclass(frozen=True, kw_only=True)
class Timed:
    label: str
    report: CycleReport
    wall_s: float
    """The whole cycle, the steps after act (restarts, notes, retention) included."""
    cpu_s: float
    """CPU time of the daemon's own process in the cycle (its child processes, squeue, sinfo
    and scontrol, and slurmctld not counted)."""


def row(t: Timed) -> str:
    r, p = t.report, t.report.timing
    return (f"{t.label:<14}{r.managed_pending:>7}{r.jobs_updated:>8}{r.commands:>6}"
            f"{p.poll_s:>8.3f}{p.persist_s:>9.3f}{p.decide_s:>8.3f}{p.act_s:>8.3f}"
            f"{p.total_s:>8.3f}{t.wall_s:>8.3f}{t.cpu_s:>7.3f}")


def timed(label: str, daemon: Daemon) -> Timed:
    wall, cpu = time.perf_counter(), time.process_time()
    report = daemon.cycle()
    return Timed(label=label, report=report, wall_s=time.perf_counter() - wall,
                 cpu_s=time.process_time() - cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--steady", type=int, default=6, help="steady-state cycles after the first")
    ap.add_argument("--workers", type=int, default=6, help="parallel sbatch processes")
    ap.add_argument("--policy", default="deadline")
    ap.add_argument("--name", help="reuse the jobs of this name (a run with --keep left them)")
    ap.add_argument("--keep", action="store_true", help="leave the jobs in the queue")
    ap.add_argument("--profile", metavar="FILE", help="cProfile of the steady-state cycles")
    args = ap.parse_args()
    cluster_env()
    name = args.name or f"bench-{uuid.uuid4().hex[:8]}"
    profile = cProfile.Profile() if args.profile else None
    tmp = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    engine = make_engine(tmp / "bench.db")
    upgrade(engine)
    runner = SubprocessRunner()
    daemon = Daemon(adapter=SlurmAdapter(runner, scope=scope_rule(Config(), name)),
                    executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                    policy=policy_spec(Config(), args.policy, []).build())
    collect_less()  # as `slurm-rl daemon` does
    reports: list[Timed] = []
    try:
        missing = args.jobs - (count_named(runner, name) if args.name else 0)
        if missing > 0:
            print(f"submitting {missing} held jobs named {name} ({args.workers} in parallel)")
            took = submit_all(name, missing, args.workers)
            print(f"submitted in {took:.0f}s ({1000 * took / missing:.1f} ms/job)")
        squeue = runner.run(["squeue", "-h", "-a", "-t", "all", "-o", "%i"])
        print(f"squeue shows {len(squeue.stdout.splitlines())} jobs in all "
              f"(a bare squeue -o %i: {squeue.duration_s:.3f}s)")
        reports.append(timed("first", daemon))
        for k in range(args.steady):
            urgent = k % 2 == 1
            if urgent:
                sbatch(name, compose_comment("", Intent(deadline=time.time() + 900)), 1)
            if profile is not None:
                profile.enable()
            reports.append(timed("new urgent" if urgent else "quiet", daemon))
            if profile is not None:
                profile.disable()
    finally:
        if args.keep:
            print(f"jobs left in the queue: --name {name} (scancel -n {name})")
        else:
            subprocess.run(["scancel", "-n", name], check=False)
        engine.dispose()
    if profile is not None:
        profile.dump_stats(args.profile)
    print(f"\npolicy {args.policy}, {args.jobs} held jobs, SiteFactor actuation; seconds "
          "(total: the four steps; wall: the whole cycle; cpu: the daemon process's own CPU)")
    print(f"host load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'cycle':<14}{'pending':>7}{'updates':>8}{'cmds':>6}{'poll':>8}{'persist':>9}"
          f"{'decide':>8}{'act':>8}{'total':>8}{'wall':>8}{'cpu':>7}")
    for t in reports:
        print(row(t))
    steady = [t for t in reports if t.label != "first"]
    if steady:
        med = {k: statistics.median(getattr(t.report.timing, k) for t in steady)
               for k in ("poll_s", "persist_s", "decide_s", "act_s", "total_s")}
        wall = statistics.median(t.wall_s for t in steady)
        cpu = statistics.median(t.cpu_s for t in steady)
        print(f"{'steady median':<14}{'':>21}{med['poll_s']:>8.3f}{med['persist_s']:>9.3f}"
              f"{med['decide_s']:>8.3f}{med['act_s']:>8.3f}{med['total_s']:>8.3f}"
              f"{wall:>8.3f}{cpu:>7.3f}")
        print(f"steady-state target <= 0.25 s (wall): {'met' if wall <= 0.25 else 'NOT met'}")
    print(f"database: {tmp / 'bench.db'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
