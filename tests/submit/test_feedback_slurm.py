"""Feedback at submission on the real cluster: a daemon cycle writes its view of the queue, and
rlsbatch reads it: an infeasible hard deadline is refused with a suggestion (nothing
submitted), `--rl-force` submits it, a stale view is said to be stale and not used."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_jobs import RLSBATCH, SLURM_RL, Jobs
from test_progress_slurm import comment_of

from slurm_rl.submit.intent import decode_comment

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/sh\ntrue\n"


@pytest.fixture
def env(jobs: Jobs, tmp_path: Path) -> Iterator[dict[str, str]]:
    """SLURM_RL_DB: a database one dry-run daemon cycle has just written (all jobs seen)."""
    db = tmp_path / "daemon.db"
    run = subprocess.run([SLURM_RL, "daemon", "--once", "--dry-run", "--db", str(db),
                          "--only-name-prefix", jobs.name], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr
    yield {**os.environ, "SLURM_RL_DB": str(db)}


def submit(jobs: Jobs, tmp_path: Path, env: dict[str, str], *args: str
           ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    proc = subprocess.run([RLSBATCH, "--hold", "-J", jobs.name, "-o", "/dev/null", *args,
                           str(script)], capture_output=True, text=True, check=False, env=env)
    if proc.returncode == 0:
        jobs.ids.append(proc.stdout.split()[-1])
    return proc


def test_an_infeasible_hard_deadline_is_refused_with_a_suggestion(
        jobs: Jobs, tmp_path: Path, env: dict[str, str]) -> None:
    proc = submit(jobs, tmp_path, env, "--gres=gpu:1", "-t", "120", "--rl-deadline", "+10m",
                  "--rl-hard")
    assert (proc.returncode, proc.stdout) == (2, "")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: error: --rl-deadline: the hard deadline ")
    assert "looks infeasible: predicted start " in line
    assert "(1 GPU, run time from its time limit; daemon's view " in line
    assert "it would be met with " in line and " --rl-deadline 20" in line
    assert line.endswith("; --rl-force submits anyway")
    assert jobs.in_queue() == []


def test_with_force_it_is_submitted_and_the_warning_stays(
        jobs: Jobs, tmp_path: Path, env: dict[str, str]) -> None:
    proc = submit(jobs, tmp_path, env, "--gres=gpu:1", "-t", "120", "--rl-deadline", "+10m",
                  "--rl-hard", "--rl-force", "--comment", "mine")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Submitted batch job ")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: predicted start ")
    assert "looks infeasible (" in line and line.endswith("late); submitted anyway (--rl-force)")
    (job,) = jobs.in_queue()
    decoded = decode_comment(comment_of(job))
    assert decoded.user_comment == "mine"
    assert decoded.intent is not None and decoded.intent.hard
    assert decoded.intent.deadline is not None


def test_a_feasible_deadline_is_said_so(jobs: Jobs, tmp_path: Path, env: dict[str, str]
                                        ) -> None:
    proc = submit(jobs, tmp_path, env, "--gres=gpu:1", "-t", "5", "--rl-deadline", "+30d",
                  "--rl-hard")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: predicted start ") and "looks feasible (" in line, line


def test_a_stale_view_is_not_used(jobs: Jobs, tmp_path: Path, env: dict[str, str]) -> None:
    with sqlite3.connect(env["SLURM_RL_DB"]) as con:
        con.execute("UPDATE decisions SET at = at - 3600")
    proc = submit(jobs, tmp_path, env, "--gres=gpu:1", "-t", "120", "--rl-deadline", "+10m",
                  "--rl-hard")
    assert proc.returncode == 0, proc.stderr  # no prediction, so nothing to refuse
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rlsbatch: no prediction: the slurm-rl daemon's last cycle was 1h00m")
    assert len(jobs.in_queue()) == 1
