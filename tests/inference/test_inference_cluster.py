"""inference/cluster.py: cluster files, bandwidth matrices, the roofline."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.schedulers import dp_chain
from slurm_rl.inference.sim import InferenceSim, StreamConfig


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_cluster_file_with_bandwidth_matrix(tmp_path: Path) -> None:
    (tmp_path / "bw.csv").write_text("# Gbit/s\n0,10,1\n10,0,1\n1,1,0\n")
    c = cl.load(_toml(tmp_path, 'bandwidth_file = "bw.csv"\nsource = 2\n'
                      '[[device]]\ntype = "a100"\ncount = 2\n'
                      '[[device]]\nname = "edge"\nflops_per_s = 1e12\nmem_bytes_per_s = 1e11\n'
                      'memory_bytes = 1e9\noverhead_s = 0\n'))
    assert [d.name for d in c.devices] == ["a100-0", "a100-1", "edge-2"]
    assert c.source == 2
    assert c.bandwidth[0, 1] == 10 * cl.GBPS and np.isinf(c.bandwidth[1, 1])
    t = c.compute_times(resolve("vgg"))
    assert t.shape == (27, 3) and t[:, 2].sum() > 5 * t[:, 0].sum()


@pytest.mark.parametrize(("text", "message"), [
    ('bandwidth_gbps = 10\n', "needs at least one [[device]]"),
    ('bandwidth_gbps = 10\n[[device]]\ntype = "h900"\n', "type 'h900' is not one of"),
    ('bandwidth_gbps = 10\n[[device]]\nflops_per_s = 1e12\n', "mem_bytes_per_s missing"),
    ('bandwidth_gbps = 0\n[[device]]\ntype = "t4"\n', "bandwidth_gbps: 0 is not a positive"),
    ('bandwidth_gbps = 1\ncolour = 1\n[[device]]\ntype = "t4"\n', "unknown key(s) ['colour']"),
    ('bandwidth_gbps = 1\nsource = 3\n[[device]]\ntype = "t4"\n', "source must be a device"),
    ('bandwidth_gbps = 1\n[[device]]\ntype = "t4"\nmemory_bytes = -1\n',
     "device 0: memory_bytes: -1 is not a positive"),
    ('bandwidth_gbps = [\n', "not TOML"),
    ('bandwidth_gbps = 1\nlink_latency_s = -1e-4\n[[device]]\ntype = "t4"\n',
     "link_latency_s: -0.0001 is not a positive"),
    ('bandwidth_gbps = 1\nlink_latency_s = "100us"\n[[device]]\ntype = "t4"\n',
     "link_latency_s: '100us' is not a positive"),
    ('bandwidth_gbps = 1\n[[device]]\ntype = "cpu"\nmeasured_layer_times = "yes"\n',
     "device 0: measured_layer_times must be true or false"),
])
def test_malformed_cluster_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(cl.ClusterError) as err:
        cl.load(_toml(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("csv", "message"), [
    ("0,10\n10,0\n", "line 1: expected 3 values"),
    ("0,10,1\n10,0,x\n1,1,0\n", "line 2 column 3: 'x' is not a number"),
    ("0,10,1\n10,0,-1\n1,1,0\n", "line 2 column 3: bandwidth must be a positive"),
    ("0,10,1\n10,0,inf\n1,1,0\n", "line 2 column 3: bandwidth must be a positive"),
    ("0,10,1\n10,0,1\n", "2 rows, expected 3"),
])
def test_malformed_bandwidth_matrices(tmp_path: Path, csv: str, message: str) -> None:
    (tmp_path / "bw.csv").write_text(csv)
    with pytest.raises(cl.ClusterError) as err:
        cl.load(_toml(tmp_path, 'bandwidth_file = "bw.csv"\n[[device]]\ntype = "t4"\n'
                      'count = 3\n'))
    assert message in str(err.value) and "bw.csv" in str(err.value)


def test_diagonal_may_be_zero_and_is_free() -> None:
    c = cl.make(["t4", "t4"], 10)
    assert (1.0 / c.bandwidth)[0, 0] == 0.0


def test_shipped_example_cluster_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "inference" / "cluster.toml"
    c = cl.load(example)
    assert [d.name for d in c.devices] == ["a100-0", "t4-1", "t4-2", "edge-3"]
    assert c.bandwidth[1, 2] == 25 * cl.GBPS and c.bandwidth[3, 0] == 1 * cl.GBPS


def test_link_latency_and_measured_layer_times(tmp_path: Path) -> None:
    """The two terms the pipelined example's prediction uses (docs/inference.md): a transfer
    between two devices costs the link latency on top of bytes / bandwidth, and a device marked
    measured_layer_times takes each layer's CPU time measured by `inference profile`."""
    c = cl.load(_toml(tmp_path, 'bandwidth_gbps = 8\nlink_latency_s = 1e-4\n'
                      '[[device]]\ntype = "cpu"\ncount = 2\nmeasured_layer_times = true\n'
                      '[[device]]\ntype = "cpu"\n'))
    assert c.link_latency_s == 1e-4
    assert c.latency()[0, 1] == 1e-4 and c.latency()[1, 1] == 0.0
    prof = resolve("mobilenet")
    measured = cl.measured_times(prof)
    assert measured is not None and len(measured) == len(prof.layers)
    t = c.compute_times(prof)
    assert np.array_equal(t[:, 0], measured) and np.array_equal(t[:, 1], measured)
    assert np.array_equal(t[:, 2], cl.make(["cpu"]).compute_times(prof)[:, 0])  # roofline
    assert not np.allclose(t[:, 2], measured)
    # a profile whose layers differ from the measured model's keeps the roofline
    renamed = Profile(model="mobilenet", input_bytes=prof.input_bytes,
                      layers=prof.layers[:-1])
    assert cl.measured_times(renamed) is None
    assert cl.load(_toml(tmp_path, 'bandwidth_gbps = 8\n[[device]]\ntype = "t4"\n')
                   ).link_latency_s == 0.0


def test_measured_layer_times_without_measurements_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """A device marked measured_layer_times for a model cpu_times.csv does not have falls back
    to the roofline, and the log says so (once per model), so a mis-set cluster file is seen."""
    prof = resolve("mobilenet")
    other = Profile(model="not-measured-model", input_bytes=prof.input_bytes,
                    layers=prof.layers)
    c = replace(cl.make(["cpu"]), devices=tuple(
        replace(d, measured_layer_times=True) for d in cl.make(["cpu"]).devices))
    with caplog.at_level(logging.WARNING, logger="slurm_rl.inference.cluster"):
        t1, t2 = c.compute_times(other), c.compute_times(other)
    assert np.array_equal(t1, cl.make(["cpu"]).compute_times(other)) and np.array_equal(t1, t2)
    said = [r.getMessage() for r in caplog.records if "not-measured-model" in r.getMessage()]
    assert len(said) == 1 and "roofline" in said[0]


def test_a_transfer_costs_the_link_latency_plus_bytes_over_bandwidth() -> None:
    prof = resolve("mobilenet")
    base = cl.make(["cpu", "cpu"], 8.0)  # 1 GB/s
    lat = replace(base, link_latency_s=2e-4)
    comp = base.compute_times(prof)[:, 0]
    split = 40  # layers 0..39 on device 0, the rest on device 1
    for c, extra in ((base, 0.0), (lat, 2e-4)):
        sim = InferenceSim(c, [prof], StreamConfig(tasks=1, noise=0.0))
        for i in range(len(prof.layers)):
            sim.place(0 if i < split else 1)
        hop = prof.layers[split - 1].out_bytes / 1e9 + extra
        assert sim.records[0].latency == pytest.approx(comp.sum() + hop, rel=1e-9)
    # the DP bound prices a hop the same way as the simulator
    fast = replace(cl.make(["cpu", "a100"], 8.0), link_latency_s=2e-4)
    best, path = dp_chain(prof, fast)
    sim = InferenceSim(fast, [prof], StreamConfig(tasks=1, noise=0.0))
    for d in path:
        sim.place(d)
    assert path[-1] == 1 and sim.records[0].latency == pytest.approx(best, rel=1e-9)
