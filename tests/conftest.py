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


HEARTBEAT_S = 60.0
"""A test running longer than this gets a line naming it, and another each time as long again."""


class _Heartbeat:
    """`make test` runs `pytest -q`, whose dots stop while one slow test (or the cluster
    fixture) runs for minutes: a line naming what runs, so that a quiet stretch is not taken for
    a hang. The line is written from a timer thread with capturing suspended for that write."""

    def __init__(self, config: pytest.Config) -> None:
        import threading

        self.config = config
        self.lock = threading.Lock()
        self.current: tuple[str, float] | None = None
        """The test running now and when it started."""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-heartbeat", daemon=True)

    def _run(self) -> None:
        said: tuple[str, float] | None = None  # the test last named, and at how many seconds
        while not self.stop.wait(5.0):
            with self.lock:
                current = self.current
            if current is None:
                continue
            nodeid, started = current
            running = time.monotonic() - started
            last = said[1] if said is not None and said[0] == nodeid else 0.0
            if running - last < HEARTBEAT_S:
                continue
            said = (nodeid, running)
            capman = self.config.pluginmanager.getplugin("capturemanager")
            reporter = self.config.pluginmanager.getplugin("terminalreporter")
            if capman is None or reporter is None:
                continue
            with capman.global_and_fixture_disabled():
                reporter.write_line(f"  ... still running {nodeid} ({running:.0f} s)")

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None and self.config.option.verbose < 0:
            took = time.monotonic() - self.config._heartbeat_t0  # type: ignore[attr-defined]
            reporter.write_line(f"collected {len(session.items)} tests in {took:.0f} s")
        self.thread.start()

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            self.current = (nodeid, time.monotonic())

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        with self.lock:
            self.current = None

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        self.stop.set()


def pytest_configure(config: pytest.Config) -> None:
    config._heartbeat_t0 = time.monotonic()  # type: ignore[attr-defined]
    config.pluginmanager.register(_Heartbeat(config), "slurm-rl-heartbeat")
