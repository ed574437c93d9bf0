"""`slurm-rl replay`: jobs a daemon recorded on the test cluster, replayed under another policy
next to what happened; the window parser and the outcome arithmetic (pure)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, daemon_argv, wait_for

from slurm_rl.core import Intent
from slurm_rl.replay import outcome
from slurm_rl.sim.recorded import parse_span


def test_spans() -> None:
    assert parse_span("7d") == 7 * 86400 and parse_span("12h") == 43200
    assert parse_span("30m") == 1800 and parse_span("90s") == 90 and parse_span("2w") == 1209600
    assert parse_span("1.5h") == 5400
    for bad in ("7", "d", "-1d", "0h", "7y", "7 days"):
        with pytest.raises(ValueError, match="is not a time span"):
            parse_span(bad)


def test_outcome_arithmetic() -> None:
    # (submit, start, end, gpus, deadline): two jobs on 4 GPUs over 10 s.
    o = outcome("x", [(0.0, 0.0, 4.0, 2, 5.0), (2.0, 4.0, 10.0, 4, 8.0)], 4)
    assert o.jobs == 2 and o.avg_jct_s == pytest.approx((4 + 8) / 2)
    assert (o.deadline_jobs, o.deadlines_met) == (2, 1)
    assert o.gpu_utilization == pytest.approx((2 * 4 + 4 * 6) / (4 * 10))
    assert o.jct_s == (4.0, 8.0)


def _recorded(db: Path, prefix: str) -> list[tuple[float, float, float, float | None]]:
    con = sqlite3.connect(db)
    try:
        return [tuple(r) for r in con.execute(  # type: ignore[misc]
            "SELECT submit_time, start_time, end_time, deadline FROM jobs "
            "WHERE name LIKE ? AND state = 'COMPLETED' AND end_time IS NOT NULL",
            (prefix + "%",))]
    except sqlite3.OperationalError:  # the daemon has not made its tables yet
        return []
    finally:
        con.close()


@pytest.mark.slurm
def test_replay_of_recorded_jobs_next_to_what_happened(jobs: Jobs, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    now = int(time.time())
    log = (tmp_path / "daemon.log").open("w")
    proc = subprocess.Popen(daemon_argv(db, jobs.prefix, "--interval", "0.5"), stderr=log)
    try:
        for i in range(8):
            jobs.submit(f"j{i}", gpus=(1, 2, 4, 4)[i % 4], sleep=1 + i % 3,
                        intent=Intent(deadline=float(now + (5 if i % 2 else 3600))),
                        extra=("--nodes=2",) if i % 4 == 3 else ())
        wait_for(lambda: len(_recorded(db, jobs.prefix)) == 8, 120,
                 "8 completed jobs recorded", step=1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log.close()
    rows = _recorded(db, jobs.prefix)
    plot = tmp_path / "replay.png"
    out = subprocess.run([SLURM_RL, "replay", "--db", str(db), "--since", "1h", "--policy",
                          "sjf", "--only-name-prefix", jobs.prefix, "--plot", str(plot),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["policy_that_ran"] == "deadline"
    assert (data["nodes"], data["gpus_per_node"]) >= (4, 4)
    happened, as_ran, what_if = data["outcomes"]
    assert happened["label"] == "what happened" and happened["jobs"] == 8
    assert happened["avg_jct_s"] == pytest.approx(sum(e - s for s, _st, e, _d in rows) / 8)
    assert happened["deadline_jobs"] == 8
    assert happened["deadlines_met"] == sum(1 for _s, _st, e, d in rows if d and e <= d)
    assert as_ran["label"] == "simulated: deadline (as it ran)"
    assert what_if["label"] == "simulated: sjf"
    for o in (as_ran, what_if):
        assert o["jobs"] == 8 and o["avg_jct_s"] > 0 and 0 < o["gpu_utilization"] <= 1
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"

    table = subprocess.run([SLURM_RL, "replay", "--db", str(db), "--since", "1h", "--policy",
                            "fifo", "--only-name-prefix", jobs.prefix],
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "avg JCT" in table.stdout and "simulated: fifo" in table.stdout
    assert "deadlines met" in table.stdout and "what happened" in table.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "7x", "--policy", "sjf"], "Invalid value for '--since': '7x' is not a time span"),
    (["--policy", "nope"], "Invalid value for '--policy': unknown policy 'nope'"),
    (["--policy", "sjf", "--policy-option", "x"], "Invalid value for '--policy-option'"),
])
def test_bad_input_is_a_usage_error(tmp_path: Path, args: list[str], message: str) -> None:
    out = subprocess.run([SLURM_RL, "replay", "--db", str(tmp_path / "x.db"), *args],
                         capture_output=True, text=True)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_an_empty_window_is_one_line(tmp_path: Path) -> None:
    from slurm_rl.db.engine import make_engine
    from slurm_rl.db.migrate import upgrade

    engine = make_engine(tmp_path / "e.db")
    upgrade(engine)
    engine.dispose()
    out = subprocess.run([SLURM_RL, "replay", "--db", str(tmp_path / "e.db"), "--policy",
                          "sjf"], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.startswith("Error: no finished jobs recorded in the last 7d in "), out.stderr


def _database(path: Path, nodes: dict[str, int],
              jobs: list[tuple[str, float, float, float, int]]) -> None:
    """A daemon database holding `nodes` (name: GPUs) and finished `jobs`
    (id, submit, start, end, GPUs), as the daemon records them."""
    from slurm_rl.core import JobState
    from slurm_rl.db.engine import make_engine, make_session_factory
    from slurm_rl.db.migrate import upgrade
    from slurm_rl.db.models import Job, Node
    from slurm_rl.states import NodeState

    engine = make_engine(path)
    upgrade(engine)
    now = time.time()
    with make_session_factory(engine)() as session:
        session.add_all(Node(name=name, state=NodeState.IDLE, gpus_total=g, gpus_alloc=0,
                             first_seen_at=now, last_seen_at=now) for name, g in nodes.items())
        session.add_all(Job(job_id=job_id, user="u", name=f"r-{job_id}", partition="gpu",
                            state=JobState.COMPLETED, state_changed_at=now + end,
                            submit_time=now + submit, first_seen_at=now + submit,
                            start_time=now + start, end_time=now + end, gpus=gpus,
                            nodes=1, time_limit_s=600.0, managed=True)
                        for job_id, submit, start, end, gpus in jobs)
        session.commit()
    engine.dispose()


def test_a_job_wider_than_the_replayed_cluster_is_left_out_of_every_column(
        tmp_path: Path) -> None:
    # Nodes of 4, 4 and 8 GPUs replay as 3 x 4 = 12 GPUs: the 16-GPU job that ran across all
    # three can not be simulated, so no column counts it and "left out" says why.
    db = tmp_path / "r.db"
    _database(db, {"n0": 4, "n1": 4, "n2": 8},
              [("1", -600, -590, -500, 2), ("2", -580, -500, -400, 16),
               ("3", -560, -400, -300, 2), ("4", -540, -400, -350, 4)])
    out = subprocess.run([SLURM_RL, "replay", "--db", str(db), "--since", "1h", "--policy",
                          "fifo", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["nodes"], data["gpus_per_node"]) == (3, 4)
    assert [o["jobs"] for o in data["outcomes"]] == [3, 3]
    assert data["skipped"] == {"wider than the replayed 3 x 4 GPUs": 1}
    happened = data["outcomes"][0]
    assert happened["avg_jct_s"] == pytest.approx((100 + 260 + 190) / 3)  # end - submit

    table = subprocess.run([SLURM_RL, "replay", "--db", str(db), "--since", "1h", "--policy",
                            "fifo"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "replay of 3 jobs" in table.stdout
    assert "left out: 1 wider than the replayed 3 x 4 GPUs" in table.stdout
