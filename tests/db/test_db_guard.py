"""Bad database files: one line each, exit code, nothing created, nothing migrated.

Checked through `slurm-rl db upgrade` / `current` (in-process) and the daemon's own opening
(`open_database`). Read-only and full disks are real: a small tmpfs mounted for the test (root
only; skipped where the sandbox refuses the mount).
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.daemon.cli import EXIT_LOCKED, DatabaseUnusable, open_database
from slurm_rl.db.engine import make_engine
from slurm_rl.db.guard import DatabaseError, FileKind, classify, inspect_file, known_revisions
from slurm_rl.db.lock import DatabaseLock
from slurm_rl.db.migrate import head_revision, upgrade


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_RL_CONFIG", raising=False)
    monkeypatch.setattr("slurm_rl.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output.strip()


def daemon_open_error(path: Path) -> click.ClickException:
    with pytest.raises(DatabaseUnusable) as info:
        open_database(path)
    return info.value


def make_ours(path: Path) -> None:
    engine = make_engine(path)
    upgrade(engine)
    engine.dispose()


def test_a_missing_folder_is_refused_and_never_created(tmp_path: Path) -> None:
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    code, out = cli("db", "upgrade", "--db", str(db))
    assert code == 1
    assert out == (f"Error: {db}: folder {db.parent} does not exist "
                   "(slurm-rl does not create it)")
    assert daemon_open_error(db).message == out.removeprefix("Error: ")
    assert not (tmp_path / "nonexistent").exists()


def test_not_sqlite_is_one_line_for_every_command(tmp_path: Path) -> None:
    bogus = tmp_path / "x.db"
    bogus.write_bytes(b"\xff\xfe not a database at all\n" * 50)
    before = digest(bogus)
    for command in ("upgrade", "current"):
        assert cli("db", command, "--db", str(bogus)) == (
            1, f"Error: {bogus}: not an SQLite database")
    assert daemon_open_error(bogus).message == f"{bogus}: not an SQLite database"
    assert digest(bogus) == before
    assert not Path(f"{bogus}.lock").exists()


def test_a_damaged_sqlite_file_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    make_ours(db)
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # the schema page, after a valid header
    db.write_bytes(bytes(data))
    Path(f"{db}-wal").unlink(missing_ok=True)
    code, out = cli("db", "current", "--db", str(db))
    assert code == 1 and len(out.splitlines()) == 1 and str(db) in out
    assert "Traceback" not in out


def test_another_applications_database_is_never_migrated(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers (name) VALUES ('x')")
    con.commit()
    con.close()
    before = digest(db)
    code, out = cli("db", "upgrade", "--db", str(db))
    assert code == 1
    assert out == (f"Error: {db}: not a slurm-rl database (tables customers; no slurm-rl "
                   "revision): refusing to touch it")
    assert "not a slurm-rl database" in daemon_open_error(db).message
    assert digest(db) == before


@pytest.mark.parametrize("revision", ["0001", "ae1027a6acf"])
def test_another_alembic_application_is_refused(tmp_path: Path, revision: str) -> None:
    # An Alembic revision id like ours ("0001") does not make a file ours: our tables must be
    # there too.
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
    con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    con.commit()
    con.close()
    before = digest(db)
    for command in ("upgrade", "current"):
        code, out = cli("db", command, "--db", str(db))
        assert code == 1 and "not a slurm-rl database" in out and "invoices" in out
    assert "not a slurm-rl database" in daemon_open_error(db).message
    assert digest(db) == before


def test_a_newer_schema_says_to_upgrade_slurm_rl_not_the_database(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    make_ours(db)
    con = sqlite3.connect(db)
    con.execute("UPDATE alembic_version SET version_num = '0099'")
    con.commit()
    con.close()
    expected = (f"{db}: database schema 0099 is newer than this slurm-rl (0.1.0, knows up to "
                f"{head_revision()}): upgrade slurm-rl")
    for command in ("upgrade", "current"):
        assert cli("db", command, "--db", str(db)) == (1, f"Error: {expected}")
    message = daemon_open_error(db).message
    assert message == expected and "db upgrade" not in message


def test_an_older_schema_of_ours_is_upgraded_only_by_the_admin(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    engine = make_engine(db)
    upgrade(engine, "0001")
    engine.dispose()
    assert "run slurm-rl db upgrade" in daemon_open_error(db).message
    assert cli("db", "current", "--db", str(db)) == (
        0, f"0001 (newest is {head_revision()}: run slurm-rl db upgrade)")
    assert cli("db", "upgrade", "--db", str(db))[0] == 0
    engine, sessions, lock = open_database(db)  # now the daemon accepts it
    lock.release()
    engine.dispose()


def test_classify_is_pure_and_knows_every_packaged_revision(tmp_path: Path) -> None:
    p = tmp_path / "x.db"
    assert known_revisions()[0] == head_revision()
    assert classify(p, set(), None).kind is FileKind.EMPTY
    assert classify(p, {"alembic_version"}, None).kind is FileKind.EMPTY
    ours = {"jobs", "job_events", "job_progress", "nodes", "gpu_samples", "decisions",
            "decision_entries", "actions", "action_jobs", "alembic_version"}
    assert classify(p, ours, "0001").kind is FileKind.OURS
    with pytest.raises(DatabaseError, match="newer"):
        classify(p, ours, "zzz")
    with pytest.raises(DatabaseError, match="not a slurm-rl database"):
        classify(p, ours - {"jobs"}, "0001")


def test_db_upgrade_refuses_while_a_daemon_holds_the_database(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    make_ours(db)
    with DatabaseLock.acquire(db) as lock:
        code, out = cli("db", "upgrade", "--db", str(db))
        assert code == EXIT_LOCKED
        assert out == (f"Error: another slurm-rl daemon holds {db}: {lock.holder.describe()}: "
                       "stop it before migrating")
    assert cli("db", "upgrade", "--db", str(db))[0] == 0


# --- real read-only and full disks ------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 48 kB tmpfs (too small for the schema), unmounted afterwards."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k,mode=0755", "tmpfs",
                           str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"can not mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_at_creation_is_one_line_and_leaves_no_schema(small_fs: Path) -> None:
    db = small_fs / "x.db"
    code, out = cli("db", "upgrade", "--db", str(db))
    assert code == 1
    assert out == f"Error: upgrade failed: {db}: disk full (database or disk is full)"
    assert daemon_open_error(db).message == f"{db}: disk full (database or disk is full)"
    # The failed migration rolled back: a later attempt on a bigger disk starts from empty.
    assert inspect_file(db, write=False).kind in (FileKind.EMPTY, FileKind.MISSING)


def test_debug_shows_the_traceback(small_fs: Path) -> None:
    result = CliRunner().invoke(main, ["db", "upgrade", "--debug", "--db",
                                       str(small_fs / "x.db")])
    assert result.exit_code == 1
    assert isinstance(result.exception, Exception)
    assert "full" in str(result.exception)


def test_a_read_only_file_system_is_one_line(small_fs: Path, tmp_path: Path) -> None:
    db = small_fs / "x.db"
    sqlite3.connect(db).close()  # an empty file: the daemon would create the schema in it
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    expected = f"{db}: the file is on a read-only file system"
    assert cli("db", "upgrade", "--db", str(db)) == (1, f"Error: {expected}")
    assert daemon_open_error(db).message == expected
    missing = small_fs / "new.db"
    assert daemon_open_error(missing).message == (
        f"{missing}: folder {small_fs} is not writable")
