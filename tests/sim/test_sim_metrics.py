from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.metrics import (
    deadline_hit_rate,
    gpu_utilization,
    percentile,
    summary,
    utilization_series,
)
from slurm_rl.sim.results import Interval, JobRecord, SimResult


def rec(i: str, submit: float, start: float, end: float, deadline: float | None = None
        ) -> JobRecord:
    return JobRecord(job_id=i, submit=submit, start=start, end=end, gpus=2, restarts=0,
                     deadline=deadline, trace_gpus=2, trace_duration=end - start)


def result(jobs: tuple[JobRecord, ...], intervals: tuple[Interval, ...]) -> SimResult:
    return SimResult(policy="p", config=EngineConfig(nodes=1, gpus_per_node=4), jobs=jobs,
                     intervals=intervals, dropped=0, decisions=0, preemptions=0, resizes=0,
                     notes={}, note_samples=(), wall_s=0.0)


def iv(i: str, start: float, end: float, gpus: int) -> Interval:
    return Interval(job_id=i, start=start, end=end, gpus=gpus, nodes=("node1",),
                    node_gpus=(gpus,))


def test_percentile_interpolates_like_numpy() -> None:
    xs = [1.0, 2.0, 3.0, 4.0]
    assert [percentile(xs, q) for q in (0, 50, 95, 100)] == [1.0, 2.5, pytest.approx(3.85), 4.0]


def test_summary() -> None:
    jobs = (rec("a", 0, 0, 10, deadline=10), rec("b", 0, 10, 20, deadline=15))
    r = result(jobs, (iv("a", 0, 10, 2), iv("b", 10, 20, 2)))
    s = summary(r)
    assert (s["avg_jct_s"], s["p50_jct_s"], s["makespan_s"]) == (15.0, 15.0, 20.0)
    assert s["avg_wait_s"] == 5.0
    assert s["gpu_utilization"] == gpu_utilization(r) == 0.5  # 2 of 4 GPUs all along
    assert s["deadline_hit_rate"] == deadline_hit_rate(jobs) == 0.5
    assert deadline_hit_rate((rec("c", 0, 0, 1),)) is None


def test_utilization_series_averages_each_bin() -> None:
    r = result((rec("a", 0, 0, 10),), (iv("a", 0, 5, 4), iv("a", 5, 10, 2)))
    times, util = utilization_series(r, points=4)
    assert times == [1.25, 3.75, 6.25, 8.75]
    assert util == [1.0, 1.0, 0.5, 0.5]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 500), st.integers(1, 4)),
                min_size=1, max_size=20), st.integers(1, 50))
@example(runs=[(0.0, 5e-324, 1)], points=2)  # bins narrower than the smallest float
def test_utilization_series_averages_to_the_utilization(
        runs: list[tuple[float, float, int]], points: int) -> None:
    jobs = tuple(rec(str(i), s, s, s + d) for i, (s, d, _) in enumerate(runs))
    ivs = tuple(iv(str(i), s, s + d, g) for i, (s, d, g) in enumerate(runs))
    r = result(jobs, ivs)
    times, util = utilization_series(r, points)
    assert len(times) == len(util) == points
    if max(j.end for j in jobs) > min(j.submit for j in jobs):
        assert sum(util) / points == pytest.approx(gpu_utilization(r), abs=1e-9)
