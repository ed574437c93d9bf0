"""The migration creates the schema the models describe, on a correctly configured SQLite."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError, OperationalError

from slurm_rl.db import migrate
from slurm_rl.db.engine import make_engine
from slurm_rl.db.models import Base

TABLES = {
    "jobs", "job_events", "job_progress", "nodes", "gpu_samples", "decisions",
    "decision_entries", "actions", "action_jobs", "daemon_holder", "quarantined_records",
    "claim_records",
}


def test_upgrade_on_empty_file_creates_every_table(db_path: Path) -> None:
    assert not db_path.exists()
    engine = make_engine(db_path)
    before, after = migrate.upgrade(engine)
    assert (before, after) == (None, migrate.head_revision())
    names = set(inspect(engine).get_table_names())
    assert names == TABLES | {"alembic_version"}
    assert set(Base.metadata.tables) == TABLES
    engine.dispose()


def test_models_match_the_migrated_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    migrate.check(engine)  # alembic's own `check`: raises if autogenerate would emit anything


def test_indices_for_the_hot_queries_exist(engine: Engine) -> None:
    insp = inspect(engine)
    indexed = {
        (table, tuple(ix["column_names"]))
        for table in TABLES for ix in insp.get_indexes(table)
    }
    for wanted in [
        ("jobs", ("state",)), ("job_events", ("job_id", "at")), ("actions", ("status",)),
        ("decision_entries", ("job_id", "decision_id")), ("action_jobs", ("job_id",)),
        ("gpu_samples", ("at",)),
    ]:
        assert wanted in indexed
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("gpu_samples")}
    assert ("node", "at", "gpu_index") in uniques


def test_upgrade_twice_is_a_no_op_and_downgrade_round_trips(engine: Engine) -> None:
    head = migrate.head_revision()
    assert migrate.upgrade(engine) == (head, head)
    cfg = migrate.alembic_config()
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine)
    assert set(inspect(engine).get_table_names()) == TABLES | {"alembic_version"}


def test_wal_mode_is_persistent_in_the_file(engine: Engine, db_path: Path) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO decisions (cycle_id, at, policy, dry_run, notes) "
                          "VALUES (1, 0, 'fifo', 0, '[]')"))
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    assert Path(f"{db_path}-wal").exists()
    raw = sqlite3.connect(db_path)  # a plain connection, without our listener
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_every_connection_has_busy_timeout_and_foreign_keys(engine: Engine) -> None:
    conns = [engine.connect() for _ in range(3)]  # distinct pooled connections
    try:
        for conn in conns:
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 10_000
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        for conn in conns:
            conn.close()


def _hold_write_lock(path: Path, seconds: float, ready: threading.Event) -> None:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    ready.set()
    time.sleep(seconds)
    other.execute("ROLLBACK")
    other.close()


def _insert_decision(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO decisions (cycle_id, at, policy, dry_run, notes) "
                          "VALUES (1, 0, 'fifo', 0, '[]')"))


def test_busy_timeout_waits_for_a_writer_then_succeeds(engine: Engine, db_path: Path) -> None:
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(db_path, 0.5, ready))
    holder.start()
    ready.wait()
    t0 = time.monotonic()
    _insert_decision(engine)  # waits (busy_timeout = 10 s) instead of failing at once
    waited = time.monotonic() - t0
    holder.join()
    assert waited >= 0.3


def test_busy_timeout_gives_up_after_the_timeout(db_path: Path) -> None:
    engine = make_engine(db_path, busy_timeout_ms=200)
    migrate.upgrade(engine)
    ready = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(db_path, 1.5, ready))
    holder.start()
    ready.wait()
    t0 = time.monotonic()
    with pytest.raises(OperationalError, match="locked"):
        _insert_decision(engine)
    waited = time.monotonic() - t0
    holder.join()
    engine.dispose()
    assert 0.15 <= waited < 1.4


def test_readers_are_not_blocked_by_a_writer(engine: Engine, db_path: Path) -> None:
    _insert_decision(engine)
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM decisions")
    try:
        with engine.connect() as conn:  # WAL: sees the last committed state, without waiting
            assert conn.execute(text("SELECT count(*) FROM decisions")).scalar() == 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_foreign_keys_are_enforced(engine: Engine) -> None:
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(text("INSERT INTO job_events (job_id, at, kind) VALUES ('nope', 0, 'state')"))


def test_transactions_include_ddl(engine: Engine) -> None:
    # pysqlite would commit DDL on its own; the engine's real BEGIN makes it roll back.
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(text("CREATE TABLE scratch (x INTEGER)"))
        raise RuntimeError("abort")
    assert "scratch" not in inspect(engine).get_table_names()
