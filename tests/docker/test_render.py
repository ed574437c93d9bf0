"""The dockerized cluster's configuration (docker/cluster_docker.py): pure, no Docker needed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parents[2] / "docker"
sys.path.insert(0, str(DOCKER))

import cluster_docker  # noqa: E402


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> cluster_docker.Settings:
    monkeypatch.setenv("SLURM_RL_CLUSTER_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("SLURM_RL_DOCKER_SUBNET", "10.9.8.0/24")
    monkeypatch.delenv("SLURM_RL_DEBIAN", raising=False)
    return cluster_docker.Settings()


def test_only_host_node_and_port_lines_differ_from_the_native_template(
        settings: cluster_docker.Settings) -> None:
    files = cluster_docker.render(settings)
    conf = files["slurm.conf"].splitlines()
    assert "SlurmctldHost=slurmctld(10.9.8.2)" in conf
    nodes = [line for line in conf if line.startswith("NodeName=")]
    assert [n.split()[:4] for n in nodes] == [
        [f"NodeName=node{k}", f"NodeHostname=node{k}", f"NodeAddr=10.9.8.{10 + k}", "Port=6818"]
        for k in range(1, 5)]
    assert all("CPUs=8" in n and "RealMemory=16000" in n and "Gres=gpu:4" in n for n in nodes)
    # Everything else is the native template with the directory filled in.
    native = (DOCKER / "config" / "slurm.conf.in").read_text()
    native = native.replace("${SLURM_RL_DIR}", str(settings.dir))
    native = native.replace("${SLURM_RL_CTLD_PORT}", "6817")
    native = native.replace("${SLURM_RL_SLURMD_PORT_FIRST}", "6818")
    # slurmdbd: in its own container, at the network's .3
    native = native.replace("${SLURM_RL_DBD_HOST}", "10.9.8.3")
    native = native.replace("${SLURM_RL_DBD_PORT}", "6819")
    kept = [line for line in native.splitlines()
            if line and not line.startswith(("#", "SlurmctldHost=", "NodeName="))]
    assert [line for line in kept if line not in conf] == []
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStorageEnforce=associations,limits,qos" in conf
    dbd = files["slurmdbd.conf"].splitlines()
    assert {"DbdPort=6819", "StorageHost=127.0.0.1", "StoragePort=3306",
            f"AuthInfo=socket={settings.dir}/munge/munge.socket"} <= set(dbd)
    rendered = (files["slurm.conf"] + files["gres.conf"] + files["plugstack.conf"]
                + files["slurmdbd.conf"])
    assert re.findall(r"\$\{SLURM_RL_[A-Z_]+\}", rendered) == []
    assert f"File={settings.dir}/dev/node4/nvidia[12-15]" in files["gres.conf"]
    assert files["job_submit.lua"] == (DOCKER / "config" / "job_submit.lua").read_text()


def test_a_native_clusters_directory_is_refused(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spool").mkdir()
    monkeypatch.setenv("SLURM_RL_CLUSTER_DIR", str(tmp_path))
    with pytest.raises(cluster_docker.Usage, match="holds a native cluster"):
        cluster_docker.Settings()


@pytest.mark.parametrize(("var", "value", "message"), [
    ("SLURM_RL_DOCKER_SUBNET", "10.9.8.0/29", "needs at least a /27"),
    ("SLURM_RL_DOCKER_SUBNET", "nonsense", "SLURM_RL_DOCKER_SUBNET=nonsense"),
    ("SLURM_RL_DEBIAN", "buster", "not one of bookworm, trixie, forky"),
    ("SLURM_RL_UP_TIMEOUT", "soon", "not a number of seconds"),
])
def test_bad_settings_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str,
                                value: str, message: str) -> None:
    monkeypatch.setenv("SLURM_RL_CLUSTER_DIR", str(tmp_path / "c"))
    monkeypatch.setenv(var, value)
    with pytest.raises(cluster_docker.Usage, match=message):
        cluster_docker.Settings()


def test_bad_command_line_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_RL_CLUSTER_DIR", str(tmp_path / "c"))
    assert cluster_docker.main(["upp"]) == 2
    assert capsys.readouterr().err.startswith("cluster: error: unknown command 'upp'")
    assert not (tmp_path / "c").exists()
