"""docker/engine-up and docker/ensure-dockerd, which `make test` runs to choose the test
cluster's engine: the Docker engine is used when it answers (or can be started), and a host
where none can run falls back to the native launcher with one loud line saying why.

The fallback is shown with fakes: a `docker` client that never reaches an engine and a
`fake-dockerd` that refuses to start, first on PATH (`--choose` starts no cluster)."""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _fakes(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        "docker": 'echo "fake docker: Cannot connect to the Docker daemon" >&2\nexit 1\n',
        "fake-dockerd": 'echo \'time=x level=fatal msg="fake-dockerd: iptables refused"\'\n'
                        "exit 1\n",
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SLURM_RL_DOCKERD": "fake-dockerd", "SLURM_RL_DOCKERD_WAIT": "5",
            "SLURM_RL_DOCKERD_LOG": str(tmp_path / "dockerd.log")}


def test_no_engine_falls_back_to_native_with_one_loud_line(tmp_path: Path) -> None:
    out = subprocess.run([str(DOCKER / "engine-up"), "--choose", "docker"],
                         env=_fakes(tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "native\n"
    warnings = [ln for ln in out.stderr.splitlines() if ln.startswith("==> WARNING")]
    assert len(warnings) == 1, out.stderr
    assert "ENGINE=docker, but no Docker engine can run here (" in warnings[0]
    assert "testing on the NATIVE launcher instead" in warnings[0]
    if os.geteuid() == 0:
        # It tried to start the (fake) dockerd, and the reason is that dockerd's own line.
        assert 'fake-dockerd exited at start: time=x level=fatal msg="fake-dockerd: iptables ' \
               'refused"' in warnings[0]
        assert "starting fake-dockerd" in (tmp_path / "dockerd.log").read_text()
    else:
        assert "starting dockerd needs root" in warnings[0]


def test_native_is_chosen_without_asking_for_an_engine(tmp_path: Path) -> None:
    out = subprocess.run([str(DOCKER / "engine-up"), "--choose", "native"],
                         env=_fakes(tmp_path), capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout, out.stderr) == (0, "native\n", "")
    assert not (tmp_path / "dockerd.log").exists()


@pytest.mark.parametrize("argv", [[], ["podman"], ["--choose"], ["docker", "native"]])
def test_a_wrong_engine_is_a_usage_error(argv: list[str]) -> None:
    out = subprocess.run([str(DOCKER / "engine-up"), *argv], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2
    assert out.stderr == "engine-up: error: usage: docker/engine-up [--choose] docker|native\n"
    assert out.stdout == ""


def test_a_running_engine_is_used_as_it_is() -> None:
    try:
        # By name: for mypy, `docker` would be the repository's docker/ folder.
        sdk: Any = importlib.import_module("docker")
        sdk.from_env().ping()
    except Exception as e:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine answers here ({type(e).__name__}); the fallback is "
                    "test_no_engine_falls_back_to_native_with_one_loud_line")
    ensure = subprocess.run([str(DOCKER / "ensure-dockerd")], capture_output=True, text=True,
                            timeout=60)
    assert (ensure.returncode, ensure.stderr) == (0, "")
    out = subprocess.run([str(DOCKER / "engine-up"), "--choose", "docker"],
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, "docker\n", "")
