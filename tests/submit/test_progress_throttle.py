"""Progress reports: throttling (injected clock), rate measurement, comment composition.

The Slurm side (squeue reads the comment, scontrol writes it) is exercised for real in
test_progress_slurm.py; here a stand-in keeps one comment the way slurmctld would.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.progress import ProgressError, ProgressReporter, Throttle
from slurm_rl.slurm.runner import CommandResult
from slurm_rl.submit.intent import compose_comment, decode_comment

SEP = "\x1f"


class OneJob:
    """Answers `squeue -O Comment:` and `scontrol update JobId=.. Comment=..` for one job."""

    def __init__(self, comment: str) -> None:
        self.comment = comment
        self.updates = 0

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        argv = tuple(args)
        if argv[0] == "squeue":
            shown = self.comment or "(null)"
            return CommandResult(args=argv, returncode=0, stdout=f"{shown}{SEP}\n", stderr="",
                                 duration_s=0.0)
        assert argv[:3] == ("scontrol", "update", "JobId=42"), argv
        self.comment = argv[3].removeprefix("Comment=")
        self.updates += 1
        return CommandResult(args=argv, returncode=0, stdout="", stderr="", duration_s=0.0)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


INTENT = Intent(deadline=1_900_000_000.0, service_class=ServiceClass.CRITICAL, gpus_min=1,
                gpus_max=4)


def reporter(job: OneJob, clock: Clock, tmp_path: Path, interval: float = 30.0
             ) -> ProgressReporter:
    return ProgressReporter("42", runner=job, clock=clock, min_interval_s=interval,
                            state_file=tmp_path / "state")


def test_at_most_one_update_per_interval(tmp_path: Path) -> None:
    job = OneJob(compose_comment("user {words}", INTENT))
    clock = Clock(1000.0)
    rep = reporter(job, clock, tmp_path)
    assert rep.report(10, 1000)
    for dt, steps in [(1, 11), (29.9, 12)]:
        clock.t = 1000.0 + dt
        assert not rep.report(steps, 1000)
    clock.t = 1030.0
    assert rep.report(70, 1000)
    assert job.updates == 2
    decoded = decode_comment(job.comment)
    assert decoded.user_comment == "user {words}"
    assert decoded.intent == INTENT
    assert decoded.progress == Progress(steps_done=70, steps_total=1000, rate=2.0,
                                        updated_at=1030.0)


def test_a_report_is_dated_to_the_millisecond(tmp_path: Path) -> None:
    job = OneJob(compose_comment("", INTENT))
    rep = reporter(job, Clock(1000.1234), tmp_path)
    assert rep.report(10, 1000)
    progress = decode_comment(job.comment).progress
    assert progress is not None and progress.updated_at == 1000.123


def test_final_and_forced_reports_bypass_the_throttle(tmp_path: Path) -> None:
    job = OneJob("")
    clock = Clock(1000.0)
    rep = reporter(job, clock, tmp_path)
    assert rep.report(1, 10)
    clock.t = 1001.0
    assert rep.report(10, 10)  # final
    clock.t = 1002.0
    assert rep.report(10, 10, rate=3.5) and rep.report(10, force=True)
    assert not rep.report(9)
    assert job.updates == 4
    decoded = decode_comment(job.comment)
    assert decoded.intent is None and decoded.user_comment == ""
    assert decoded.progress == Progress(steps_done=10, updated_at=1002.0)  # no time passed


def test_separate_processes_share_the_throttle_through_the_state_file(tmp_path: Path) -> None:
    job = OneJob(compose_comment("", INTENT))
    clock = Clock(5000.0)
    assert reporter(job, clock, tmp_path).report(100)
    clock.t = 5010.0
    assert not reporter(job, clock, tmp_path).report(150)  # a new process, same job
    clock.t = 5040.0
    assert reporter(job, clock, tmp_path).report(220)
    assert decode_comment(job.comment).progress == Progress(
        steps_done=220, rate=3.0, updated_at=5040.0)


def test_throttle_without_a_file_and_a_clock_that_goes_back(tmp_path: Path) -> None:
    throttle = Throttle(None, 30.0)
    assert throttle.due(100.0)
    throttle.record(100.0, 1)
    assert not throttle.due(129.0)
    assert throttle.due(50.0)  # the clock went back (another host's file): do not stall
    unwritable = Throttle(tmp_path / "missing-dir" / "state", 30.0)
    unwritable.record(100.0, 1)
    assert not unwritable.due(110.0)


def test_errors(tmp_path: Path) -> None:
    job = OneJob(compose_comment("x" * 940, INTENT))
    rep = reporter(job, Clock(1.0), tmp_path)
    with pytest.raises(ProgressError, match="job 42: --comment plus the slurm-rl intent"):
        rep.report(10 ** 15, 10 ** 15 + 1, rate=123456.789)
    with pytest.raises(ValueError):
        rep.report(-1)
    with pytest.raises(ValueError, match=r"steps_done \(11\) is above steps_total \(10\)"):
        rep.report(11, 10)
    assert job.updates == 0


def test_a_measured_rate_out_of_bounds_is_dropped(tmp_path: Path) -> None:
    job = OneJob("")
    clock = Clock(1000.0)
    rep = reporter(job, clock, tmp_path, interval=0.0)
    assert rep.report(0)
    clock.t = 1000.0 + 1e-9  # another process, a clock a hair later
    assert rep.report(2 ** 52)
    assert decode_comment(job.comment).progress == Progress(steps_done=2 ** 52,
                                                            updated_at=1000.0)
