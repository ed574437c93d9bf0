"""inference/cluster.py: cluster files, bandwidth matrices, the roofline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slurm_rl.inference import cluster as cl
from slurm_rl.inference.profile import resolve


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
