"""Engine and session setup: SQLite in WAL mode, with a busy timeout and foreign keys on.

Every connection gets its pragmas from a `connect` listener, so no code path can forget them.
Transactions are real: pysqlite's own implicit BEGIN (which skips DDL and commits before it) is
turned off and SQLAlchemy's `begin` emits BEGIN, so a migration or a cycle's writes land
entirely or not at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for another one's write lock before failing."""
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
"""Bytes of WAL file kept after a checkpoint."""


def make_engine(
    path: str | Path, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, echo: bool = False
) -> Engine:
    """An engine for the SQLite file at `path` (created on first write, not its folder)."""
    engine = create_engine(f"sqlite:///{Path(path)}", echo=echo)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        # No implicit transactions from the driver: SQLAlchemy's `begin` below owns them.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            # FULL: a commit survives a power cut too. An action written as planned must be on
            # disk before its command runs; the daemon commits only a few times per cycle.
            cursor.execute("PRAGMA synchronous = FULL")
            # The WAL file is reused after each checkpoint but never shrinks on its own: cut
            # it back to this size then, so one big cycle does not leave it large for good.
            cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (the daemon reads them afterwards)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def foreign_keys_off(conn: Connection) -> Iterator[None]:
    """Turn foreign-key enforcement off around a migration, then check and turn it back on.

    SQLite can only change the pragma outside a transaction, and a batch-mode migration that
    rebuilds a referenced table (copy, drop, rename) would fail with enforcement on.
    """
    if conn.in_transaction():
        raise RuntimeError("foreign_keys_off needs a connection outside a transaction")
    raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
        violations = raw.execute("PRAGMA foreign_key_check").fetchall()
        if violations:
            raise RuntimeError(f"foreign key violations after migration: {violations[:5]}")
    finally:
        raw.execute("PRAGMA foreign_keys = ON")
