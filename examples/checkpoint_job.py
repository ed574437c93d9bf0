#!/usr/bin/env python3
"""A job that really checkpoints and restores: what an `--rl-elastic` job must do, and the job
`benchmarks/calibrate_restart.py` times restarts with.

    sbatch --requeue --open-mode=append -o ckpt.log --gres=gpu:1 \\
        --wrap "exec python examples/checkpoint_job.py --state /tmp/me/ckpt --size-mb 64"

It counts steps (`--step-s` seconds each) up to `--steps`. On the checkpoint signal (SIGUSR1,
the daemon's [resize] signal; SIGUSR2 too) it writes its step counter and `--size-mb` MiB of
state to `--state` (a temporary file, fsync, rename: a restart never reads half a checkpoint),
and it does so again when it finishes. At start it reads the whole state file back, if there
is one, and goes on from the step it holds; steps done after the last checkpoint are lost at a
requeue, as they would be for a training job (`--save-on-term` also saves on SIGTERM, which
Slurm sends at the requeue, so that nothing is lost when the job has time for it).

Every event is one line on stdout with the wall-clock time (`t=`), which the calibration reads:
`start`, `restored step=N` or `fresh`, `step=N` (each step), `checkpoint step=N began=T`,
`term step=N`, `done step=N`. Progress goes into the job's comment as the project's jobs report
it (`slurm_rl.progress.report_progress`, throttled; docs/rlsbatch.md "Progress reports"), when
the package can be imported. Plain Python otherwise: no torch, no numpy.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

MAGIC = b"SLURMRLCKPT1"
BLOCK = 1 << 20


def log(event: str) -> None:
    print(f"{event} t={time.time():.6f}", flush=True)


def write_state(path: Path, step: int, size_mb: int) -> None:
    """The counter in a header, then `size_mb` MiB of payload; atomic (rename)."""
    tmp = path.with_name(path.name + ".tmp")
    block = (os.urandom(64) * (BLOCK // 64))[:BLOCK]
    with open(tmp, "wb") as f:
        f.write(MAGIC + step.to_bytes(8, "little") + size_mb.to_bytes(8, "little"))
        for _ in range(size_mb):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_state(path: Path) -> int | None:
    """The step a checkpoint holds, after reading all of it (None: no checkpoint)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        head = f.read(len(MAGIC) + 16)
        if not head.startswith(MAGIC):
            raise SystemExit(f"{path}: not a checkpoint of this job")
        step = int.from_bytes(head[len(MAGIC):len(MAGIC) + 8], "little")
        size_mb = int.from_bytes(head[len(MAGIC) + 8:], "little")
        got = 0
        while chunk := f.read(BLOCK):
            got += len(chunk)
        if got != size_mb * BLOCK:
            raise SystemExit(f"{path}: checkpoint cut short ({got} of {size_mb * BLOCK} bytes)")
    return step


def progress_reporter() -> Callable[[int, int], object]:
    """report(steps_done, steps_total) into the job's comment; a no-op where the package is
    not installed."""
    try:
        from slurm_rl.progress import report_progress
    except ImportError:
        return lambda _done, _total: False
    return lambda done, total: report_progress(done, steps_total=total)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", type=Path, required=True, help="the checkpoint file")
    ap.add_argument("--size-mb", type=int, default=1, help="MiB of state (default 1)")
    ap.add_argument("--steps", type=int, default=100_000, help="steps in all (default 100000)")
    ap.add_argument("--step-s", type=float, default=0.1, help="seconds per step (default 0.1)")
    ap.add_argument("--save-on-term", action="store_true",
                    help="also checkpoint on SIGTERM (Slurm's at a requeue)")
    args = ap.parse_args()
    if args.size_mb < 0 or args.steps < 1 or not args.step_s > 0:
        ap.error("--size-mb must be >= 0, --steps >= 1, --step-s > 0")
    log("start")
    report = progress_reporter()
    restored = read_state(args.state)
    step = restored or 0
    log(f"restored step={step}" if restored is not None else "fresh")
    wanted: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        wanted.append("term" if signum == signal.SIGTERM else "checkpoint")

    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
        signal.signal(sig, on_signal)
    while step < args.steps:
        while wanted:
            what = wanted.pop(0)
            if what == "term":
                if args.save_on_term:
                    write_state(args.state, step, args.size_mb)
                log(f"term step={step}")
                return 143
            began = time.time()
            write_state(args.state, step, args.size_mb)
            log(f"checkpoint step={step} began={began:.6f}")
        time.sleep(args.step_s)
        step += 1
        log(f"step={step}")
        report(step, args.steps)
    write_state(args.state, step, args.size_mb)
    log(f"done step={step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
