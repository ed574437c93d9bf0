"""One daemon per database: an `flock` on `<db>.lock`, held for the life of the process, and a
row in `daemon_holder` naming the holder (pid, host, start) for the message a second one prints.

The lock file is opened with O_NOFOLLOW and O_CLOEXEC (the scontrol children must not inherit
the lock), created 0600, and refused unless it is a regular file owned by this user: a file
someone else planted beside the database is never trusted. The kernel drops the lock when the
process dies, however it dies; the row is only informational and is overwritten by the next
holder. `slurm-rl db upgrade` takes the same lock, so it never migrates under a running daemon.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import cast
from urllib.parse import quote

from sqlalchemy import Table, delete
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.orm import Session

from .guard import DatabaseError, slurm_rl_version
from .models import DaemonHolder

_holder = cast(Table, DaemonHolder.__table__)


class LockHeld(DatabaseError):
    """Another process holds the database; the message names it."""


@dataclass(frozen=True, kw_only=True)
class Holder:
    pid: int
    host: str
    started_at: float
    version: str = ""
    purpose: str = "daemon"
    """What holds it: "daemon", or "db upgrade"."""

    @classmethod
    def me(cls, purpose: str = "daemon") -> Holder:
        return cls(pid=os.getpid(), host=socket.gethostname(), started_at=time.time(),
                   version=slurm_rl_version(), purpose=purpose)

    def describe(self) -> str:
        try:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        except (OverflowError, ValueError, OSError):
            since = "an unknown time"
        return f"pid {self.pid} on host {self.host} since {since}"


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


class DatabaseLock:
    """The held lock; `release()` (or leaving the `with` block, or exiting) gives it up."""

    def __init__(self, path: Path, fd: int, holder: Holder, db_path: Path | None = None
                 ) -> None:
        self.path = path
        self.holder = holder
        self._fd: int | None = fd
        self._db_path = db_path
        self._db_fd: int | None = None
        """The database file, held open read-only once it exists (`verify`): while it is open
        its inode number cannot be given to a new file, so identity by inode is exact."""

    @classmethod
    def acquire(cls, db_path: Path, *, purpose: str = "daemon") -> DatabaseLock:
        """Take the lock or raise LockHeld at once (no waiting) naming the holder; raises
        DatabaseError for a lock file that is not safe to use."""
        check_database_file(db_path)
        path = lock_path(db_path)
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                other = read_holder(db_path)
                if other is None:
                    raise LockHeld(f"another process holds {db_path} (lock {path})") from None
                raise LockHeld(f"another slurm-rl {other.purpose} holds {db_path}: "
                               f"{other.describe()}") from None
            raise DatabaseError(f"{path}: can not lock it ({exc.strerror})") from None
        holder = Holder.me(purpose)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": holder.pid, "host": holder.host,
                                      "started_at": holder.started_at,
                                      "version": holder.version, "purpose": purpose}
                                     ).encode() + b"\n", 0)
        except OSError as exc:
            os.close(fd)
            raise DatabaseError(f"{path}: can not write it ({exc.strerror})") from None
        return cls(path, fd, holder, db_path)

    def verify(self) -> None:
        """Raise DatabaseError (one line) unless the lock file and the database are still the
        files this lock was taken on: a lock file deleted or replaced (a second daemon could
        then take a lock of its own), or a database file deleted or replaced (this daemon
        would go on writing to an unlinked file nobody reads). The database's identity is
        taken the first time it is seen. The daemon calls this before every cycle."""
        if self._fd is None:
            raise DatabaseError(f"{self.path}: the lock was released")
        mine = os.fstat(self._fd)
        try:
            now = os.lstat(self.path)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise DatabaseError(f"{self.path}: the lock file was removed or replaced while "
                                "this daemon held it; stopping (restart the daemon)")
        if self._db_path is None:
            return
        try:
            db = os.lstat(self._db_path)
        except FileNotFoundError:
            db = None
        except OSError as exc:
            raise DatabaseError(f"{self._db_path}: can not look at it ({exc.strerror})"
                                ) from None
        if db is None:
            if self._db_fd is not None:
                raise DatabaseError(f"{self._db_path}: the database was removed while this "
                                    "daemon used it; stopping (restart the daemon)")
            return
        if self._db_fd is None:
            try:
                self._db_fd = os.open(self._db_path,
                                      os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise DatabaseError(f"{self._db_path}: can not open it ({exc.strerror})"
                                    ) from None
        held = os.fstat(self._db_fd)
        if (db.st_dev, db.st_ino) != (held.st_dev, held.st_ino):
            raise DatabaseError(f"{self._db_path}: the database was replaced by another file "
                                "while this daemon used it; stopping (restart the daemon)")

    def release(self) -> None:
        if self._db_fd is not None:
            os.close(self._db_fd)
            self._db_fd = None
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # closing the only descriptor drops the flock
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> DatabaseLock:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


SIDECARS = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database (WAL mode: -wal and -shm; rollback: -journal)."""


def check_database_file(db_path: Path) -> None:
    """The database file itself, before anything opens it (the daemon runs as root and trusts
    what it recorded): its folder and the folders above it, as sshd's StrictModes checks a
    home, then the file and SQLite's files beside it."""
    check_database_folder(db_path)
    _check_own_file(db_path)
    for suffix in SIDECARS:
        _check_own_file(db_path.with_name(db_path.name + suffix))


def check_database_folder(db_path: Path) -> None:
    """The folder holding the database must be owned by root or this user and writable by
    nobody else, sticky bit or not: whoever can create files in it can plant the `-wal` or
    `-shm` file SQLite will adopt (and keep it open to write into root's database), or delete
    the lock. Every folder above it must be owned by root or this user and, unless sticky (as
    /tmp), writable by nobody else, so that nobody can move the folder away."""
    folder = Path(os.path.abspath(db_path)).parent
    me = os.geteuid()
    first = True
    for here in (folder, *folder.parents):
        try:
            st = os.stat(here)
        except OSError as exc:
            raise DatabaseError(f"{db_path}: can not look at folder {here} ({exc.strerror})"
                                ) from None
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, me):
            raise DatabaseError(f"{db_path}: folder {here} is owned by uid {st.st_uid}, not by "
                                f"root or this user (uid {me}); refusing to use it")
        writable = mode & 0o022
        if writable and (first or not mode & stat.S_ISVTX):
            raise DatabaseError(
                f"{db_path}: folder {here} is writable by group or others (mode {mode:o}); "
                "refusing to use it: keep the database in a folder only its owner can write "
                "(chmod go-w, or another folder)")
        first = False


def _check_own_file(db_path: Path) -> None:
    """A file of the database's, if it exists: not a symbolic link (a dangling one would make
    root create a file elsewhere, and a second name would get a second lock file), no second
    hard link (same), a regular file owned by this user that nobody else may write."""
    try:
        st = os.lstat(db_path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseError(f"{db_path}: can not look at it ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise DatabaseError(f"{db_path}: is a symbolic link; refusing to use it (give the real "
                            f"path: {os.path.realpath(db_path)})")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseError(f"{db_path}: not a regular file")
    if st.st_nlink > 1:
        raise DatabaseError(f"{db_path}: has {st.st_nlink} hard links; refusing to use it (a "
                            "second name would escape the one-daemon lock)")
    if st.st_uid != os.geteuid():
        raise DatabaseError(f"{db_path}: owned by uid {st.st_uid}, not by this user "
                            f"(uid {os.geteuid()}); refusing to use it")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise DatabaseError(f"{db_path}: writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):o}); refusing to use it: chmod go-w")


def _open_lock_file(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DatabaseError(f"{path}: is a symbolic link; refusing to use it") from None
        if exc.errno == errno.EROFS:
            raise DatabaseError(f"{path}: read-only file system") from None
        raise DatabaseError(f"{path}: can not open the lock file ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise DatabaseError(
            f"{path}: not a regular file owned by uid {os.geteuid()} (owner uid {st.st_uid}); "
            "refusing to use it: remove it if slurm-rl did not create it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def read_holder(db_path: Path) -> Holder | None:
    """Who holds the database: what the lock file says (its holder wrote it after locking),
    else the `daemon_holder` row."""
    holder = _holder_from_file(lock_path(db_path))
    return holder if holder is not None else _holder_from_db(db_path)


def _holder_from_db(db_path: Path) -> Holder | None:
    try:
        con = sqlite3.connect(f"file:{quote(str(db_path.resolve()))}?mode=ro", uri=True,
                              timeout=1.0)
    except sqlite3.Error:
        return None
    try:
        row = con.execute(
            "SELECT pid, host, started_at, version FROM daemon_holder WHERE id = 1").fetchone()
    except sqlite3.Error:
        return None
    finally:
        con.close()
    if row is None:
        return None
    return Holder(pid=int(row[0]), host=str(row[1]), started_at=float(row[2]),
                  version=str(row[3]))


def _holder_from_file(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace")[:4096])
        return Holder(pid=int(data["pid"]), host=str(data["host"]),
                      started_at=float(data["started_at"]), version=str(data.get("version", "")),
                      purpose=str(data.get("purpose", "daemon"))[:40])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_holder(session: Session, holder: Holder) -> None:
    """Write the holder row (id 1) and COMMIT. Call only while holding the lock."""
    stmt = insert(_holder).values(id=1, pid=holder.pid, host=holder.host,
                                  started_at=holder.started_at, version=holder.version)
    stmt = stmt.on_conflict_do_update(
        index_elements=[_holder.c.id],
        set_={c: stmt.excluded[c] for c in ("pid", "host", "started_at", "version")})
    session.execute(stmt)
    session.commit()


def clear_holder(session: Session, holder: Holder) -> None:
    """Remove the holder row if it is still this holder's, and COMMIT (a clean exit)."""
    session.execute(delete(_holder).where(_holder.c.id == 1, _holder.c.pid == holder.pid,
                                          _holder.c.host == holder.host))
    session.commit()

