"""The daemon in a container orders jobs on the dockerized cluster (docker/cluster --engine docker).

The cluster runs in containers (slurmctld, node1..node4) and the daemon in another one, built
from the working tree (docker/daemon_image.py); the jobs are submitted from the host with the
host's sbatch. Skipped, with the reason, where no Docker engine is reachable.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from slurm_rl.core import Intent
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.models import DecisionEntry
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slow]

CLUSTER = Path(__file__).resolve().parents[2] / "docker" / "cluster"


def _engine_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("the dockerized cluster needs root (munged's key, containers)")
    try:
        # By name: for mypy, `docker` would be the repository's docker/ folder.
        docker: Any = importlib.import_module("docker")
        docker.from_env().ping()
    except Exception as e:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine reachable ({type(e).__name__}: {e})")


@pytest.fixture(scope="module")
def docker_env() -> dict[str, str]:
    """Environment for client commands of the dockerized cluster (started if not running).

    The session's own cluster (native or docker) is left alone: this uses the docker engine's
    directory, /var/tmp/slurm-rl-docker unless SLURM_RL_ENGINE=docker names another.
    """
    _engine_or_skip()
    env = dict(os.environ, SLURM_RL_ENGINE="docker")
    if os.environ.get("SLURM_RL_ENGINE") != "docker":
        env.pop("SLURM_RL_CLUSTER_DIR", None)
    env.pop("SLURM_CONF", None)
    up = subprocess.run([str(CLUSTER), "up"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        pytest.fail(f"docker/cluster --engine docker up failed:\n{up.stderr}")
    out = subprocess.run([str(CLUSTER), "env"], env=env, capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


class Jobs:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.prefix = f"dc{uuid.uuid4().hex[:6]}-"
        self.ids: list[str] = []

    def submit(self, tag: str, gpus: int, sleep: float, intent: Intent | None = None) -> str:
        argv = ["sbatch", "--parsable", "-J", f"{self.prefix}{tag}", f"--gres=gpu:{gpus}",
                "-t", "1", "-o", "/dev/null", "-e", "/dev/null"]
        if intent is not None:
            argv.append(f"--comment={compose_comment('', intent)}")
        out = subprocess.run([*argv, "--wrap", f"sleep {sleep}"], env=self.env,
                             capture_output=True, text=True, check=True)
        self.ids.append(out.stdout.strip().split(";")[0])
        return self.ids[-1]

    def started(self, ids: list[str]) -> dict[str, str] | None:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-O",
                              "JobID:|,State:|,StartTime:|"], env=self.env,
                             capture_output=True, text=True, check=True).stdout
        rows = [[c.strip() for c in line.split("|")] for line in out.splitlines()]
        if len(rows) != len(ids) or any(r[1] in ("PENDING", "CONFIGURING") for r in rows):
            return None
        return {r[0]: r[2] for r in rows}


@pytest.fixture
def jobs(docker_env: dict[str, str]) -> Iterator[Jobs]:
    j = Jobs(docker_env)
    yield j
    if j.ids:
        subprocess.run(["scancel", *j.ids], env=docker_env, capture_output=True)


def in_container(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTER), "slurm-rl", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_daemon_in_a_container_orders_jobs_submitted_from_the_host(jobs: Jobs) -> None:
    env = jobs.env
    # Build (or reuse) the daemon's image first, so that the cycle below runs while the
    # blocking jobs still hold every GPU.
    version = in_container(env, "--version")
    assert version.returncode == 0 and "version" in version.stderr, version.stderr
    # The blocking jobs hold every GPU until the test cancels them after the cycle (a fixed
    # sleep let them end first on a loaded host, before the containerised daemon had started).
    blocks = [jobs.submit(f"block{i}", gpus=4, sleep=600) for i in range(4)]
    relaxed = [jobs.submit(f"relaxed{i}", gpus=4, sleep=2, intent=Intent()) for i in range(4)]
    deadline = time.time() + 240
    tight = [jobs.submit(f"tight{i}", gpus=4, sleep=2, intent=Intent(deadline=deadline))
             for i in range(4)]
    db = Path(env["SLURM_RL_CLUSTER_DIR"]) / "daemon" / f"{jobs.prefix}.db"
    try:
        out = in_container(env, "daemon", "--once", "--policy", "deadline",
                           "--db", f"/var/lib/slurm-rl/{db.name}",
                           "--only-name-prefix", jobs.prefix)
        assert out.returncode == 0, out.stderr
        assert "made 8 job updates" in out.stderr, out.stderr
        # What the containerised daemon recorded is on the host, in the cluster's directory.
        engine = make_engine(db)
        try:
            with make_session_factory(engine)() as s:
                seen = {e.job_id for e in s.scalars(select(DecisionEntry))}
        finally:
            engine.dispose()
        assert seen == set(relaxed + tight)
    finally:
        db.unlink(missing_ok=True)
        subprocess.run(["scancel", *blocks], env=env, capture_output=True)

    deadline_s = time.monotonic() + 90
    start = jobs.started(relaxed + tight)
    while start is None:
        assert time.monotonic() < deadline_s, "the eight jobs did not all start within 90 s"
        time.sleep(0.5)
        start = jobs.started(relaxed + tight)
    # Slurm alone starts them in submission order; the daemon put the tight deadlines first.
    assert max(start[j] for j in tight) < min(start[j] for j in relaxed), start
