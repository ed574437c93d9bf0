"""Checks before slurm-rl opens a database file: is it there, is it SQLite, is it ours, and is
its schema one this slurm-rl knows.

Everything here reads the file without changing it (the header, then a read-only connection),
so a foreign file is never migrated, a missing folder is never created, and a bad file costs
the admin one line (`DatabaseError`) instead of a traceback. `describe_error` turns what SQLite
or the OS raised later (full disk, read-only file) into the same kind of line.
"""

from __future__ import annotations

import enum
import errno
import os
import sqlite3
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

SQLITE_MAGIC = b"SQLite format 3\x00"
OUR_TABLES = frozenset({
    "jobs", "job_events", "job_progress", "nodes", "gpu_samples", "decisions",
    "decision_entries", "actions", "action_jobs",
})
"""The tables revision 0001 creates: a file at any of our revisions has all of them."""


class DatabaseError(Exception):
    """A database slurm-rl will not use; the message is one line naming the file."""


class FileKind(enum.Enum):
    MISSING = "missing"
    EMPTY = "empty"
    """An SQLite file (or a zero-byte file) with no tables: slurm-rl may create its schema."""
    OURS = "ours"
    """slurm-rl's, at a revision this version knows (the head or an older one)."""


@dataclass(frozen=True, kw_only=True)
class FileStatus:
    path: Path
    kind: FileKind
    revision: str | None = None


def slurm_rl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slurm-rl")
    except PackageNotFoundError:
        return "unknown version"


@lru_cache(maxsize=1)
def known_revisions() -> tuple[str, ...]:
    """Every revision the packaged migrations define, head first."""
    from alembic.script import ScriptDirectory

    from .migrate import alembic_config

    return tuple(s.revision for s in ScriptDirectory.from_config(alembic_config())
                 .walk_revisions())


def inspect_file(path: Path, *, write: bool) -> FileStatus:
    """What `path` is; raises DatabaseError when slurm-rl must not use it.

    `write`: the caller will write (the daemon, `db upgrade`), so the file and its folder must
    be writable (SQLite in WAL mode also creates `-wal` and `-shm` files beside it).
    """
    parent = path.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise DatabaseError(f"{path}: folder {parent} {what} (slurm-rl does not create it)")
    try:
        st = path.stat()
    except FileNotFoundError:
        if write and not os.access(parent, os.W_OK | os.X_OK):
            raise DatabaseError(f"{path}: folder {parent} is not writable") from None
        return FileStatus(path=path, kind=FileKind.MISSING)
    except OSError as exc:
        raise DatabaseError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseError(f"{path}: not a regular file")
    try:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise DatabaseError(f"{path}: can not read it ({exc.strerror})") from None
    if header and header != SQLITE_MAGIC:
        raise DatabaseError(f"{path}: not an SQLite database")
    if write:
        _check_writable(path, parent)
    if not header:
        return FileStatus(path=path, kind=FileKind.EMPTY)
    tables, revision = _read_schema(path)
    return classify(path, tables, revision)


def _check_writable(path: Path, parent: Path) -> None:
    for target, what in ((path, "the file"), (parent, f"its folder {parent}")):
        if not os.access(target, os.W_OK):
            # access(2) says EROFS for a read-only mount, even to root.
            reason = "on a read-only file system" if _read_only_fs(target) else "not writable"
            raise DatabaseError(f"{path}: {what} is {reason}")


def _read_only_fs(target: Path) -> bool:
    try:
        return bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect_read_only(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """`path` opened with SQLite's `mode=ro`: never written, never created.

    A WAL database whose -wal/-shm files SQLite removed when the daemon's last connection
    closed cannot be read that way by a user who may not write its folder (SQLite would have to
    make -shm again: "attempt to write a readonly database"). With no writer there is nothing in
    a WAL to miss, so that reader gets the main file as it is (`immutable=1`)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    con = sqlite3.connect(uri, uri=True, check_same_thread=check_same_thread)
    try:
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError:
        if Path(f"{path}-wal").exists():
            return con  # (a writer's WAL to read: the caller's query reports the error)
        con.close()
        con = sqlite3.connect(uri + "&immutable=1", uri=True,
                              check_same_thread=check_same_thread)
    return con


def _read_schema(path: Path) -> tuple[set[str], str | None]:
    try:
        con = connect_read_only(path)
    except sqlite3.Error as exc:
        raise DatabaseError(describe_error(path, exc)) from None
    try:
        tables = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        revision = None
        if "alembic_version" in tables:
            rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
            revision = rows[0][0] if len(rows) == 1 else f"<{len(rows)} rows>"
    except sqlite3.Error as exc:
        raise DatabaseError(describe_error(path, exc)) from None
    finally:
        con.close()
    return tables, revision


def classify(path: Path, tables: set[str], revision: str | None) -> FileStatus:
    """Decide from a file's tables and Alembic revision whether slurm-rl may use it (pure)."""
    if not tables:
        return FileStatus(path=path, kind=FileKind.EMPTY)
    ours = OUR_TABLES <= tables
    listed = ", ".join(sorted(tables - {"alembic_version"})[:5]) or "none"
    if revision is None:
        if "alembic_version" in tables and tables == {"alembic_version"}:
            return FileStatus(path=path, kind=FileKind.EMPTY)  # downgraded to base
        raise DatabaseError(
            f"{path}: not a slurm-rl database (tables {listed}; no slurm-rl revision): "
            "refusing to touch it")
    if revision in known_revisions():
        if ours:
            return FileStatus(path=path, kind=FileKind.OURS, revision=revision)
        raise DatabaseError(
            f"{path}: not a slurm-rl database (Alembic revision {revision} but tables {listed}): "
            "refusing to touch it")
    if ours:
        raise DatabaseError(
            f"{path}: database schema {revision} is newer than this slurm-rl "
            f"({slurm_rl_version()}, knows up to {known_revisions()[0]}): upgrade slurm-rl")
    raise DatabaseError(
        f"{path}: not a slurm-rl database (Alembic revision {revision}, tables {listed}): "
        "refusing to touch it")


_SQLITE_LINES = (
    ("file is not a database", "not an SQLite database"),
    ("file is encrypted", "not an SQLite database"),
    ("malformed", "damaged SQLite database (disk image is malformed)"),
    ("database or disk is full", "disk full (database or disk is full)"),
    ("readonly", "read-only (attempt to write a readonly database)"),
    ("read-only", "read-only file system"),
    ("unable to open database file", "can not open the file (is the folder writable?)"),
    ("disk i/o error", "disk I/O error"),
    ("database is locked", "locked by another process (database is locked)"),
)


def describe_error(path: Path, exc: BaseException) -> str:
    """One line for the admin about an error SQLite or the OS raised on `path`."""
    if isinstance(exc, OSError) and not isinstance(exc, sqlite3.Error):
        if exc.errno == errno.ENOSPC:
            return f"{path}: disk full ({exc.strerror})"
        if exc.errno == errno.EROFS:
            return f"{path}: read-only file system"
        return f"{path}: {exc.strerror or exc}"
    text = str(getattr(exc, "orig", None) or exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    low = first.lower()
    for needle, line in _SQLITE_LINES:
        if needle in low:
            return f"{path}: {line}"
    return f"{path}: {first}"
