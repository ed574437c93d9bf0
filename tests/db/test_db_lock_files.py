"""The files around a database the daemon locks: its folder (as sshd's StrictModes checks a
home), SQLite's -wal/-shm/-journal files beside it, and the lock and database staying the
files the lock was taken on (`DatabaseLock.verify`, asked before every cycle).

Real files in pytest's temporary folders; chown to another uid needs root (skipped otherwise).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_rl.db.guard import DatabaseError
from slurm_rl.db.lock import SIDECARS, DatabaseLock, check_database_file

OTHER_UID = 65534  # nobody
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    here = tmp_path / "db"
    here.mkdir(mode=0o755)
    return here


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775, 0o757])
def test_a_folder_others_can_write_is_refused_sticky_or_not(folder: Path, mode: int) -> None:
    folder.chmod(mode)
    with pytest.raises(DatabaseError, match=r"writable by group or others .*refusing"):
        DatabaseLock.acquire(folder / "s.db")
    assert not (folder / "s.db.lock").exists()  # nothing created


def test_a_sticky_world_writable_folder_above_is_fine(tmp_path: Path) -> None:
    """/tmp is 1777: a private folder inside it holds a database safely."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private = shared / "private"
    private.mkdir(mode=0o700)
    with DatabaseLock.acquire(private / "s.db") as lock:
        assert lock.held


def test_a_plain_world_writable_folder_above_is_refused(tmp_path: Path) -> None:
    """Without the sticky bit anyone may rename the folder below it away and put another in
    its place."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    private = shared / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(DatabaseError, match=f"folder {shared} is writable by group or others"):
        check_database_file(private / "s.db")


@needs_root
def test_a_folder_owned_by_another_user_is_refused(folder: Path) -> None:
    os.chown(folder, OTHER_UID, -1)
    with pytest.raises(DatabaseError, match=r"owned by uid 65534, not by root or this user"):
        check_database_file(folder / "s.db")


@needs_root
@pytest.mark.parametrize("suffix", SIDECARS)
def test_a_sidecar_planted_by_another_user_is_refused(folder: Path, suffix: str) -> None:
    """A -wal or -shm file made by someone else would be adopted by SQLite (and, kept open,
    let its maker write into the database)."""
    planted = folder / f"s.db{suffix}"
    planted.write_bytes(b"")
    os.chown(planted, OTHER_UID, -1)
    with pytest.raises(DatabaseError, match=f"s.db{suffix}: owned by uid 65534"):
        DatabaseLock.acquire(folder / "s.db")


@pytest.mark.parametrize("suffix", SIDECARS)
def test_a_sidecar_others_may_write_or_a_link_is_refused(folder: Path, suffix: str) -> None:
    side = folder / f"s.db{suffix}"
    side.write_bytes(b"")
    side.chmod(0o666)
    with pytest.raises(DatabaseError, match="writable by group or others"):
        check_database_file(folder / "s.db")
    side.unlink()
    side.symlink_to(folder / "elsewhere")
    with pytest.raises(DatabaseError, match="symbolic link"):
        check_database_file(folder / "s.db")


def test_verify_holds_while_nothing_changed(folder: Path) -> None:
    db = folder / "s.db"
    with DatabaseLock.acquire(db) as lock:
        lock.verify()  # no database yet: fine
        db.write_bytes(b"")
        lock.verify()  # first seen: its identity is taken
        lock.verify()


def test_verify_fails_once_the_database_is_removed_or_replaced(folder: Path) -> None:
    db = folder / "s.db"
    db.write_bytes(b"")
    with DatabaseLock.acquire(db) as lock:
        lock.verify()
        db.unlink()
        with pytest.raises(DatabaseError, match="database was removed"):
            lock.verify()
        db.write_bytes(b"")  # a new file under the same name
        with pytest.raises(DatabaseError, match="replaced by another file"):
            lock.verify()


def test_verify_fails_once_the_lock_file_is_removed(folder: Path) -> None:
    """`rm -f s.db*` takes the lock file too: a second daemon could lock a new one."""
    db = folder / "s.db"
    with DatabaseLock.acquire(db) as lock:
        lock.path.unlink()
        with pytest.raises(DatabaseError, match="lock file was removed or replaced"):
            lock.verify()
        with DatabaseLock.acquire(db) as second:  # what the second daemon gets
            assert second.held
            with pytest.raises(DatabaseError, match="lock file was removed or replaced"):
                lock.verify()
