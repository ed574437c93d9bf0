"""Bad progress reports on the real cluster, one test each: one `Error:` line naming the value,
exit status 2, and the job's comment (user text, intent, earlier progress) byte for byte as
before. The API (`report_progress`) returns False for the same values and changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_jobs import RLSBATCH, SLURM_RL, Jobs
from test_progress_slurm import comment_of

pytestmark = pytest.mark.slurm

CASES = {
    "total-zero": (["5", "--total", "0"],
                   "Error: Invalid value for '--total': 0 is not in 1..9007199254740991"),
    "total-negative": (["5", "--total", "-3"],
                       "Error: Invalid value for '--total': -3 is not in 1..9007199254740991"),
    "step-above-total": (["12", "--total", "10"],
                         "Error: Invalid value for 'STEPS': 12 is above --total (10)"),
    "step-not-numeric": (["twelve"],
                         "Error: Invalid value for 'STEPS': 'twelve' is not a whole number"),
    "step-fraction": (["1.5"], "Error: Invalid value for 'STEPS': '1.5' is not a whole number"),
    "total-not-numeric": (["1", "--total", "ten"],
                          "Error: Invalid value for '--total': 'ten' is not a whole number"),
    "rate-not-numeric": (["1", "--rate", "fast"],
                         "Error: Invalid value for '--rate': 'fast' is not a finite number"),
}


@pytest.fixture(scope="module")
def reporting_job(slurm_cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[str, str, dict[str, str]]]:
    """A held job with a user comment, an intent and one good progress report."""
    jobs = Jobs()
    env = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("progress"))}
    try:
        proc = jobs.run([RLSBATCH, "--hold", "--rl-steps", "100", "--comment", "mine", "-J",
                         jobs.name, "--wrap", "true"])
        job = jobs.job_id(proc)
        good = subprocess.run([SLURM_RL, "progress", "7", "--total", "100", "--job", job,
                               "--force"], env=env, capture_output=True, text=True, check=False)
        assert good.returncode == 0, good.stderr
        yield job, comment_of(job), env
    finally:
        jobs.cancel()


@pytest.mark.parametrize("key", list(CASES))
def test_a_bad_progress_value_is_one_line_exit_2_and_no_change(
        key: str, reporting_job: tuple[str, str, dict[str, str]]) -> None:
    job, before, env = reporting_job
    args, message = CASES[key]
    run = subprocess.run([SLURM_RL, "progress", *args, "--job", job, "--force"], env=env,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.splitlines() == [run.stderr.strip()]  # one line
    assert run.stderr.startswith(message), run.stderr
    assert comment_of(job) == before


def test_progress_from_outside_a_job_is_one_line_exit_2(
        reporting_job: tuple[str, str, dict[str, str]]) -> None:
    job, before, env = reporting_job
    outside = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}
    run = subprocess.run([SLURM_RL, "progress", "5", "--total", "100"], env=outside,
                         capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "Error: not inside a Slurm job (no SLURM_JOB_ID): give --job ID\n"
    assert comment_of(job) == before


def test_the_api_refuses_the_same_values_and_changes_nothing(
        reporting_job: tuple[str, str, dict[str, str]], tmp_path: Path) -> None:
    job, before, env = reporting_job
    code = f"""
from slurm_rl.progress import report_progress as r
print(r(5, 0, job_id="{job}", force=True), r(12, 10, job_id="{job}", force=True),
      r("twelve", 100, job_id="{job}", force=True), r(5, 100))
"""
    outside = {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}
    api = subprocess.run([sys.executable, "-c", code], env=outside, capture_output=True,
                         text=True, check=False)
    assert api.returncode == 0, api.stderr
    assert api.stdout.split() == ["False"] * 4
    assert "Traceback" not in api.stderr
    assert comment_of(job) == before
