"""Opening the daemon's database read-only: for `slurm-rl status`, `slurm-rl replay` and the
trainer's history (rl/fromdb.py), which read it without the daemon.

Any user may run those commands: the file is opened with SQLite's `mode=ro`, so a reader never
writes to it, never creates it, never migrates it, and never needs write access to it or its
folder (in WAL mode SQLite reads the `-wal`/`-shm` files the daemon keeps beside it; when the
daemon has stopped and they are gone, the main file is read as it is). A file the user may not
read, a missing file, or one that is not slurm-rl's is one line (ReadOnlyError).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker

from slurm_rl.config import ConfigError, load_config


class ReadOnlyError(Exception):
    """The database can not be read; the message is one line naming the file."""


def database_path(config_file: Path | None, db_path: Path | None) -> Path:
    if db_path is not None:
        return db_path
    try:
        return load_config(config_file).database.path
    except ConfigError as exc:
        raise ReadOnlyError(str(exc)) from None


@contextmanager
def read_only_session(path: Path) -> Iterator[Session]:
    """A session on `path` opened read-only; ReadOnlyError when it can not be used."""
    from .guard import (
        DatabaseError,
        FileKind,
        connect_read_only,
        describe_error,
        inspect_file,
    )

    try:
        status = inspect_file(path, write=False)
    except DatabaseError as exc:
        raise ReadOnlyError(str(exc)) from None
    if status.kind is not FileKind.OURS:
        raise ReadOnlyError(f"{path}: no slurm-rl database there (has the daemon run?)")

    def connect() -> sqlite3.Connection:
        con = connect_read_only(path, check_same_thread=False)
        con.execute("PRAGMA busy_timeout = 5000")
        return con

    engine = create_engine("sqlite://", creator=connect)
    try:
        with sessionmaker(bind=engine)() as session:
            try:
                yield session
            except sqlite3.Error as exc:
                raise ReadOnlyError(describe_error(path, exc)) from None
            except Exception as exc:
                if type(exc).__module__.startswith("sqlalchemy"):
                    raise ReadOnlyError(describe_error(path, exc)) from None
                raise
    finally:
        engine.dispose()
