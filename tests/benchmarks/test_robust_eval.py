"""benchmarks/robust_eval.py: loads that size the same cluster are one cell, labelled with
every load it stands for, run once and counted once in the worst / mean / above-1 figures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.robust_eval import render, sizes_for  # noqa: E402
from slurm_rl.sim.trace import TraceJob  # noqa: E402

# Mean demand: (16 x 1000 + 10 x 1 x 1000) / 1000 s of submissions = 26 GPUs; a 16-GPU job
# needs 4 nodes of 4 GPUs.
JOBS = (TraceJob(id="wide", submit=0.0, duration=1000.0, gpus=16),
        *(TraceJob(id=f"j{i}", submit=100.0 * (i + 1), duration=1000.0, gpus=1)
          for i in range(10)))


def test_loads_that_size_alike_merge_into_one_labelled_cell() -> None:
    demand = 26.0
    # 26 GPUs at load 0.5: 13 nodes; at 2.0 and 4.0 the widest job's 4 nodes (it needs 4
    # and demand alone would give 4 and 2).
    sizes = sizes_for(JOBS, 4, [0.5, 2.0, 4.0])
    assert [s.nodes for s in sizes] == [13, 4]
    assert sizes[0].label == 0.5
    assert sizes[1].label == "2.0, 4.0 (same 4 nodes: the widest job)"
    assert sizes[0].effective_load == pytest.approx(demand / (13 * 4))
    assert sizes[1].effective_load == pytest.approx(demand / 16)


def test_fixed_sizes_are_labelled_by_nodes() -> None:
    sizes = sizes_for(JOBS, 4, [0.5], nodes=[8, 16])
    assert [(s.label, s.nodes) for s in sizes] == [("8 nodes", 8), ("16 nodes", 16)]


def _row(load: Any, nodes: int, policy: str, jct: float) -> dict[str, Any]:
    return {"workload": "w", "held_out": True, "load": load, "nodes": nodes,
            "effective_load": 0.5, "limits": "fixed", "policy": policy, "seed": 0,
            "mean_jct_s": jct, "p95_jct_s": jct, "short_wait_s": None, "utilisation": 0.5,
            "requeues": 0, "guard_switches": 0}


def test_a_merged_cell_counts_once() -> None:
    suite = {"target": "rl", "policies": ["fifo", "rl"], "heuristics": ["fifo"]}
    merged = "1.0, 1.3 (same 4 nodes: the widest job)"
    rows = [_row(0.7, 8, "fifo", 100.0), _row(0.7, 8, "rl", 90.0),
            _row(merged, 4, "fifo", 100.0), _row(merged, 4, "rl", 120.0)]
    text = render(rows, suite)
    assert "2 cells" in text
    assert "Mean ratio 1.050; cells above 1.00: 1." in text
    assert f"| w | {merged} | 4 | 0.50 | fixed | 1.200 |" in text
