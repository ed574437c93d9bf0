#!/usr/bin/env python3
"""What a live restart costs, step by step, on the cluster SLURM_CONF names; writes the
simulator's restart model (`slurm-rl simulate --restart-model FILE`).

    SLURM_CONF=... .venv/bin/python benchmarks/calibrate_restart.py -n 5 --size-mb 1 \\
        --grace-s 10 --out restart-1mb.toml

One job (`examples/checkpoint_job.py`, 1 GPU, `--requeue`, its log appended across runs) is
submitted and, once it runs, restarted `-n` times with the daemon's own preemption sequence
and code (slurm_rl/daemon/restart.py's Sequencer, its action log in a scratch database):
`scancel --signal=USR1 --full`, `--grace-s` later `scontrol requeuehold` and the wait for
PENDING, then `update JobId=… StartTime=now+1` + `release`. Each restart is timed, from the
job's own log lines (wall-clock times; the nodes share this host's clock) and from squeue
polls:

  checkpoint  signal -> the checkpoint written (its `checkpoint` line: the job's write + fsync)
  grace       signal -> requeuehold (the grace period used)
  requeue     requeuehold -> PENDING (slurmctld's requeue; GPUs free from here on)
  relaunch    release -> RUNNING again (on an empty cluster: the scheduling pass and the
              launch; queueing behind other jobs is the simulator's own business)
  restore     RUNNING -> restored (the job's `restored` line, after reading all its state)
  lost        steps done after the checkpoint and done again (in seconds of run time)

It prints the median, min and max of each over the runs, and `--out` writes a TOML file:
`[restart]` (what the simulator reads: `grace_s` = the grace used, `requeue_s` = requeue +
relaunch, the gap with the GPUs free and the job not yet able to run, `restore_s` = restore)
and `[measured]` (every figure of every run, for people; the simulator ignores it). A cluster
with other jobs on it makes `relaunch` a queueing time: the script says so when it sees any.
`--cold` drops this host's page cache (root) before each release, so that the restore reads
its state from the disk rather than from memory. The job is cancelled and its state file
removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_rl.config import ResizeConfig
from slurm_rl.core import JobId, JobState, JobView
from slurm_rl.daemon.restart import Sequencer
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import upsert_jobs
from slurm_rl.slurm.runner import SubprocessRunner

REPO = Path(__file__).resolve().parent.parent
JOB_SCRIPT = REPO / "examples" / "checkpoint_job.py"
STEPS = ("checkpoint", "grace", "requeue", "relaunch", "restore", "lost")
"""The measured steps, in the order of a restart (seconds each)."""
POLL_S = 0.02

@dataclass(frozen=True, kw_only=True)
class LogEvent:
    """One line of the job's log: `start`, `fresh`, `restored`, `step`, `checkpoint`,
    `term`, `done`; `step` for the ones that carry it."""

    event: str
    t: float
    step: int | None = None


def parse_log(text: str) -> tuple[LogEvent, ...]:
    """The job's log lines (examples/checkpoint_job.py), in order: `EVENT [key=value ...]
    t=TIME`, or `step=N t=TIME`; other lines (Slurm's, a line cut by a kill) are skipped."""
    out: list[LogEvent] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2 or not words[-1].startswith("t="):
            continue
        event = "step" if words[0].startswith("step=") else words[0]
        fields = dict(w.split("=", 1) for w in words if "=" in w)
        try:
            t = float(fields["t"])
            step = int(fields["step"]) if "step" in fields else None
        except ValueError:
            continue
        if not event.isalpha():
            continue
        out.append(LogEvent(event=event, t=t, step=step))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Restart:
    """One restart's figures, seconds (`lost`: seconds of run time done again)."""

    checkpoint: float
    grace: float
    requeue: float
    relaunch: float
    restore: float
    lost: float
    lost_steps: int


def measure(events: Sequence[LogEvent], *, signal_at: float, requeue_at: float,
            pending_at: float, release_at: float, running_at: float, step_s: float
            ) -> Restart:
    """One restart from the job's log and the times the driver saw (all wall clock)."""
    def first(kind: str, after: float) -> LogEvent:
        for e in events:
            if e.event == kind and e.t >= after:
                return e
        raise RuntimeError(f"no `{kind}` line in the job's log after t={after:.3f}")

    ckpt = first("checkpoint", signal_at)
    restored = first("restored", release_at)
    start = first("start", release_at)
    before = [e for e in events if e.step is not None and e.event in ("step", "term")
              and signal_at <= e.t <= pending_at]
    last_step = max((e.step for e in before if e.step is not None), default=ckpt.step or 0)
    assert restored.step is not None
    if restored.step != ckpt.step:
        raise RuntimeError(f"restored step {restored.step}, but the checkpoint held "
                           f"{ckpt.step}")
    lost_steps = max(0, last_step - restored.step)
    return Restart(checkpoint=ckpt.t - signal_at, grace=requeue_at - signal_at,
                   requeue=pending_at - requeue_at, relaunch=running_at - release_at,
                   restore=restored.t - min(running_at, start.t),
                   lost=lost_steps * step_s, lost_steps=lost_steps)


def table(runs: Sequence[Restart], size_mb: int) -> str:
    lines = [f"restart steps, {size_mb} MiB of state, n={len(runs)} (seconds)",
             f"{'step':<11} {'median':>8} {'min':>8} {'max':>8}"]
    for name in STEPS:
        values = [getattr(r, name) for r in runs]
        lines.append(f"{name:<11} {statistics.median(values):8.3f} {min(values):8.3f} "
                     f"{max(values):8.3f}")
    return "\n".join(lines)


def model_toml(runs: Sequence[Restart], *, size_mb: int, command: str) -> str:
    """The simulator's restart model ([restart]) and every figure ([measured])."""
    med = {name: statistics.median(getattr(r, name) for r in runs) for name in STEPS}
    gap = statistics.median(r.requeue + r.relaunch for r in runs)
    lines = [f"# {command}", "# Read by `slurm-rl simulate --restart-model FILE`: [restart] only.",
             "[restart]",
             f"grace_s = {med['grace']:.3f}",
             f"requeue_s = {gap:.3f}",
             f"restore_s = {med['restore']:.3f}", "",
             "[measured]", f"runs = {len(runs)}", f"size_mb = {size_mb}"]
    for name in STEPS:
        lines.append(f"{name}_s = [{', '.join(f'{getattr(r, name):.3f}' for r in runs)}]")
    return "\n".join(lines) + "\n"


# --- the cluster side ---------------------------------------------------------------------------

def _state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _wait_state(job: str, state: str, timeout_s: float) -> float:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if _state(job) == state:
            return time.time()
        time.sleep(POLL_S)
    raise RuntimeError(f"job {job} not {state} within {timeout_s:g} s (now {_state(job)!r})")


def _wait_line(log: Path, kind: str, after: float, timeout_s: float) -> LogEvent:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if log.exists():
            for e in parse_log(log.read_text(errors="replace")):
                if e.event == kind and e.t >= after:
                    return e
        time.sleep(POLL_S)
    raise RuntimeError(f"no `{kind}` line in {log} within {timeout_s:g} s")


def calibrate(*, n: int, size_mb: int, grace_s: float, step_s: float, run_s: float,
              workdir: Path, timeout_s: float, cold: bool = False, quiet: bool = False
              ) -> list[Restart]:
    others = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                            check=True).stdout.split()
    if others and not quiet:
        print(f"note: {len(others)} other job(s) on the cluster: `relaunch` includes queueing",
              file=sys.stderr)
    log, state = workdir / "job.log", workdir / "state"
    name = f"calibrate-restart-{uuid.uuid4().hex[:8]}"
    job = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--open-mode=append", "-o", str(log), "-J", name,
         "--gres=gpu:1", "-t", "60", "--wrap",
         f"exec {sys.executable} {JOB_SCRIPT} --state {state} --size-mb {size_mb} "
         f"--step-s {step_s}"], capture_output=True, text=True, check=True
    ).stdout.strip().split(";")[0]
    engine = make_engine(workdir / "actions.db")
    upgrade(engine)
    runs: list[Restart] = []
    try:
        with make_session_factory(engine)() as session:
            started = _wait_state(job, "RUNNING", timeout_s)
            view = JobView(id=JobId(job), state=JobState.RUNNING, submit_time=started,
                           start_time=started, gpus=1, name=name)
            upsert_jobs(session, [view], now=started)
            session.commit()
            seq = Sequencer(SubprocessRunner(), ResizeConfig(grace_s=grace_s),
                            sleep=lambda s: time.sleep(min(s, POLL_S)))
            _wait_line(log, "fresh", started - 5, timeout_s)
            for i in range(n):
                time.sleep(run_s)
                signal_at = time.time()
                if not seq.signal(session, ActionKind.PREEMPT_SIGNAL, JobId(job), i, None):
                    raise RuntimeError(f"scancel --signal failed for job {job}")
                _wait_line(log, "checkpoint", signal_at, timeout_s)
                time.sleep(max(0.0, signal_at + grace_s - time.time()))
                requeue_at = time.time()
                if not seq.requeue_held(session, ActionKind.PREEMPT_REQUEUE, view, i, None):
                    raise RuntimeError(f"job {job} not PENDING after requeuehold")
                pending_at = time.time()
                if cold:  # the restore reads from disk, not from the page cache
                    os.sync()
                    Path("/proc/sys/vm/drop_caches").write_text("1\n")
                release_at = time.time()
                if not seq.release(session, ActionKind.PREEMPT_REQUEUE, JobId(job), "", i,
                                   None):
                    raise RuntimeError(f"release of job {job} failed")
                running_at = _wait_state(job, "RUNNING", timeout_s)
                _wait_line(log, "restored", release_at, timeout_s)
                session.commit()
                runs.append(measure(parse_log(log.read_text(errors="replace")),
                                    signal_at=signal_at, requeue_at=requeue_at,
                                    pending_at=pending_at, release_at=release_at,
                                    running_at=running_at, step_s=step_s))
                view = JobView(id=JobId(job), state=JobState.RUNNING, submit_time=started,
                               start_time=running_at, gpus=1, name=name)
                if not quiet:
                    r = runs[-1]
                    print(f"run {i + 1}/{n}: " + ", ".join(
                        f"{s} {getattr(r, s):.3f}" for s in STEPS), flush=True)
    finally:
        subprocess.run(["scancel", job], check=False)
        engine.dispose()
        state.unlink(missing_ok=True)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="restarts (default 5)")
    ap.add_argument("--size-mb", type=int, default=1, help="MiB of job state (default 1)")
    ap.add_argument("--grace-s", type=float, default=ResizeConfig().grace_s,
                    help="signal -> requeue, as [resize] grace_s (default %(default)s)")
    ap.add_argument("--step-s", type=float, default=0.1, help="the job's step (default 0.1)")
    ap.add_argument("--run-s", type=float, default=2.0,
                    help="run time between a restore and the next signal (default 2)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="where the job's log and state go; the nodes must see it (default: "
                         "a new folder under /tmp, removed at the end)")
    ap.add_argument("--timeout-s", type=float, default=300.0,
                    help="the most one step may take (default 300)")
    ap.add_argument("--cold", action="store_true",
                    help="drop this host's page cache before each release (root), so the "
                         "restore reads its state from disk")
    ap.add_argument("--out", type=Path, default=None, help="write the restart model here")
    args = ap.parse_args(argv)
    if args.n < 1 or args.size_mb < 0 or args.grace_s < 0 or not args.step_s > 0:
        ap.error("-n must be >= 1, --size-mb and --grace-s >= 0, --step-s > 0")
    if not os.environ.get("SLURM_CONF"):
        ap.error("SLURM_CONF must name the cluster's slurm.conf")
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="calibrate-restart-", dir="/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)
    try:
        runs = calibrate(n=args.n, size_mb=args.size_mb, grace_s=args.grace_s,
                         step_s=args.step_s, run_s=args.run_s, workdir=workdir,
                         timeout_s=args.timeout_s, cold=args.cold)
    except RuntimeError as exc:
        print(f"calibrate_restart: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(runs, args.size_mb))
    if args.out is not None:
        command = ("benchmarks/calibrate_restart.py " + " ".join(
            sys.argv[1:] if argv is None else argv))
        args.out.write_text(model_toml(runs, size_mb=args.size_mb, command=command))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
