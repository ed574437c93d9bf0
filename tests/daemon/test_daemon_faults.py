"""End to end on the real cluster: SIGKILL between an action's PLANNED and DONE records, and
slurmctld going away under a running daemon."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from cluster_jobs import Jobs, daemon_argv, run_daemon, sprio_site, squeue, wait_for

from slurm_rl.core import Intent

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CLUSTER = Path(__file__).resolve().parents[2] / "docker" / "cluster"
ENGINE = os.environ.get("SLURM_RL_ENGINE", "native")
# The docker engine's slurmctld container (docker/cluster_docker.py names it NAME-slurmctld).
CTLD_CONTAINER = f"{os.environ.get('SLURM_RL_DOCKER_NAME', 'slurm-rl')}-slurmctld"
# How long a client command takes to fail while slurmctld is down: at once on the native
# cluster (connection refused on localhost), about 30 s on the docker engine (the stopped
# container's address is gone, and Slurm's client retries its connect until it gives up).
OUTAGE_S = 90.0 if ENGINE == "docker" else 20.0


def actions(db: Path) -> list[tuple[int, str, str, list[str]]]:
    """(id, status, SiteFactor value, job ids) of every action, oldest first."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, status, argv FROM actions ORDER BY id").fetchall()
        links = con.execute("SELECT action_id, job_id FROM action_jobs").fetchall()
    finally:
        con.close()
    jobs: dict[int, list[str]] = {}
    for aid, job in links:
        jobs.setdefault(aid, []).append(job)
    out = []
    for aid, status, argv in rows:
        value = argv.split("SiteFactor=")[1].split('"')[0] if "SiteFactor=" in argv else ""
        out.append((aid, status, value, sorted(jobs.get(aid, []))))
    return out


def check_log_against_slurm(db: Path, ids: Sequence[str]) -> None:
    """Nothing left PLANNED, no value issued twice in a row to a job (a repeat), and Slurm shows
    each job's last DONE value (nothing lost)."""
    rows = actions(db)
    assert [r for r in rows if r[1] == "planned"] == []
    last: dict[str, str] = {}
    for _, status, value, jobs in rows:
        if status != "done":
            continue
        for j in jobs:
            assert last.get(j) != value, f"job {j}: SiteFactor={value} issued twice"
            last[j] = value
    shown = sprio_site(ids)
    assert {j: str(shown.get(j)) for j in ids} == {j: last.get(j) for j in ids}


def kill_at(failpoint: str, db: Path, prefix: str) -> None:
    """Run one daemon cycle that stops dead at `failpoint`, and SIGKILL it there."""
    proc = subprocess.Popen(daemon_argv(db, prefix, "--once"), stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "SLURM_RL_FAILPOINT": failpoint})
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if f"failpoint {failpoint}" in line:
                break
        else:
            raise AssertionError(f"daemon exited {proc.wait()} before {failpoint}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def test_sigkill_mid_cycle_repeats_no_action_and_loses_none(jobs: Jobs, tmp_path: Path) -> None:
    # Pending jobs that Slurm considers eligible (so sprio shows their SiteFactor), kept from
    # starting by a small job on the one node they may use.
    blocker = jobs.submit("block", gpus=1, sleep=300)
    node = wait_for(lambda: (r := squeue([blocker], "State,NodeList")[blocker])[0] == "RUNNING"
                    and r[1], 60, "the blocker to run")
    pin = [f"--nodelist={node}"]
    now = time.time()
    ids = [jobs.submit(f"j{i}", gpus=4, extra=pin,
                       intent=Intent(deadline=now + 3600 * (i + 1)) if i % 2 else Intent())
           for i in range(4)]
    db = tmp_path / "kill.db"

    # 1. Killed after scontrol ran, before DONE was written: Slurm has the values.
    kill_at("after_run", db, jobs.prefix)
    assert [r[1] for r in actions(db)] == ["planned"] * 4
    run_daemon(db, jobs.prefix)
    rows = actions(db)
    assert [r[1] for r in rows] == ["done"] * 4, rows   # reconciled, not re-run
    check_log_against_slurm(db, ids)

    # 2. A new, more urgent job moves everyone down a rank; killed after PLANNED, before
    #    scontrol ran: Slurm has none of it.
    ids.append(jobs.submit("urgent", gpus=4, extra=pin, intent=Intent(deadline=now + 1800)))
    kill_at("after_plan", db, jobs.prefix)
    assert [r[1] for r in actions(db)][4:] == ["planned"] * 5
    run_daemon(db, jobs.prefix)
    rows = actions(db)
    assert [r[1] for r in rows][4:] == ["abandoned"] * 5 + ["done"] * 5, rows
    check_log_against_slurm(db, ids)
    # A further cycle has nothing to do.
    assert "made 0 job updates" in run_daemon(db, jobs.prefix).stderr


def _slurmctld_pid() -> int | None:
    try:
        # Read when called: the slurm_cluster fixture sets SLURM_RL_CLUSTER_DIR.
        run = Path(os.environ.get("SLURM_RL_CLUSTER_DIR", "/var/tmp/slurm-rl-cluster")) / "run"
        pid = int((run / "slurmctld.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if comm == "slurmctld" else None


def _stop_slurmctld() -> None:
    """SIGTERM to slurmctld and wait until it is gone: the native launcher's process (its pid
    file), or the docker engine's slurmctld container (`docker stop`: the container's init
    passes SIGTERM on; the container and its StateSaveLocation stay, stopped)."""
    if ENGINE == "docker":
        subprocess.run(["docker", "stop", "-t", "20", CTLD_CONTAINER], check=True,
                       capture_output=True)
        return
    pid = _slurmctld_pid()
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 20, "slurmctld to stop", 0.1)


def _start_slurmctld() -> None:
    """The same command line docker/cluster uses (or `docker start` of the stopped container);
    then wait until the whole cluster is healthy again (nodes re-registered), so that no later
    test, and no other session's fixture, finds it degraded."""
    if ENGINE == "docker":
        subprocess.run(["docker", "start", CTLD_CONTAINER], check=True, capture_output=True)
    elif _slurmctld_pid() is None:
        subprocess.run(["slurmctld", "-f", os.environ["SLURM_CONF"]], check=True)
    wait_for(lambda: subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode
             == 0, 60, "the cluster to be healthy again", 0.2)


def test_daemon_backs_off_while_slurmctld_is_down_and_resumes(jobs: Jobs,
                                                              tmp_path: Path) -> None:
    db = tmp_path / "outage.db"
    config = tmp_path / "slurm-rl.toml"
    config.write_text('[daemon]\ninterval_s = 1.0\nbackoff_initial_s = 0.5\n'
                      'backoff_max_s = 2.0\n')
    jobs.submit("before", intent=Intent(), begin="now+3600")
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(daemon_argv(db, jobs.prefix, "--config", str(config)),
                                stderr=log_file, stdout=log_file)
    log = log_path.read_text
    try:
        wait_for(lambda: "made 1 job updates" in log(), 30, "the first cycle")
        try:
            _stop_slurmctld()
            wait_for(lambda: "slurmctld unavailable" in log(), OUTAGE_S, "the daemon to notice")
            time.sleep(2)  # a few back-off rounds (0.5, 1, 2 s)
            assert proc.poll() is None, log()
            assert log().count("slurmctld unavailable") == 1, log()
        finally:
            _start_slurmctld()
        wait_for(lambda: "slurmctld is back" in log(), 10 + OUTAGE_S, "the daemon to resume")
        # It acts again: a job submitted now gets its SiteFactor.
        new = jobs.submit("after", intent=Intent(deadline=time.time() + 600), begin="now+3600")
        wait_for(lambda: any(new in r[3] and r[1] == "done" for r in actions(db)), 30,
                 "the daemon to act on a new job")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log()
    assert "SIGTERM: finishing the cycle" in log()
    assert [r for r in actions(db) if r[1] == "planned"] == []
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        con.close()
