"""benchmarks/sim_to_real.py's pure parts for an elastic replay: the workload in steps, the
parser of a job's log, and the job itself (sim_to_real_job.py) run as a process: its rate at
its GPU count, the checkpoint on SIGUSR1 and the resume from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.sim_to_real import (  # noqa: E402
    GPUS_PER_NODE,
    JOB,
    compressed_workload,
    job_runs,
    signal_waits,
    step_rate,
)


def test_job_runs_reads_each_start_and_the_end() -> None:
    log = ("start n=0 gpus=1 restart=0 t=10.5\n"
           "checkpoint n=40 t=14.0\n"
           "start n=40 gpus=4 restart=1 t=19.25\n"
           "garbage line t=\n"
           "done n=100 t=25.0\n")
    assert job_runs(log) == (((10.5, 1), (19.25, 4)), 25.0)


def test_job_runs_of_a_job_that_did_not_finish_has_no_end() -> None:
    assert job_runs("start n=0 gpus=2 restart=0 t=1.0\ncheckpoint n=3 t=2.0\n") == (
        ((1.0, 2),), None)
    assert job_runs("") == ((), None)


def test_signal_waits_run_from_the_last_checkpoint_to_the_next_start() -> None:
    log = ("start n=0 gpus=1 restart=0 t=10.0\n"
           "checkpoint n=20 t=12.0\n"          # a resize dropped after the signal: runs on
           "checkpoint n=40 t=15.5\n"
           "start n=40 gpus=4 restart=1 t=20.25\n"
           "checkpoint n=90 t=30.0\n"
           "start n=90 gpus=2 restart=2 t=31.0\n"
           "done n=100 t=33.0\n")
    assert signal_waits(log) == (4.75, 1.0)
    # A second signal within the grace (here 3 s) is not the one the restart waited for.
    assert signal_waits(log.replace("checkpoint n=40 t=15.5", "checkpoint n=40 t=18.5"),
                        grace_s=3.0) == (8.25, 1.0)
    assert signal_waits("start n=0 gpus=1 restart=0 t=1.0\ndone n=5 t=2.0\n") == ()


def test_the_elastic_workload_is_the_same_work_in_steps() -> None:
    rigid = compressed_workload("itp-deadline-cluster10.csv", 100, 30, 12.0, 4, 45, 2.0)
    stepped = compressed_workload("itp-deadline-cluster10.csv", 100, 30, 12.0, 4, 45, 2.0,
                                  elastic_every=2)
    assert [j.steps for j in rigid] == [None] * len(rigid)
    assert not any(j.elastic for j in rigid)
    for i, (r, s) in enumerate(zip(rigid, stepped, strict=True)):
        assert (s.name, s.submit_offset) == (r.name, r.submit_offset)
        assert s.steps == round(r.seconds * step_rate(r.gpus))
        assert s.elastic == (i % 2 == 0 and r.gpus <= GPUS_PER_NODE)
        if s.elastic:
            # Starts at half its GPUs (at least 1) and may grow to a node's.
            assert (s.gpus, s.gpus_max) == (max(1, r.gpus // 2), GPUS_PER_NODE)
        else:
            assert (s.gpus, s.gpus_max) == (r.gpus, None)
        # Its seconds are its run at the count it starts at.
        assert s.seconds == round(s.steps / step_rate(s.gpus))
    assert any(s.elastic for s in stepped) and not all(s.elastic for s in stepped)


def _job(folder: Path, steps: int, gpus: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["CUDA_VISIBLE_DEVICES"] = gpus
    return subprocess.Popen([sys.executable, str(JOB), "--dir", str(folder), "--steps",
                             str(steps), "--rates", "100,200,300,400"], env=env)


def test_the_job_runs_at_the_rate_of_its_gpus(tmp_path: Path) -> None:
    began = time.time()
    assert _job(tmp_path, 100, "0,1").wait(timeout=30) == 0  # 200 steps/s: 0.5 s
    runs, end = job_runs((tmp_path / "log").read_text())
    assert [g for _, g in runs] == [2] and end is not None
    assert 0.45 <= end - runs[0][0] <= 1.5
    assert began <= runs[0][0] <= end <= time.time()


def test_the_job_checkpoints_on_sigusr1_and_goes_on_from_there(tmp_path: Path) -> None:
    p = _job(tmp_path, 1000, "0")  # 100 steps/s: 10 s
    log = tmp_path / "log"
    for _ in range(100):
        if log.is_file() and log.read_text().startswith("start"):
            break
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGUSR1)
    for _ in range(100):
        if "checkpoint" in log.read_text():
            break
        time.sleep(0.05)
    p.kill()  # a requeue: what it did after the checkpoint is lost
    p.wait(timeout=30)
    saved = int((tmp_path / "ck").read_text())
    assert 50 <= saved <= 400
    began = time.time()
    assert _job(tmp_path, saved + 100, "0,1,2,3").wait(timeout=30) == 0  # 100 left at 400/s
    text = log.read_text()
    runs, end = job_runs(text)
    assert [g for _, g in runs] == [1, 4] and end is not None
    assert f"start n={saved} gpus=4 restart=0" in text
    assert f"done n={saved + 100}" in text
    assert end - runs[1][0] == pytest.approx(0.25, abs=0.5)
    assert runs[1][0] >= began


def test_the_daemons_cycles_are_read_with_each_start(tmp_path: Path) -> None:
    from datetime import datetime

    from benchmarks.sim_to_real_logs import daemon_timing
    log = tmp_path / "daemon.log"
    log.write_text(
        "2026-12-07 02:58:35,239 INFO slurm-rl daemon: policy deadline\n"
        "2026-12-07 02:58:35,909 INFO cycle 1: 50 jobs; made 0 job updates in 0 commands | "
        "poll 0.046s total 0.656s\n"
        "2026-12-07 02:58:36,330 INFO cycle 2: 53 jobs; made 3 job updates in 3 commands | "
        "poll 0.040s total 0.083s\n"
        "2026-12-07 02:58:37,900 INFO cycle 3: 53 jobs; made 1 job updates in 1 commands | "
        "poll 0.040s total 0.100s\n")
    t = daemon_timing(log)
    assert t is not None
    base = datetime.strptime("2026-12-07 02:58:35", "%Y-%m-%d %H:%M:%S").timestamp()
    # Each cycle's instant: its beginning (the line's time less its total) plus half its poll
    # (squeue answers during the poll); its delay: the rest of the cycle.
    assert t.starts == pytest.approx((base + 0.276, base + 1.267, base + 2.82), abs=1e-3)
    assert (t.cycles, t.delay_s) == (3, pytest.approx(0.0715, abs=1e-3))
    assert t.phase_s == pytest.approx(round((base + 0.276) % 1.0, 3))
    assert t.delays == pytest.approx((0.633, 0.063, 0.080), abs=1e-6)


def test_the_daemons_database_gives_each_cycles_start_and_each_restarts_grace(
        tmp_path: Path) -> None:
    # The log line of a cycle comes after its restarts (not in its total): the snapshot's own
    # time, decisions.at, is the start. Each restart's grace runs from its signal to its requeue.
    import sqlite3

    from benchmarks.sim_to_real_logs import daemon_timing
    log = tmp_path / "daemon.log"
    log.write_text(
        "2026-12-07 02:58:35,909 INFO cycle 1: 50 jobs; made 0 job updates in 0 commands | "
        "poll 0.046s total 0.100s\n"
        "2026-12-07 02:58:39,330 INFO cycle 2: 53 jobs; made 3 job updates in 3 commands | "
        "poll 0.040s total 0.083s\n")
    db = tmp_path / "d.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE decisions (id INTEGER, cycle_id INTEGER, at DOUBLE)")
        con.executemany("INSERT INTO decisions VALUES (?, ?, ?)", [(1, 1, 100.0), (2, 2, 101.0)])
        con.execute("CREATE TABLE actions (id INTEGER, kind TEXT, status TEXT, "
                    "started_at DOUBLE)")
        con.execute("CREATE TABLE action_jobs (action_id INTEGER, job_id TEXT)")
        rows = [(1, "PREEMPT_SIGNAL", "DONE", 100.2, "7"),
                (2, "RESIZE_SIGNAL", "DONE", 100.25, "8"),
                (3, "PREEMPT_REQUEUE", "DONE", 103.2, "7"),
                (4, "REQUEUE_HOLD", "DONE", 103.5, "8"),
                (5, "PREEMPT_REQUEUE", "DONE", 109.0, "7")]  # no signal before: not a grace
        con.executemany("INSERT INTO actions VALUES (?, ?, ?, ?)", [r[:4] for r in rows])
        con.executemany("INSERT INTO action_jobs VALUES (?, ?)", [(r[0], r[4]) for r in rows])
    t = daemon_timing(log, db)
    assert t is not None
    assert t.starts == pytest.approx((100.023, 101.02), abs=1e-6)
    assert t.delays == pytest.approx((0.077, 0.063), abs=1e-6)
    assert t.graces == pytest.approx((3.0, 3.25))


def test_a_replay_jobs_deadline_is_the_one_rlsbatch_wrote() -> None:
    # `--rl-deadline +20s` asked at x.7 s is whole epoch seconds in the intent: the daemon
    # ranks by that, so the simulator must too (two such deadlines can tie live).
    from benchmarks.sim_to_real import _stated_deadline
    assert _stated_deadline("x {rl1:d=1796692775,s=166,m=resnet50}", 1796692775.7) == 1796692775
    assert _stated_deadline("no intent", 1796692775.7) == 1796692775.7
    assert _stated_deadline("{rl1:s=5}", None) is None
