"""Fixtures for the daemon's tests (helpers: cluster_jobs.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import Jobs
from sqlalchemy.orm import Session

from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade


@pytest.fixture
def jobs(slurm_cluster: dict[str, str]) -> Iterator[Jobs]:
    j = Jobs(prefix=f"dx{uuid.uuid4().hex[:6]}-")
    yield j
    j.cancel_all()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    """A fresh, migrated daemon database (unit tests of the restart paths)."""
    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        yield s
    engine.dispose()
