"""The progress channel: a job reports how far it is, in its own Slurm comment.

    from slurm_rl.progress import report_progress
    report_progress(step, steps_total=10_000)          # in the training loop; cheap to call

    slurm-rl progress 1200 --total 10000               # the same from a shell script

The comment keeps the user's text and the intent rlsbatch wrote; only the `{rlp:...}` tag is
replaced (submit/intent.py `with_progress`). Values are bounded like every number a user gives
(submit/tags.py): whole steps 0..2**53-1, steps done at most the total, a finite rate. Updates
are throttled: at most one per `min_interval_s` (30 s by default) per job, except the final one
(steps_done >= steps_total) and forced ones.

The last update's time and step count live in a small file that no other user can create,
replace or read first: `$XDG_RUNTIME_DIR/slurm-rl/` when that is a private directory of ours,
else `${TMPDIR:-/tmp}/slurm-rl-<uid>/`, made with mode 0700 and checked after (a directory, not a
link, ours, closed to others). If neither can be had, a one-line warning is printed and the
throttle lives in memory only. The file is opened with O_NOFOLLOW and must be a regular file of
ours. So separate `slurm-rl progress` processes share the throttle, and the rate (steps per
second) is measured between updates when the caller does not give it.

No torch and no database here: this module is imported by training jobs.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import click

from slurm_rl.checks import STAMP_DECIMALS
from slurm_rl.core import Progress
from slurm_rl.slurm.runner import Runner, SubprocessRunner
from slurm_rl.states import JobState
from slurm_rl.submit.intent import CommentError, with_progress
from slurm_rl.submit.tags import (
    MAX_EPOCH,
    MAX_INT,
    ascii_float,
    ascii_int,
    brief,
    check_int,
    check_number,
    read_digits,
)

DEFAULT_INTERVAL_S = 30.0
SEP = "\x1f"  # squeue -O field suffix (as in slurm_rl.slurm.parse): comments may hold spaces
_JOB_ID_CHARS = frozenset("0123456789_+")
_STATE_BYTES = 64


class ProgressError(RuntimeError):
    """The comment could not be read or written."""


def check_report(steps_done: int, steps_total: int | None, rate: float | None) -> None:
    """Raise ValueError (naming the value) unless a report is within bounds."""
    check_int("steps_done", steps_done)
    if steps_total is not None:
        check_int("steps_total", steps_total, 1)
        if steps_done > steps_total:
            raise ValueError(f"steps_done ({steps_done}) is above steps_total ({steps_total})")
    if rate is not None:
        check_number("rate", rate)


def valid_job_id(job_id: str) -> bool:
    """A single job's id as Slurm prints it: 123, 123_4 (array task), 123+1 (het component)."""
    return 0 < len(job_id) <= 40 and all(ch in _JOB_ID_CHARS for ch in job_id)


class Throttle:
    """Remembers the last update (time, steps) of one job, in memory and in `path`."""

    def __init__(self, path: Path | None, interval_s: float) -> None:
        self.path = path
        self.interval_s = interval_s
        self._last: tuple[float, int] | None = None

    def last(self) -> tuple[float, int] | None:
        if self.path is not None:
            found = _read_state(self.path)
            if found is not None:
                self._last = found
        return self._last

    def due(self, now: float) -> bool:
        last = self.last()
        return last is None or now - last[0] >= self.interval_s or now < last[0]

    def record(self, now: float, steps: int) -> None:
        self._last = (now, steps)
        if self.path is not None:
            _write_state(self.path, f"{now!r} {steps}\n")


def _read_state(path: Path) -> tuple[float, int] | None:
    """(time, steps) from a state file: a regular file of ours, not a link, bounded values."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        text = os.read(fd, _STATE_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    t_s, _, steps_s = text.strip().partition(" ")
    t, steps = ascii_float(t_s, 0, MAX_EPOCH), ascii_int(steps_s)
    return None if t is None or steps is None else (t, steps)


def _write_state(path: Path, text: str) -> None:
    """Replace `path` by a new file (O_EXCL, O_NOFOLLOW, mode 0600); errors are ignored: the
    in-memory state still throttles this process."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:  # left by a dead process with our pid; never followed
            os.unlink(tmp)
            fd = os.open(tmp, flags, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)  # rename(2) replaces a link itself, never its target
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _not_private(path: Path, uid: int) -> str | None:
    """Why `path` is not a private directory of `uid` (None: it is one)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _private_subdir(path: Path, uid: int) -> str | None:
    """Make `path` (mode 0700) unless it exists; why it is not private (None: it is)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return _not_private(path, uid)


_warned_state = False


def state_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """A directory for throttle state that only we can write, or None (with a warning on
    stderr, once per process) when there is none."""
    global _warned_state
    env = os.environ if env is None else env
    uid = os.getuid()
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg) and _not_private(Path(xdg), uid) is None:
        mine = Path(xdg) / "slurm-rl"
        if _private_subdir(mine, uid) is None:
            return mine
    base = env.get("TMPDIR", "")
    mine = Path(base if os.path.isabs(base) else "/tmp") / f"slurm-rl-{uid}"
    reason = _private_subdir(mine, uid)
    if reason is None:
        return mine
    if not _warned_state:
        print(f"slurm-rl progress: warning: throttle state kept in memory only: {reason}",
              file=sys.stderr)
        _warned_state = True
    return None


def state_path(job_id: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Where the throttle state of `job_id` lives (None: in memory only)."""
    if not valid_job_id(job_id):
        return None
    folder = state_dir(env)
    return None if folder is None else folder / f"progress-{job_id}"


class ProgressReporter:
    """Writes one job's progress into its comment, throttled."""

    def __init__(self, job_id: str, *, runner: Runner | None = None,
                 clock: Callable[[], float] = time.time,
                 min_interval_s: float = DEFAULT_INTERVAL_S,
                 state_file: Path | None = None) -> None:
        if not valid_job_id(job_id):
            raise ValueError(f"job id {brief(job_id)!r}: use a single job's id (123, 123_4)")
        self.job_id = job_id
        self.runner = runner or SubprocessRunner(timeout_s=30)
        self.clock = clock
        self.throttle = Throttle(state_file if state_file is not None else state_path(job_id),
                                 min_interval_s)

    def report(self, steps_done: int, steps_total: int | None = None,
               rate: float | None = None, *, force: bool = False) -> bool:
        """Update the comment unless throttled; True if it was updated. Raises ValueError for
        values out of bounds (see `check_report`)."""
        check_report(steps_done, steps_total, rate)
        now = self.clock()
        final = steps_total is not None and steps_done >= steps_total
        if not (force or final or self.throttle.due(now)):
            return False
        last = self.throttle.last()
        if rate is None and last is not None and now > last[0] and steps_done >= last[1]:
            measured = (steps_done - last[1]) / (now - last[0])
            rate = measured if measured <= MAX_INT else None  # clocks a hair apart
        progress = Progress(steps_done=steps_done, steps_total=steps_total, rate=rate,
                            updated_at=round(now, STAMP_DECIMALS))
        try:
            comment = with_progress(self.read_comment(), progress)
        except CommentError as exc:
            raise ProgressError(f"job {self.job_id}: {exc}") from None
        result = self.runner.run(["scontrol", "update", f"JobId={self.job_id}",
                                  f"Comment={comment}"])
        if not result.ok:
            if self._ended():
                # The last report of a job whose script already ended (a report sent in the
                # background, or completing): slurmctld refuses comments on finished jobs,
                # and the daemon no longer needs the progress of a job that is done.
                return False
            raise ProgressError(f"job {self.job_id}: scontrol update failed: "
                                f"{_last_line(result.stderr)}")
        self.throttle.record(now, steps_done)
        return True

    def read_comment(self) -> str:
        return read_job_comment(self.runner, self.job_id)

    def _ended(self) -> bool:
        """Whether the job is completing or finished (asked only after a refused update)."""
        result = self.runner.run(["squeue", "-h", "-t", "all", "-j", self.job_id, "-o", "%T"])
        words = result.stdout.split() if result.ok else []
        if len(words) != 1:
            return False
        try:
            state = JobState.parse(words[0])
        except ValueError:
            return False
        return state is JobState.COMPLETING or state.is_finished


def read_job_comment(runner: Runner, job_id: str) -> str:
    """Job `job_id`'s comment as Slurm holds it ("" for none); ProgressError when squeue fails
    or does not show exactly that one job. `-t all`: a job whose script just ended (completing,
    or completed within MinJobAge) is still found, so its last report is not an error."""
    result = runner.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", f"Comment:{SEP}"])
    if not result.ok:
        raise ProgressError(f"job {job_id}: squeue failed: {_last_line(result.stderr)}")
    # One record per job, ended by the separator and a newline: a comment may itself hold
    # newlines (the owner's own text), so records are not lines.
    records = result.stdout.split(SEP + "\n")
    if records and records[-1] == "":
        records.pop()
    if len(records) != 1:
        raise ProgressError(f"job {job_id}: expected one job from squeue, got "
                            f"{len(records)} (for an array, give the task's own job id)")
    comment = records[0]
    return "" if comment == "(null)" else comment


_reporters: dict[str, ProgressReporter] = {}
_warned = False


def report_progress(steps_done: int, steps_total: int | None = None,
                    rate: float | None = None, *, job_id: str | None = None,
                    min_interval_s: float = DEFAULT_INTERVAL_S, force: bool = False) -> bool:
    """Report progress of the calling Slurm job (SLURM_JOB_ID, or `job_id`).

    Call it as often as you like: it updates the comment at most once per `min_interval_s`
    (and always for the final step). Returns True if it updated the comment. Never raises:
    training must not die for a progress report. Outside a job it does nothing; Slurm trouble
    and values out of bounds (not whole, negative, 2**53 or more, steps above the total, a rate
    that is not finite) update nothing, and the first such failure is printed to stderr.
    """
    global _warned
    job = job_id or os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    try:
        reporter = _reporters.get(job)
        if reporter is None or reporter.throttle.interval_s != min_interval_s:
            check_number("min_interval_s", min_interval_s)
            reporter = _reporters[job] = ProgressReporter(job, min_interval_s=min_interval_s)
        return reporter.report(steps_done, steps_total, rate, force=force)
    except (ProgressError, ValueError) as exc:
        if not _warned:
            print(f"slurm-rl progress: {exc}", file=sys.stderr)
            _warned = True
        return False


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "(no message)"


class WholeNumber(click.ParamType):
    """A whole number lo..2**53-1 written in ASCII digits (click's INT takes '１２', '+5', '1_0'
    and any size)."""

    name = "integer"

    def __init__(self, lo: int) -> None:
        self.lo = lo

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number: int | None = value
        else:
            number = read_digits(str(value).strip())
        if number is None:
            text = str(value).strip()
            if text.startswith("-") and read_digits(text[1:]) is not None:  # say what it is
                self.fail(f"{brief(text)} is not in {self.lo}..{MAX_INT}", param, ctx)
            self.fail(f"{brief(str(value))!r} is not a whole number (ASCII digits)", param, ctx)
        if not self.lo <= number <= MAX_INT:
            self.fail(f"{brief(str(value))} is not in {self.lo}..{MAX_INT}", param, ctx)
        return number


class FiniteNumber(click.ParamType):
    """A finite number 0..2**53-1 in ASCII (click's FLOAT takes 'nan', 'inf' and '١.٥')."""

    name = "number"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float | int) and not isinstance(value, bool):
            number = ascii_float(repr(float(value)))
        else:
            number = ascii_float(str(value).strip())
        if number is None:
            self.fail(f"{brief(str(value))!r} is not a finite number in 0..{MAX_INT}", param,
                      ctx)
        return number


class JobIdType(click.ParamType):
    name = "id"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value)
        if not valid_job_id(text):
            self.fail(f"{brief(text)!r} is not a single job's id (such as 123 or 123_4)",
                      param, ctx)
        return text


class OneLineErrors(click.Command):
    """Usage errors as one line (`Error: …`), without click's usage and help hint: a report
    from inside a training job's log should be a single, greppable line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            exc.ctx = None
            raise

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            exc.ctx = None
            raise


@click.command("progress", cls=OneLineErrors)
@click.argument("steps", type=WholeNumber(0))
@click.option("--total", type=WholeNumber(1), default=None, help="Total steps.")
@click.option("--rate", type=FiniteNumber(), default=None,
              help="Steps per second (default: measured between updates).")
@click.option("--job", "job_id", type=JobIdType(), default=None,
              help="Job id (default: $SLURM_JOB_ID).")
@click.option("--interval", type=FiniteNumber(), default=DEFAULT_INTERVAL_S,
              show_default=True, help="At most one update per this many seconds.")
@click.option("--force", is_flag=True, help="Update even if the last update was recent.")
def progress_command(steps: int, total: int | None, rate: float | None, job_id: str | None,
                     interval: float, force: bool) -> None:
    """Report STEPS done (of --total) in this job's comment, for the scheduler's predictions."""
    if total is not None and steps > total:
        raise click.BadParameter(f"{steps} is above --total ({total})", param_hint="'STEPS'")
    job = job_id or os.environ.get("SLURM_JOB_ID")
    if not job:
        raise click.UsageError("not inside a Slurm job (no SLURM_JOB_ID): give --job ID")
    if not valid_job_id(job):
        raise click.UsageError(f"$SLURM_JOB_ID {brief(job)!r} is not a job id: give --job ID")
    reporter = ProgressReporter(job, min_interval_s=interval)
    try:
        reporter.report(steps, total, rate, force=force)
    except ProgressError as exc:
        raise click.ClickException(str(exc)) from None
