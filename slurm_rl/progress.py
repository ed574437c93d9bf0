"""The progress channel: a job reports how far it is, in its own Slurm comment.

    from slurm_rl.progress import report_progress
    report_progress(step, steps_total=10_000)          # in the training loop; cheap to call

    slurm-rl progress 1200 --total 10000               # the same from a shell script

The comment keeps the user's text and the intent rlsbatch wrote; only the `{rlp:...}` tag is
replaced (submit/intent.py `with_progress`). Updates are throttled: at most one per
`min_interval_s` (30 s by default) per job, except the final one (steps_done >= steps_total) and
forced ones. The last update's time and step count live in a small file under $TMPDIR (or
/tmp), so separate `slurm-rl progress` processes share the throttle, and the rate (steps per
second) is measured between updates when the caller does not give it.

No torch and no database here: this module is imported by training jobs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from slurm_rl.core import Progress
from slurm_rl.slurm.runner import Runner, SubprocessRunner
from slurm_rl.submit.intent import CommentError, with_progress

DEFAULT_INTERVAL_S = 30.0
SEP = "\x1f"  # squeue -O field suffix (as in slurm_rl.slurm.parse): comments may hold spaces


class ProgressError(RuntimeError):
    """The comment could not be read or written."""


class Throttle:
    """Remembers the last update (time, steps) of one job, in memory and in `path`."""

    def __init__(self, path: Path | None, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self._last: tuple[float, int] | None = None

    def last(self) -> tuple[float, int] | None:
        if self.path is not None:
            try:
                t, steps = self.path.read_text().split()
                self._last = (float(t), int(steps))
            except (OSError, ValueError):
                pass
        return self._last

    def due(self, now: float) -> bool:
        last = self.last()
        return last is None or now - last[0] >= self.interval_s or now < last[0]

    def record(self, now: float, steps: int) -> None:
        self._last = (now, steps)
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}")
        try:
            tmp.write_text(f"{now} {steps}\n")
            tmp.replace(self.path)
        except OSError:
            pass  # the in-memory state still throttles this process


def state_path(job_id: str) -> Path:
    base = os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / f"slurm-rl-progress-{os.getuid()}-{job_id}"


class ProgressReporter:
    """Writes one job's progress into its comment, throttled."""

    def __init__(self, job_id: str, *, runner: Runner | None = None,
                 clock: Callable[[], float] = time.time,
                 min_interval_s: float = DEFAULT_INTERVAL_S,
                 state_file: Path | None = None) -> None:
        self.job_id = job_id
        self.runner = runner or SubprocessRunner(timeout_s=30)
        self.clock = clock
        self.throttle = Throttle(state_file if state_file is not None else state_path(job_id),
                                 min_interval_s)

    def report(self, steps_done: int, steps_total: int | None = None,
               rate: float | None = None, *, force: bool = False) -> bool:
        """Update the comment unless throttled; True if it was updated."""
        if steps_done < 0 or (steps_total is not None and steps_total < 1):
            raise ValueError("steps_done must be >= 0 and steps_total >= 1")
        now = self.clock()
        final = steps_total is not None and steps_done >= steps_total
        if not (force or final or self.throttle.due(now)):
            return False
        last = self.throttle.last()
        if rate is None and last is not None and now > last[0] and steps_done >= last[1]:
            rate = (steps_done - last[1]) / (now - last[0])
        progress = Progress(steps_done=steps_done, steps_total=steps_total, rate=rate,
                            updated_at=float(int(now)))
        try:
            comment = with_progress(self.read_comment(), progress)
        except CommentError as exc:
            raise ProgressError(f"job {self.job_id}: {exc}") from None
        result = self.runner.run(["scontrol", "update", f"JobId={self.job_id}",
                                  f"Comment={comment}"])
        if not result.ok:
            raise ProgressError(f"job {self.job_id}: scontrol update failed: "
                                f"{_last_line(result.stderr)}")
        self.throttle.record(now, steps_done)
        return True

    def read_comment(self) -> str:
        result = self.runner.run(["squeue", "-h", "-j", self.job_id, "-O", f"Comment:{SEP}"])
        if not result.ok:
            raise ProgressError(f"job {self.job_id}: squeue failed: {_last_line(result.stderr)}")
        lines = [ln for ln in result.stdout.split("\n") if ln]
        if len(lines) != 1:
            raise ProgressError(f"job {self.job_id}: expected one job from squeue, got "
                                f"{len(lines)} (for an array, give the task's own job id)")
        comment = lines[0].removesuffix(SEP)
        return "" if comment == "(null)" else comment


_reporters: dict[str, ProgressReporter] = {}
_warned = False


def report_progress(steps_done: int, steps_total: int | None = None,
                    rate: float | None = None, *, job_id: str | None = None,
                    min_interval_s: float = DEFAULT_INTERVAL_S, force: bool = False) -> bool:
    """Report progress of the calling Slurm job (SLURM_JOB_ID, or `job_id`).

    Call it as often as you like: it updates the comment at most once per `min_interval_s`
    (and always for the final step). Returns True if it updated the comment. Never raises for
    Slurm trouble or outside a job: training must not die for a progress report; the first
    failure is printed to stderr.
    """
    global _warned
    job = job_id or os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    reporter = _reporters.get(job)
    if reporter is None or reporter.throttle.interval_s != min_interval_s:
        reporter = _reporters[job] = ProgressReporter(job, min_interval_s=min_interval_s)
    try:
        return reporter.report(steps_done, steps_total, rate, force=force)
    except ProgressError as exc:
        if not _warned:
            print(f"slurm-rl progress: {exc}", file=sys.stderr)
            _warned = True
        return False


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no message)"


@click.command("progress")
@click.argument("steps", type=click.IntRange(min=0))
@click.option("--total", type=click.IntRange(min=1), default=None, help="Total steps.")
@click.option("--rate", type=click.FloatRange(min=0), default=None,
              help="Steps per second (default: measured between updates).")
@click.option("--job", "job_id", default=None, help="Job id (default: $SLURM_JOB_ID).")
@click.option("--interval", type=click.FloatRange(min=0), default=DEFAULT_INTERVAL_S,
              show_default=True, help="At most one update per this many seconds.")
@click.option("--force", is_flag=True, help="Update even if the last update was recent.")
def progress_command(steps: int, total: int | None, rate: float | None, job_id: str | None,
                     interval: float, force: bool) -> None:
    """Report STEPS done (of --total) in this job's comment, for the scheduler's predictions."""
    job = job_id or os.environ.get("SLURM_JOB_ID")
    if not job:
        raise click.UsageError("not inside a Slurm job (no SLURM_JOB_ID): give --job ID")
    reporter = ProgressReporter(job, min_interval_s=interval)
    try:
        reporter.report(steps, total, rate, force=force)
    except ProgressError as exc:
        raise click.ClickException(str(exc)) from None
