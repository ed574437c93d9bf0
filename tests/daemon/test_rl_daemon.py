"""The learned policy in the live daemon, on the real cluster: `--policy rl` orders jobs; a
missing or corrupt checkpoint is one clear line and the fallback decides; SIGHUP reloads."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import (
    Jobs,
    daemon_argv,
    policies_decided,
    run_daemon,
    site_factors,
    wait_for,
)

from slurm_rl.core import Intent
from slurm_rl.policies.rl import default_checkpoint

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_rl_orders_jobs_on_the_cluster(jobs: Jobs, tmp_path: Path) -> None:
    ids = [jobs.submit(f"rl{i}", intent=Intent(), begin="now+3600") for i in range(4)]
    twin = jobs.submit("twin", begin="now+3600", outside=True)
    assert site_factors(ids, twin) == dict.fromkeys(ids, 0)
    out = run_daemon(tmp_path / "rl.db", jobs.prefix, policy="rl")
    assert "policy rl," in out.stderr and " ERROR " not in out.stderr, out.stderr
    after = site_factors(ids, twin)
    assert all(after[j] > 0 for j in ids), after
    assert len(set(after.values())) == len(ids), after
    assert policies_decided(tmp_path / "rl.db") == ["rl"]


def test_a_corrupt_checkpoint_is_one_line_and_nothing_from_it(jobs: Jobs,
                                                              tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint" * 10)
    jobs.submit("c", intent=Intent(), begin="now+3600")
    out = run_daemon(tmp_path / "c.db", jobs.prefix, "--policy-option", f"checkpoint={bad}",
                     policy="rl")
    errors = [ln for ln in out.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and f"checkpoint {bad} does not load" in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert policies_decided(tmp_path / "c.db") == ["fifo"]


def test_sighup_loads_a_checkpoint_that_appeared(jobs: Jobs, tmp_path: Path) -> None:
    ckpt = tmp_path / "later.pt"
    db = tmp_path / "h.db"
    jobs.submit("h0", intent=Intent(), begin="now+3600")
    log = (tmp_path / "daemon.log").open("w")
    proc = subprocess.Popen(
        daemon_argv(db, jobs.prefix, "--interval", "1", "--policy-option",
                    f"checkpoint={ckpt}", policy="rl"), stderr=log, text=True)
    try:
        wait_for(lambda: "fifo" in policies_decided(db), 60, "a cycle decided by the fallback")
        shutil.copy(default_checkpoint(), ckpt)
        proc.send_signal(signal.SIGHUP)
        # New jobs make new decisions; the ones after the reload are rl's.
        wait_for(lambda: (jobs.submit(f"h{time.monotonic_ns()}", intent=Intent(),
                                      begin="now+3600") and False)
                 or policies_decided(db)[-1:] == ["rl"], 60, "rl to decide after SIGHUP",
                 step=1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log.close()
    text = (tmp_path / "daemon.log").read_text()
    assert "SIGHUP: reloading the policy" in text and "policy rl loaded" in text, text
    assert text.count(" ERROR ") == 1, text  # the missing checkpoint, once
