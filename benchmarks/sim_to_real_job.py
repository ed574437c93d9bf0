"""The job of an elastic sim-to-real replay (benchmarks/sim_to_real.py --elastic): it does
`--steps` steps at a rate that depends on the GPUs Slurm gave it, and restarts from a
checkpoint, as an `--rl-elastic` training job must.

    sim_to_real_job.py --dir FOLDER --steps N --rates R1,R2,R3,R4

Its rate at g GPUs is the g-th of `--rates` (steps per second: the profiled throughput the
simulator scales a job's speed by, so both sides agree on what a resize is worth). Progress is
counted from the clock, not in ticks, so a run at any rate ends when its steps are done, to a
few milliseconds. On SIGUSR1 (the daemon's checkpoint signal) it writes the steps done so far
to FOLDER/ck (a temporary file and a rename); at start it goes on from there. Steps done after
the last checkpoint are lost at a requeue. Each run appends lines to FOLDER/log:
`start n=N gpus=G restart=K t=T`, `checkpoint n=N t=T`, `done n=N t=T`. Its progress goes into
the job's comment (`slurm_rl.progress.report_progress`, at start and every `--report-s`
seconds: 1 s, one daemon cycle) with its rate, as a training loop reports its throughput: the
daemon predicts from the rate the simulator's policy sees. (Left to the reporter, a rate
measured from whole steps per second reads 6 or 7 for 6.84, and a deadline policy's admission
flips on that.) Plain Python and the package; no torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType


def gpu_count() -> int:
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible:
        return len(visible)
    return int(os.environ.get("SLURM_GPUS_ON_NODE") or 1)


def main() -> int:
    began = time.time()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rates", required=True, help="steps per second at 1, 2, ... GPUs")
    ap.add_argument("--report-s", type=float, default=1.0)
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    gpus = gpu_count()
    rate = rates[min(gpus, len(rates)) - 1]
    ck, log = args.dir / "ck", args.dir / "log"
    done0 = int(ck.read_text()) if ck.is_file() else 0

    def note(line: str) -> None:
        with log.open("a") as fh:
            fh.write(f"{line} t={time.time():.6f}\n")

    def steps_now() -> int:
        return min(args.steps, done0 + int((time.time() - began) * rate))

    def checkpoint(_signum: int, _frame: FrameType | None) -> None:
        n = steps_now()
        tmp = ck.with_name("ck.tmp")
        tmp.write_text(str(n))
        os.replace(tmp, ck)
        note(f"checkpoint n={n}")

    signal.signal(signal.SIGUSR1, checkpoint)
    note(f"start n={done0} gpus={gpus} restart={os.environ.get('SLURM_RESTART_COUNT', '0')}")
    # Imported after the clock started: the import delays no step.
    from slurm_rl.progress import report_progress
    next_report = time.time()
    while (n := steps_now()) < args.steps:
        now = time.time()
        if now >= next_report:
            report_progress(n, steps_total=args.steps, rate=rate,
                            min_interval_s=args.report_s / 2)
            next_report = now + args.report_s
        finish_at = began + (args.steps - done0) / rate
        time.sleep(max(0.001, min(0.5, finish_at - now, next_report - now)))
    note(f"done n={args.steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
