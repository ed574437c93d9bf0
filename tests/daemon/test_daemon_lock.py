"""One daemon per database: the lock itself, then two real `slurm-rl daemon` processes on the
test cluster (the second exits at once naming the first; no update is ever sent twice)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cluster_jobs import Jobs, daemon_argv, run_daemon, wait_for

from slurm_rl.cli import main
from slurm_rl.core import Intent
from slurm_rl.daemon.cli import EXIT_LOCKED
from slurm_rl.db.guard import DatabaseError
from slurm_rl.db.lock import DatabaseLock, LockHeld, lock_path, read_holder


def test_a_second_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with DatabaseLock.acquire(db) as first:
        mode = stat.S_IMODE(lock_path(db).stat().st_mode)
        assert mode == 0o600
        with pytest.raises(LockHeld) as info:
            DatabaseLock.acquire(db)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(first.holder.started_at))
        assert str(info.value) == (f"another slurm-rl daemon holds {db}: pid {os.getpid()} on "
                                   f"host {socket.gethostname()} since {since}")
    with DatabaseLock.acquire(db):  # released: free again
        pass


def test_a_second_name_for_the_database_is_refused(tmp_path: Path) -> None:
    # A symbolic or hard link would get a lock file of its own and escape the lock.
    db = tmp_path / "x.db"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    (tmp_path / "sym.db").symlink_to(db)
    (tmp_path / "dangling.db").symlink_to(tmp_path / "elsewhere" / "new.db")
    with DatabaseLock.acquire(db):
        for name in ("sym.db", "dangling.db"):
            with pytest.raises(DatabaseError, match="is a symbolic link; refusing to use it"):
                DatabaseLock.acquire(tmp_path / name)
        os.link(db, tmp_path / "hard.db")
        with pytest.raises(DatabaseError, match="has 2 hard links; refusing to use it"):
            DatabaseLock.acquire(tmp_path / "hard.db")
    assert not (tmp_path / "elsewhere").exists()


def test_a_database_others_can_write_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    sqlite3.connect(db).close()
    db.chmod(0o666)
    with pytest.raises(DatabaseError, match=r"writable by group or others \(mode 666\)"):
        DatabaseLock.acquire(db)
    db.chmod(0o644)
    os.chown(db, 1001, -1)
    with pytest.raises(DatabaseError, match="owned by uid 1001, not by this user"):
        DatabaseLock.acquire(db)


def test_a_killed_holder_frees_the_lock_and_children_never_inherit_it(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    code = ("import sys, time, subprocess; from pathlib import Path; "
            "from slurm_rl.db.lock import DatabaseLock; "
            "lock = DatabaseLock.acquire(Path(sys.argv[1])); "
            "child = subprocess.Popen(['sleep', '60'], close_fds=False); "
            "print(child.pid, flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None
    child_pid = int(holder.stdout.readline())
    try:
        with pytest.raises(LockHeld, match=f"pid {holder.pid} "):
            DatabaseLock.acquire(db)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        # The holder's `sleep` child still runs: the descriptor was not inherited (O_CLOEXEC).
        os.kill(child_pid, 0)
        with DatabaseLock.acquire(db) as lock:
            holder_now = read_holder(db)
            assert holder_now is not None and holder_now.pid == lock.holder.pid == os.getpid()
    finally:
        os.kill(child_pid, signal.SIGKILL)


def test_a_planted_lock_file_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    target = tmp_path / "elsewhere"
    target.write_text("")
    lock_path(db).symlink_to(target)
    with pytest.raises(DatabaseError, match="symbolic link"):
        DatabaseLock.acquire(db)
    lock_path(db).unlink()
    lock_path(db).write_text("")
    os.chown(lock_path(db), 65534, 65534)  # as if another user created it first
    with pytest.raises(DatabaseError, match="owner uid 65534"):
        DatabaseLock.acquire(db)


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "-inf", "1e300", "0.001"])
def test_interval_must_be_positive_and_finite(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["daemon", "--once", "--db", str(tmp_path / "x.db"),
                                       "--interval", value])
    assert result.exit_code == 2
    assert "Invalid value for '--interval': must be between 0.1 and 86400 seconds" in result.output
    assert not (tmp_path / "x.db").exists()


# --- two real daemons --------------------------------------------------------------------------

def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def acted(db: Path) -> bool:
    """The daemon has created its schema and run a cycle that acted (the file exists a moment
    before its tables do: that moment is not an error)."""
    if not db.exists():
        return False
    try:
        return bool(rows(db, "SELECT count(*) FROM decisions")[0][0] >= 1
                    and rows(db, "SELECT count(*) FROM actions")[0][0] >= 1)
    except sqlite3.OperationalError:
        return False


@pytest.mark.slurm
@pytest.mark.slow
def test_two_daemons_on_one_database(jobs: Jobs, tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    now = time.time()
    ids = [jobs.submit(f"j{i}", gpus=1, begin="now+3600",
                       intent=Intent(deadline=now + 7200 * (i + 1)))
           for i in range(3)]
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(daemon_argv(db, jobs.prefix, "--interval", "1"), stderr=log,
                             text=True)
    try:
        wait_for(lambda: acted(db), 60, "the first daemon's first acting cycle")
        holder = rows(db, "SELECT pid, host FROM daemon_holder")
        assert holder == [(first.pid, socket.gethostname())]

        for extra in (("--once",), ("--interval", "1")):
            t0 = time.monotonic()
            second = subprocess.run(daemon_argv(db, jobs.prefix, *extra), capture_output=True,
                                    text=True, timeout=60)
            assert time.monotonic() - t0 < 20  # exits at once, without a cycle
            assert second.returncode == EXIT_LOCKED, second.stderr
            errors = [ln for ln in second.stderr.splitlines() if ln.startswith("Error:")]
            assert len(errors) == 1, second.stderr
            assert errors[0].startswith(
                f"Error: another slurm-rl daemon holds {db}: pid {first.pid} on host "
                f"{socket.gethostname()} since ")
            assert "Traceback" not in second.stderr

        # A more urgent job: the first daemon re-ranks everyone (new updates), alone.
        before = rows(db, "SELECT count(*) FROM actions")[0][0]
        ids.append(jobs.submit("urgent", gpus=1, begin="now+3600",
                               intent=Intent(deadline=now + 3600)))
        wait_for(lambda: rows(db, "SELECT count(*) FROM actions")[0][0] > before, 60,
                 "the first daemon to act on the new job")
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
        log.close()

    # The holder row is gone with a clean exit; the lock is free again.
    assert rows(db, "SELECT * FROM daemon_holder") == []
    assert not json.loads(lock_path(db).read_text() or "{}")
    last_cycle = rows(db, "SELECT max(cycle_id) FROM decisions")[0][0]
    run_daemon(db, jobs.prefix)

    cycles = [r[0] for r in rows(db, "SELECT cycle_id FROM decisions ORDER BY id")]
    assert len(cycles) == len(set(cycles)) and cycles == sorted(cycles)  # never reused
    assert isinstance(last_cycle, int) and cycles[-1] > last_cycle
    # No update sent twice: per job, consecutive DONE SiteFactor values always differ.
    links: dict[int, list[str]] = {}
    for action_id, job_id in rows(db, "SELECT action_id, job_id FROM action_jobs"):
        assert isinstance(action_id, int) and isinstance(job_id, str)
        links.setdefault(action_id, []).append(job_id)
    last: dict[str, str] = {}
    actions = rows(db, "SELECT id, status, argv FROM actions ORDER BY id")
    assert [a for a in actions if a[1] == "planned"] == []
    for action_id, status, argv in actions:
        assert isinstance(action_id, int) and isinstance(argv, str)
        if status != "done" or "SiteFactor=" not in argv:
            continue
        value = argv.split("SiteFactor=")[1].split('"')[0]
        for job in links[action_id]:
            assert last.get(job) != value, f"job {job}: SiteFactor={value} sent twice"
            last[job] = value
    assert set(last) == set(ids)


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("removed", ["database", "all files"])
def test_a_running_daemon_stops_when_its_database_or_lock_is_removed(
        jobs: Jobs, tmp_path: Path, removed: str) -> None:
    """`rm db` left the daemon cycling against an unlinked file; `rm -f db*` (the lock too) let
    a second daemon start beside it. Now the first one stops before its next cycle, with one
    line, exit 1; a second daemon then runs alone."""
    db = tmp_path / "gone.db"
    jobs.submit("j0", gpus=1, begin="now+3600", intent=Intent(deadline=time.time() + 7200))
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(daemon_argv(db, jobs.prefix, "--interval", "1"), stderr=log,
                             text=True)
    try:
        wait_for(lambda: acted(db), 60, "the daemon's first acting cycle")
        victims = [db] if removed == "database" else sorted(tmp_path.glob("gone.db*"))
        assert lock_path(db) in victims or removed == "database"
        for f in victims:
            f.unlink()
        assert first.wait(timeout=30) == 1
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        log.close()
    errors = [ln for ln in (tmp_path / "first.log").read_text().splitlines()
              if "was removed" in ln or "replaced" in ln]
    assert len(errors) == 1, (tmp_path / "first.log").read_text()[-2000:]
    assert str(db) in errors[0]
