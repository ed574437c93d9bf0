"""Shared fixtures. Tests marked `slurm` run against the real test cluster (docker/cluster)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "docker" / "cluster"
# Which launcher the fixture starts: native (default: daemons on this host) or docker (the same
# cluster in containers, docker/cluster_docker.py; its own SLURM_RL_CLUSTER_DIR, default
# /var/tmp/slurm-rl-docker). `make test` sets it from its ENGINE (docker unless no Docker
# engine can run; docker/engine-up).
ENGINE = os.environ.get("SLURM_RL_ENGINE", "native")
STATE_DIR = Path(os.environ.get("SLURM_RL_CLUSTER_DIR", "/var/tmp/slurm-rl-docker"
                                if ENGINE == "docker" else "/var/tmp/slurm-rl-cluster"))


def _cluster(*args: str) -> list[str]:
    return [str(CLUSTER), "--engine", ENGINE, *args]


def _cluster_env() -> dict[str, str]:
    out = subprocess.run(_cluster("env"), capture_output=True, text=True, check=True)
    env: dict[str, str] = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip("'\"")
    return env


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Make sure the test cluster is up and point Slurm's clients at it (SLURM_CONF).

    Starts it with `docker/cluster up` when it is not running; leaves it running afterwards
    (make test / .ci/run own its life cycle).
    """
    if not CLUSTER.exists():
        pytest.fail("docker/cluster is missing")
    # A cluster that is merely busy (a test restarting slurmctld) gets a few seconds before
    # `up` would replace it with a fresh, empty one.
    for _ in range(5):
        status = subprocess.run(_cluster("status"), capture_output=True, text=True)
        if status.returncode == 0:
            break
        time.sleep(2)
    if status.returncode != 0:
        up = subprocess.run(_cluster("up"), capture_output=True, text=True)
        if up.returncode != 0:
            pytest.fail(f"docker/cluster --engine {ENGINE} up failed:\n{up.stdout}\n{up.stderr}")
    env = _cluster_env()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    assert shutil.which("sbatch"), "sbatch not on PATH"
    yield env
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test marked `slurm` gets the cluster fixture, so no such test can run against
    # whatever Slurm happens to be configured on the host.
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            names = item.fixturenames  # type: ignore[attr-defined]
            if "slurm_cluster" not in names:
                names.append("slurm_cluster")
