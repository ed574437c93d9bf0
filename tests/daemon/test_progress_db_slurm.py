"""On the real cluster: what a job reports with `slurm-rl progress` reaches the daemon's
database, with the right rate. tests/submit/test_progress_slurm.py checks the job's comment;
this checks the row the daemon's predictions read."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, run_daemon, wait_for
from sqlalchemy import select

from slurm_rl.core import Intent
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.models import JobProgress
from slurm_rl.submit.intent import compose_comment, decode_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SEP = "\x1f"


def _progress_in_comment(job_id: str, steps: int) -> bool:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", f"Comment:{SEP}"],
                         capture_output=True, text=True, check=True).stdout.split(SEP)[0]
    p = decode_comment(out).progress
    return p is not None and p.steps_done == steps


def _row(db: Path, job_id: str) -> JobProgress | None:
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            return s.scalars(select(JobProgress).where(JobProgress.job_id == job_id)).first()
    finally:
        engine.dispose()


def _submit(jobs: Jobs, tag: str, body: str) -> str:
    comment = compose_comment("", Intent(total_steps=1000))
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", f"{jobs.prefix}{tag}", "--gres=gpu:1", "-t", "2",
         "-o", "/dev/null", "-e", "/dev/null", f"--comment={comment}", "--wrap", body],
        capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    jobs.ids.append(job_id)
    return job_id


def test_the_reported_and_the_measured_rate_reach_the_database(jobs: Jobs,
                                                               tmp_path: Path) -> None:
    # One job states its rate (2.5 steps/s); the other reports 0 then 40 steps 4 s apart, so
    # `progress` measures at most 10 steps/s (more time between the two on a busy host: less).
    stated = _submit(jobs, "stated", f"{SLURM_RL} progress 30 --total 1000 --rate 2.5 --force; "
                     "sleep 60")
    measured = _submit(jobs, "measured", f"{SLURM_RL} progress 0 --total 1000 --force; "
                       f"sleep 4; {SLURM_RL} progress 40 --total 1000 --force; sleep 60")
    wait_for(lambda: _progress_in_comment(stated, 30) and _progress_in_comment(measured, 40),
             90, "both jobs to report their progress")
    db = tmp_path / "d.db"
    run_daemon(db, jobs.prefix, "--dry-run")
    a, b = _row(db, stated), _row(db, measured)
    assert a is not None and (a.steps_done, a.steps_total, a.rate) == (30, 1000, 2.5)
    assert b is not None and (b.steps_done, b.steps_total) == (40, 1000)
    assert b.rate is not None and 40 / 20 <= b.rate <= 10.0, b.rate
    assert a.recorded_at <= time.time()
