"""`slurm-rl agent`: NVML sample → Extra JSON → decoded → database row; the no-NVML path (for
real: this machine has no GPU); and the Extra write on the real test cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.core import GpuSample, NodeName, NodeState, NodeView
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import GpuSampleRow
from slurm_rl.db.repo import record_node_samples
from slurm_rl.gpu_extra import decode_samples
from slurm_rl.nvml_agent import NvmlSource, NvmlUnavailable, extra_argv, run_agent
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import SubprocessRunner

MIB = 1024 * 1024


class FakeNVMLError(Exception):
    pass


class FakePynvml:
    """A stand-in for the pynvml module with fixed readings. Synthetic values in the shape
    NVML returns them (bytes, milliwatts, °C, %); not recorded from hardware. GPU 1 says
    'not supported' for power, as NVML does on some boards."""

    NVMLError = FakeNVMLError
    NVML_TEMPERATURE_GPU = 0
    DEVICES = (
        dict(util=87, used=61_234 * MIB, total=143_771 * MIB, power=452_318, temp=63),
        dict(util=0, used=512 * MIB, total=143_771 * MIB, power=None, temp=31),
    )

    def __init__(self) -> None:
        self.shut = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.DEVICES)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.DEVICES[i]

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(used=h["used"], total=h["total"], free=h["total"] - h["used"])

    def nvmlDeviceGetUtilizationRates(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=h["util"], memory=0)

    def nvmlDeviceGetPowerUsage(self, h: dict[str, Any]) -> int:
        if h["power"] is None:
            raise FakeNVMLError("Not Supported")
        return int(h["power"])

    def nvmlDeviceGetTemperature(self, h: dict[str, Any], sensor: int) -> int:
        return int(h["temp"])


EXPECTED = (
    GpuSample(index=0, util_pct=87.0, mem_used_mib=61234, mem_total_mib=143771, power_w=452.3,
              temp_c=63.0),
    GpuSample(index=1, util_pct=0.0, mem_used_mib=512, mem_total_mib=143771, power_w=None,
              temp_c=31.0),
)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(tmp_path / "agent.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        yield s
    engine.dispose()


def test_nvml_source_reads_every_gpu() -> None:
    assert NvmlSource(FakePynvml()).sample() == EXPECTED


def test_sample_to_extra_json_to_database_row(session: Session) -> None:
    argv = extra_argv("node7", NvmlSource(FakePynvml()).sample(), at=1_764_460_000.9)
    extra = argv[-1].removeprefix("Extra=")
    assert argv[:3] == ["scontrol", "update", "NodeName=node7"]
    assert extra == ('{"rl":1,"t":1764460000,"g":[[0,87,61234,143771,452.3,63],'
                     '[1,0,512,143771,null,31]]}')
    samples, at = decode_samples(extra)
    assert samples == EXPECTED and at == 1_764_460_000
    node = NodeView(name=NodeName("node7"), state=NodeState.IDLE, gpus_total=2,
                    samples=samples, sampled_at=at)
    assert record_node_samples(session, [node], now=at + 5) == 2
    assert record_node_samples(session, [node], now=at + 15) == 0  # same Extra: stored once
    rows = session.scalars(select(GpuSampleRow).order_by(GpuSampleRow.gpu_index)).all()
    assert [(r.node, r.at, r.gpu_index, r.util_pct, r.mem_used_mib, r.mem_total_mib,
             r.power_w, r.temp_c) for r in rows] == [
        ("node7", at, 0, 87.0, 61234.0, 143771.0, 452.3, 63.0),
        ("node7", at, 1, 0.0, 512.0, 143771.0, None, 31.0)]


def _nvml_works() -> bool:
    try:
        NvmlSource().close()
    except NvmlUnavailable:
        return False
    return True


@pytest.mark.skipif(_nvml_works(), reason="this host has NVML and a GPU")
def test_without_nvml_the_agent_says_one_line_and_exits_0(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"  # (a configuration source, so that NVML is what is missing)
    conf.write_text("ClusterName=none\n")
    out = subprocess.run([str(Path(sys.executable).with_name("slurm-rl")), "agent", "--once",
                          "--node", "nodeX"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SLURM_CONF": str(conf)})
    assert out.returncode == 0
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurm-rl agent: no GPU to sample on nodeX")


def test_without_nvml_the_agent_keeps_retrying(capsys: pytest.CaptureFixture[str]) -> None:
    attempts = []

    def unavailable() -> NvmlSource:
        attempts.append(1)
        if len(attempts) >= 3:
            stop.set()
        raise NvmlUnavailable("NVML Shared Library Not Found")

    stop = threading.Event()
    code = run_agent(node="n", interval_s=0.01, once=False, stop=stop,
                     runner=SubprocessRunner(), open_source=unavailable)
    assert code == 0 and len(attempts) == 3
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slurm
def test_fake_samples_reach_the_node_extra_on_the_real_cluster() -> None:
    node = "node3"
    before = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-O", "Extra:4000"],
                            capture_output=True, text=True, check=True).stdout.strip()
    try:
        code = run_agent(node=node, interval_s=1, once=True, stop=threading.Event(),
                         runner=SubprocessRunner(), open_source=lambda: NvmlSource(FakePynvml()))
        assert code == 0
        (view,) = [n for n in SlurmAdapter().poll_nodes() if n.name == node]
        assert view.samples == EXPECTED and view.sampled_at is not None
    finally:
        restore = "" if before in ("", "(null)") else before
        subprocess.run(["scontrol", "update", f"NodeName={node}", f"Extra={restore}"],
                       check=True)
