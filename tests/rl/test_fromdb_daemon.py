"""The update scheme on the real test cluster: the live daemon (`--policy rl`) records a burst
of jobs, `slurm-rl train --from-db DB --init CKPT` turns what it recorded into a trace (submit,
run time, GPUs, intent) and fine-tunes the checkpoint on it in the simulator; the result is a
checkpoint the `rl` policy loads (the daemon's SIGHUP reload is tested in
tests/daemon/test_rl_daemon.py)."""

from __future__ import annotations

import csv
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from cluster_jobs import Jobs, daemon_argv, wait_for

from slurm_rl.core import Intent
from slurm_rl.policies.rl import default_checkpoint
from slurm_rl.policies.rl import new as new_rl

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
pytest.importorskip("torch")

from slurm_rl.rl.cli import train_command  # noqa: E402


@pytest.fixture
def jobs(slurm_cluster: dict[str, str]) -> Iterator[Jobs]:
    j = Jobs(prefix=f"h3db{uuid.uuid4().hex[:6]}-")
    yield j
    j.cancel_all()


def ended(db: Path, ids: list[str]) -> bool:
    if not db.exists():
        return False
    con = sqlite3.connect(db)
    try:
        done = con.execute(f"SELECT COUNT(*) FROM jobs WHERE end_time IS NOT NULL AND job_id IN "
                           f"({','.join('?' * len(ids))})", ids).fetchone()[0]
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()
    return bool(done == len(ids))


def test_fine_tune_on_what_the_daemon_recorded(jobs: Jobs, tmp_path: Path) -> None:
    db = tmp_path / "daemon.db"
    log = (tmp_path / "daemon.log").open("w")
    proc = subprocess.Popen(daemon_argv(db, jobs.prefix, "--interval", "1", policy="rl"),
                            stderr=log, text=True)
    try:
        # 6 x 4 GPUs then 3 x 2 GPUs with a deadline: 30 GPUs asked of 16, so jobs queue.
        big = [jobs.submit(f"big{i}", intent=Intent(total_steps=100, model="resnet50"), gpus=4,
                           sleep=2) for i in range(6)]
        deadline = time.time() + 300
        small = [jobs.submit(f"dl{i}", intent=Intent(deadline=deadline), gpus=2, sleep=1)
                 for i in range(3)]
        wait_for(lambda: ended(db, big + small), 180, "the daemon to record every job's end",
                 step=1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log.close()

    out = tmp_path / "ft" / "ft.pt"
    res = CliRunner().invoke(train_command, ["--from-db", str(db), "--init",
                                             str(default_checkpoint()), "--out", str(out),
                                             "--iterations", "2"])
    assert res.exit_code == 0, res.output
    assert f"{db}: " in res.output and " recorded jobs over " in res.output, res.output

    with (tmp_path / "ft" / "ft.trace.csv").open() as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    # Other sessions' jobs on the shared cluster are recorded too (they held GPUs): look at ours.
    assert set(big + small) <= set(rows)
    for jid in big:
        assert rows[jid]["num_gpu"] == "4" and rows[jid]["num_iteration"] == "100"
        assert rows[jid]["model_name"] == "resnet50" and rows[jid]["deadline"] == ""
        # `sleep 2` with whole-second start and end times: at least 2 s; a few more at most
        # (launch and completion on a loaded host)
        assert 2.0 <= float(rows[jid]["duration"]) <= 5.0, rows[jid]
    assert min(float(r["submission_time"]) for r in rows.values()) == 0.0
    subs = [float(rows[j]["submission_time"]) for j in big + small]
    assert subs == sorted(subs) and subs[-1] - subs[0] < 30
    for jid in small:
        assert rows[jid]["num_gpu"] == "2" and float(rows[jid]["deadline"]) > 200

    import torch

    blob = torch.load(out, weights_only=True)
    assert blob["meta"]["from_db"] == str(db) and blob["meta"]["recorded_jobs"] == len(rows)
    assert blob["meta"]["init"] == str(default_checkpoint())
    curve = (tmp_path / "ft" / "ft.csv").read_text().splitlines()
    assert len(curve) == 1 + 3  # header, iteration 0 (the init weights), 2 iterations
    assert new_rl(checkpoint=str(out)).name == "rl"  # what the daemon loads on SIGHUP
