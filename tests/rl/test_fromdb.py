"""`train --from-db` without Slurm (rl/fromdb.py, sim/recorded.py): rows -> trace jobs, the
written trace reads back through the simulator's loader, and a missing, non-SQLite, foreign or
empty database is one clear line naming the file, with nothing written. The database the real
daemon filled is tested in test_fromdb_daemon.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from click.testing import CliRunner

from slurm_rl.core import JobState
from slurm_rl.db.engine import make_engine
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import Job
from slurm_rl.policies.rl import default_checkpoint
from slurm_rl.rl.fromdb import TRACE_FORMAT, write_trace
from slurm_rl.sim.recorded import trace_job
from slurm_rl.sim.trace import TraceJob, load

pytest.importorskip("torch")

from slurm_rl.rl.cli import train_command  # noqa: E402

T0 = 1_790_000_000.0


def fake_job(**kw: Any) -> Job:
    """A fake jobs row (the attributes `trace_job` reads), finished unless told otherwise."""
    base: dict[str, Any] = {
        "job_id": "17", "user": "ana", "state": JobState.COMPLETED, "submit_time": T0 + 10,
        "start_time": T0 + 12, "end_time": T0 + 42, "gpus": 2, "time_limit_s": 60.0,
        "deadline": None, "gpus_min": None, "gpus_max": None, "elastic": None,
        "total_steps": None, "model": None, "batch_size": None}
    return cast(Job, SimpleNamespace(**{**base, **kw}))


def test_a_finished_job_becomes_a_trace_job() -> None:
    job = trace_job(fake_job(deadline=T0 + 100, gpus_min=1, gpus_max=4, elastic=True,
                             total_steps=500, model="resnet50", batch_size=64), T0)
    assert job == TraceJob(id="17", submit=10.0, duration=30.0, gpus=2, time_limit_s=60.0,
                           deadline=100.0, total_steps=500, model="resnet50", batch_size=64,
                           user="ana", gpus_min=1, gpus_max=4, elastic=True)


def test_values_that_make_no_trace_job_are_dropped_not_the_job() -> None:
    job = trace_job(fake_job(time_limit_s=0.0, total_steps=-3, gpus_min=4, gpus_max=2), T0)
    assert isinstance(job, TraceJob)
    assert (job.time_limit_s, job.total_steps, job.gpus_min, job.gpus_max) == (
        None, None, None, None)


@pytest.mark.parametrize(("kw", "why"), [
    ({"state": JobState.RUNNING, "end_time": None}, "still pending or running"),
    ({"state": JobState.PENDING, "start_time": None, "end_time": None},
     "still pending or running"),
    ({"state": JobState.CANCELLED, "start_time": None}, "ended without starting"),
    ({"end_time": T0 + 5}, "inconsistent times"),
    ({"gpus": 0}, "no GPUs"),
])
def test_jobs_that_did_not_run_are_skipped_with_a_reason(kw: dict[str, Any], why: str) -> None:
    assert trace_job(fake_job(**kw), T0) == why


def test_the_written_trace_reads_back(tmp_path: Path) -> None:
    jobs = tuple(j for j in (trace_job(fake_job(job_id="1"), T0),
                             trace_job(fake_job(job_id="2", submit_time=T0 + 11.5,
                                                deadline=T0 + 90, gpus_min=2, gpus_max=8,
                                                elastic=1, total_steps=10, model="bert",
                                                batch_size=32), T0))
                 if isinstance(j, TraceJob))
    write_trace(jobs, tmp_path / "t.csv")
    assert load(tmp_path / "t.csv", TRACE_FORMAT).jobs == jobs


def _train(db: Path, out: Path) -> Any:
    return CliRunner().invoke(train_command, ["--from-db", str(db), "--init",
                                              str(default_checkpoint()), "--out", str(out)])


def _one_line_error(res: Any, text: str, out: Path) -> None:
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], res.output
    assert not list(out.parent.glob(out.stem + "*"))  # nothing written


def test_a_missing_database(tmp_path: Path) -> None:
    db = tmp_path / "nope.db"
    _one_line_error(_train(db, tmp_path / "o" / "ft.pt"), f"{db}: no such database file",
                    tmp_path / "o" / "ft.pt")
    assert not db.exists()  # never created


def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    db.write_bytes(b"hello, not a database" * 50)
    _one_line_error(_train(db, tmp_path / "ft.pt"), f"{db}: not an SQLite database",
                    tmp_path / "ft.pt")


def test_a_foreign_database(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE jobs (id INTEGER)")
    con.close()
    _one_line_error(_train(db, tmp_path / "ft.pt"), f"{db}: not a slurm-rl database",
                    tmp_path / "ft.pt")


def test_an_empty_daemon_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    upgrade(make_engine(db))
    _one_line_error(_train(db, tmp_path / "ft.pt"),
                    f"{db}: no job the daemon saw start and end (the jobs table is empty)",
                    tmp_path / "ft.pt")


def test_jobs_that_never_wait_give_nothing_to_fine_tune_on(tmp_path: Path) -> None:
    db = tmp_path / "one.db"
    upgrade(make_engine(db))
    con = sqlite3.connect(db)
    con.execute("INSERT INTO nodes (name, state, gpus_total, gpus_alloc, first_seen_at, "
                "last_seen_at) VALUES ('node1', 'idle', 4, 0, 0, 0)")
    con.execute("INSERT INTO jobs (job_id, user, name, partition, state, state_changed_at, "
                "submit_time, first_seen_at, start_time, end_time, gpus, nodes, managed, "
                "intent_edited) VALUES ('1', 'ana', 'x', 'gpu', 'COMPLETED', 0, ?, 0, ?, ?, 2, "
                "1, 1, 0)", (T0, T0 + 1, T0 + 30))
    con.commit()
    con.close()
    _one_line_error(_train(db, tmp_path / "ft.pt"), f"{db}: on 1 nodes x 4 GPUs no recorded "
                    "job ever waits while another could start", tmp_path / "ft.pt")


def test_from_db_needs_init(tmp_path: Path) -> None:
    res = CliRunner().invoke(train_command, ["--from-db", str(tmp_path / "d.db"), "--out",
                                             str(tmp_path / "ft.pt")])
    assert res.exit_code == 2 and "--from-db needs --init" in res.output


def test_an_init_checkpoint_that_does_not_load(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage" * 20)
    res = CliRunner().invoke(train_command, ["--from-db", str(tmp_path / "d.db"), "--init",
                                             str(bad), "--out", str(tmp_path / "ft.pt")])
    assert res.exit_code == 2 and f"--init: checkpoint {bad} does not load" in res.output
