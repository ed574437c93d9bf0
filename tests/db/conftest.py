"""Fixtures for the database tests: a migrated SQLite file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "slurm-rl.db"


@pytest.fixture
def engine(db_path: Path) -> Iterator[Engine]:
    eng = make_engine(db_path)
    upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with make_session_factory(engine)() as s:
        yield s
