"""`slurm-rl status`: the forecast (pure), and the queue read by an unprivileged user from the
database a daemon recorded on the test cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, run_daemon, squeue, wait_for

from slurm_rl.core import Intent, ServiceClass
from slurm_rl.daemon.forecast import Forecast, Running, Waiting, forecast

AS_USER = Path(__file__).with_name("as_user.py")


def test_the_forecast_keeps_the_order_and_backfills_what_fits() -> None:
    plan = forecast(100.0, 8, [Running(job_id="r", gpus=6, end=160.0)],
                    [Waiting(job_id="a", gpus=4, duration_s=50.0),    # waits for r
                     Waiting(job_id="b", gpus=2, duration_s=60.0),    # fits now, ends at 160
                     Waiting(job_id="c", gpus=2, duration_s=100.0),   # would delay a: after it
                     Waiting(job_id="d", gpus=9, duration_s=10.0)])   # never fits
    assert plan["r"] == Forecast(start=None, finish=160.0)
    assert plan["a"] == Forecast(start=160.0, finish=210.0)
    assert plan["b"] == Forecast(start=100.0, finish=160.0)
    assert plan["c"] == Forecast(start=160.0, finish=260.0)
    assert plan["d"] == Forecast(start=None, finish=None)


def test_unknown_limits_hold_gpus_for_ever() -> None:
    plan = forecast(0.0, 4, [Running(job_id="r", gpus=4, end=None)],
                    [Waiting(job_id="a", gpus=1, duration_s=10.0)])
    assert plan["r"].finish is None and plan["a"] == Forecast(start=None, finish=None)
    plan = forecast(0.0, 4, [], [Waiting(job_id="a", gpus=2, duration_s=None),
                                 Waiting(job_id="b", gpus=2, duration_s=5.0),
                                 Waiting(job_id="c", gpus=1, duration_s=5.0)])
    assert plan["a"] == Forecast(start=0.0, finish=None)
    assert plan["b"] == Forecast(start=0.0, finish=5.0)
    assert plan["c"] == Forecast(start=5.0, finish=10.0)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder any user may enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="slurm-rl-status-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(AS_USER), *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slurm
def test_any_user_reads_the_queue_the_daemon_recorded(jobs: Jobs, shared_dir: Path) -> None:
    db = shared_dir / "s.db"
    now = int(time.time())
    running = jobs.submit("run", sleep=120, minutes=3)
    wait_for(lambda: squeue([running], "State").get(running, [""])[0] == "RUNNING", 60,
             "the running job to start")
    pending = [jobs.submit(f"p{i}", gpus=1 + i % 2, minutes=10, begin="now+3600",
                           intent=Intent(deadline=float(now + 7200 - 600 * i)))
               for i in range(3)]
    besteffort = jobs.submit("be", begin="now+3600",
                             intent=Intent(service_class=ServiceClass.BESTEFFORT))
    run_daemon(db, jobs.prefix)
    out = as_nobody("status", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["policy"] == "deadline" and data["dry_run"] is False
    assert data["gpus_total"] >= 16 and data["as_of"] > now - 5
    rows = {r["job_id"]: r for r in data["rows"]}
    ours = [r for r in data["rows"] if r["name"].startswith(jobs.prefix)]
    # Pending first, in the daemon's order: the earliest deadline first, best effort last.
    order = [r["job_id"] for r in ours if r["state"] == "PENDING"]
    assert order == [pending[2], pending[1], pending[0], besteffort], order
    ranks = [rows[j]["rank"] for j in order]
    assert ranks == sorted(ranks) and all(isinstance(r, int) for r in ranks)
    for i, job in enumerate(pending):
        r = rows[job]
        assert r["managed"] and r["reason"] and r["service_class"] == "standard"
        assert r["gpus"] == 1 + i % 2 and r["deadline"] == now + 7200 - 600 * i
        assert r["predicted_start"] is not None
        assert r["predicted_finish"] == pytest.approx(r["predicted_start"] + 600)
        assert r["slack_s"] == pytest.approx(r["deadline"] - r["predicted_finish"])
    assert rows[besteffort]["service_class"] == "besteffort"
    assert rows[besteffort]["slack_s"] is None
    run = rows[running]
    assert run["state"] == "RUNNING" and run["rank"] is None and run["reason"] == "running"
    assert run["predicted_finish"] == pytest.approx(run["predicted_start"] + 180)

    table = as_nobody("status", "--db", str(db), "--user", ours[0]["user"], "--all")
    assert table.returncode == 0, table.stderr
    assert "rank" in table.stdout and "slack" in table.stdout
    for job in (*pending, besteffort, running):
        assert job in table.stdout

    db.chmod(0o600)  # the site keeps it private: one clear line, exit 1
    refused = as_nobody("status", "--db", str(db))
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"Error: {db}: can not read it (Permission denied)"


def test_no_database_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run([SLURM_RL, "status", "--db", str(tmp_path / "none.db")],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"Error: {tmp_path / 'none.db'}: no slurm-rl database there "
                                  "(has the daemon run?)")


def test_the_finish_comes_from_the_profile_not_only_the_limit() -> None:
    from slurm_rl.daemon.status import _expected_end, _run_s
    from slurm_rl.db.models import Job

    job = Job(job_id="1", time_limit_s=365 * 86400.0, total_steps=20000, model="resnet50",
              batch_size=None, start_time=1000.0, gpus=1)
    run_s = _run_s(job, 1)
    assert run_s is not None and 2000 < run_s < 4000  # resnet50 at ~6.8 it/s on one GPU
    assert _run_s(job, 4) is not None and _run_s(job, 4) < run_s  # type: ignore[operator]
    assert _expected_end(job, None) == pytest.approx(1000.0 + run_s)
    job.time_limit_s = 600.0  # slurmctld ends it at its limit
    assert _run_s(job, 1) == 600.0 and _expected_end(job, None) == 1600.0
    plain = Job(job_id="2", time_limit_s=3600.0, total_steps=None, model=None, gpus=1,
                start_time=None)
    assert _run_s(plain, 1) == 3600.0
    unknown = Job(job_id="3", time_limit_s=None, total_steps=500, model="no-such-model", gpus=1)
    assert _run_s(unknown, 1) is None


def test_far_dates_show_their_year() -> None:
    from slurm_rl.daemon.status import _clock

    now = time.mktime((2026, 12, 3, 12, 0, 0, 0, 0, -1))
    assert _clock(now + 3600, now) == "12-03 13:00"
    assert _clock(now + 365 * 86400, now) == "2027-12-03 12:00"
    assert _clock(None, now) == "-"


def test_an_empty_queue_says_so(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    subprocess.run([SLURM_RL, "db", "upgrade", "--db", str(db)], check=True,
                   capture_output=True, timeout=60)
    proc = subprocess.run([SLURM_RL, "status", "--db", str(db)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["slurm-rl: no decision recorded",
                                        "no pending or running jobs"]
    proc = subprocess.run([SLURM_RL, "status", "--user", "alice"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SLURM_RL_DB": str(db)})
    assert proc.stdout.splitlines()[-1] == "no pending or running jobs of user alice"


def test_a_job_name_is_never_read_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_rl.daemon.status import QueueStatus, StatusRow, print_table

    def row(i: int, name: str, user: str = "alice", reason: str = "ranked") -> StatusRow:
        return StatusRow(job_id=str(i), user=user, name=name, state="PENDING", managed=True,
                         rank=i, service_class="standard", deadline=None, slack_s=None,
                         predicted_start=None, predicted_finish=None, gpus=1, reason=reason)

    hostile = ("x[/]", "[white on white]hidden", "[link=http://e.x]ok[/link]", "a\x1b[2Jb")
    rows = tuple(row(i, n) for i, n in enumerate(hostile, 1)) + (
        row(9, "honest", user="[/]", reason="[bold]boosted[/bold]"),)
    print_table(QueueStatus(database="db", as_of=time.time(), policy="sjf", dry_run=False,
                            gpus_total=8, rows=rows, guard="job [/] starves"),
                user=None, limit=None)
    out = capsys.readouterr().out
    assert "x[/]" in out and "[white on white]hidden" in out and "[link=http://e.x]ok" in out
    assert "\x1b[2J" not in out and "a?[2Jb" in out
    assert "[bold]boosted" in out and "job [/] starves" in out
