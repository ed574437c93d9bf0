"""The last progress report of a job whose script already ended: no error.

A job's final `slurm-rl progress` often runs after its script has ended (sent in the
background, or while the job is completing). `squeue` without `-t all` did not show such a job
("expected one job from squeue, got 0"), and slurmctld refuses a comment on a finished job
("Job has already finished"): neither is worth an error in the job's log.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurm_jobs import SLURM_RL, Jobs
from test_progress_slurm import wait_until_done

from slurm_rl.progress import ProgressError, ProgressReporter
from slurm_rl.slurm.runner import CommandResult

SEP = "\x1f"


class Ended:
    """A job Slurm shows (with `-t all` only) in `state`; it refuses comment updates."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.calls: list[tuple[str, ...]] = []

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        argv = tuple(args)
        self.calls.append(argv)
        if argv[0] == "squeue":
            shown = "-t" in argv and "all" in argv or self.state == "RUNNING"
            out = "" if not shown else self.state + "\n" if "%T" in argv else f"(null){SEP}\n"
            return CommandResult(args=argv, returncode=0, stdout=out, stderr="",
                                 duration_s=0.0)
        return CommandResult(args=argv, returncode=1, stdout="", duration_s=0.0,
                             stderr="Job has already finished for job 42\n")


def test_a_finished_job_s_last_report_is_quietly_nothing(tmp_path: Path) -> None:
    for state in ("COMPLETING", "COMPLETED", "CANCELLED"):
        job = Ended(state)
        rep = ProgressReporter("42", runner=job, state_file=tmp_path / f"s-{state}")
        assert rep.report(10, 10) is False
        assert job.calls[0][:4] == ("squeue", "-h", "-t", "all")


def test_a_refused_update_of_a_running_job_is_still_an_error(tmp_path: Path) -> None:
    rep = ProgressReporter("42", runner=Ended("RUNNING"), state_file=tmp_path / "s")
    with pytest.raises(ProgressError, match="scontrol update failed"):
        rep.report(10, 10)


@pytest.mark.slurm
def test_progress_after_the_job_ended_exits_0(jobs: Jobs, tmp_path: Path) -> None:
    proc = jobs.run(["sbatch", "--parsable", "-J", jobs.name, "-o", "/dev/null",
                     "--wrap", "true"])
    job = jobs.job_id(proc)
    assert wait_until_done(job) == "COMPLETED"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([SLURM_RL, "progress", "5", "--total", "5", "--job", job], env=env,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
