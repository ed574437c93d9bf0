"""Fixtures for the daemon's tests (helpers: cluster_jobs.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from cluster_jobs import Jobs


@pytest.fixture
def jobs(slurm_cluster: dict[str, str]) -> Iterator[Jobs]:
    j = Jobs(prefix=f"dx{uuid.uuid4().hex[:6]}-")
    yield j
    j.cancel_all()
