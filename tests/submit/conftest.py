"""Fixtures for rlsbatch tests against the real test cluster (helpers in slurm_jobs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurm_jobs import Jobs


@pytest.fixture
def jobs(slurm_cluster: dict[str, str]) -> Iterator[Jobs]:
    """This test's job name and submissions; everything it submitted is cancelled after it."""
    tracker = Jobs()
    yield tracker
    tracker.cancel()
