"""Progress reports on the real cluster: a job updates its own comment, intent kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_jobs import RLSBATCH, SLURM_RL, Jobs

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.submit.intent import decode_comment

pytestmark = pytest.mark.slurm
SEP = "\x1f"


def comment_of(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", f"Comment:{SEP}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split(SEP)[0]


def wait_until_done(job_id: str, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
                               capture_output=True, text=True, check=True).stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {state!r} after {timeout_s} s")


def test_a_running_job_reports_progress_through_the_shell_command_and_the_api(
        jobs: Jobs, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH --comment="user text" -t 2 -c 1
#RLSBATCH --rl-deadline +1h --rl-steps 100
export TMPDIR={tmp_path}
{SLURM_RL} progress 10 --total 100 --rate 2.5 --force
{SLURM_RL} progress 11 --total 100
sleep 1
{sys.executable} -c "
from slurm_rl.progress import report_progress as r
print(r(20, 100), r(21, 100), r(100, 100))
"
""")
    out = tmp_path / "out.txt"
    proc = jobs.run([RLSBATCH, "-J", jobs.name, "-o", str(out), str(script)])
    job = jobs.job_id(proc)
    assert wait_until_done(job) == "COMPLETED", out.read_text() if out.exists() else ""
    assert out.read_text().split() == ["False", "False", "True"]
    decoded = decode_comment(comment_of(job))
    assert decoded.user_comment == "user text"
    assert decoded.intent is not None and decoded.intent.total_steps == 100
    assert decoded.intent.deadline is not None
    assert decoded.progress is not None
    assert (decoded.progress.steps_done, decoded.progress.steps_total) == (100, 100)
    assert decoded.progress.rate is not None and decoded.progress.rate > 0


def test_progress_of_a_pending_job_by_id(jobs: Jobs, tmp_path: Path) -> None:
    proc = jobs.run([RLSBATCH, "--hold", "--rl-class", "besteffort", "--comment", "keep me",
                     "-J", jobs.name, "--wrap", "true"])
    job = jobs.job_id(proc)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([SLURM_RL, "progress", "3", "--total", "9", "--rate", "0.5",
                          "--job", job], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    decoded = decode_comment(comment_of(job))
    assert decoded.user_comment == "keep me"
    assert decoded.intent == Intent(service_class=ServiceClass.BESTEFFORT)
    assert decoded.progress is not None
    assert decoded.progress == Progress(steps_done=3, steps_total=9, rate=0.5,
                                        updated_at=decoded.progress.updated_at)
    again = subprocess.run([SLURM_RL, "progress", "4", "--job", job], env=env,
                           capture_output=True, text=True, check=False)
    assert again.returncode == 0  # throttled: quietly nothing
    progress = decode_comment(comment_of(job)).progress
    assert progress is not None and progress.steps_done == 3


def test_progress_outside_a_job_needs_an_id(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    run = subprocess.run([SLURM_RL, "progress", "5"], env=env, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 2
    assert "not inside a Slurm job" in run.stderr
    bad = subprocess.run([SLURM_RL, "progress", "5", "--job", "999999999", "--force"], env=env,
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "job 999999999: squeue failed" in bad.stderr


BAD_PROGRESS_ARGS = [
    ["99999999999999999999999", "--total", "999999999999999999999999"], ["5", "--total", "3"],
    ["1", "--rate", "nan"], ["1", "--rate", "inf"], ["1", "--rate=-1"], ["\uff11\uff12"],
    ["\u0663", "--total", "9"], ["1", "--total", "\u0669"], ["1", "--rate", "\u0661.\u0665"],
]


def test_bad_progress_values_change_nothing_on_the_cluster(jobs: Jobs, tmp_path: Path) -> None:
    proc = jobs.run([RLSBATCH, "--hold", "--rl-steps", "100", "--comment", "mine", "-J",
                     jobs.name, "--wrap", "true"])
    job = jobs.job_id(proc)
    before = comment_of(job)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for args in BAD_PROGRESS_ARGS:
        run = subprocess.run([SLURM_RL, "progress", *args, "--job", job, "--force"], env=env,
                             capture_output=True, text=True, check=False)
        assert run.returncode == 2, (args, run.stderr)
        errors = [ln for ln in run.stderr.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and "Invalid value for" in errors[0], run.stderr
        assert "Traceback" not in run.stderr
    api = subprocess.run([sys.executable, "-c", f"""
import math
from slurm_rl.progress import report_progress as r
print(r(10**30, 10**31, job_id="{job}", force=True), r(5, 3, job_id="{job}", force=True),
      r(1, 9, math.nan, job_id="{job}", force=True), r(1, 9, math.inf, job_id="{job}"))
"""], env=env, capture_output=True, text=True, check=False)
    assert api.returncode == 0, api.stderr
    assert api.stdout.split() == ["False"] * 4
    assert api.stderr.count("slurm-rl progress: ") == 1  # the first refusal only
    assert comment_of(job) == before
    assert decode_comment(before).intent == Intent(total_steps=100)
