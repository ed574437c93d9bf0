"""`elasticflow` in the simulator (sticky admission, resizes that hold on the nodes), and the
free-GPU profile `deadline` plans over (policies/deadline/profile.py) against the simple one it
replaced (reference_elasticflow._ReservedGpus)."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from typing import Any

import pytest
import reference_elasticflow as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_rl.core import (
    Decision,
)
from slurm_rl.policies import elasticflow, make
from slurm_rl.policies.deadline.profile import LazyProfile, ReservedGpus
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator

NOW = 10_000.0
MODELS = (None, "resnet50", "bert")


def _plain(d: Decision) -> tuple[Any, ...]:
    """Everything a Decision holds, reasons read."""
    return (d.policy, [(o.job_id, o.rank, o.gpus, o.reason) for o in d.order], d.resizes,
            d.preemptions, d.notes)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.lists(st.tuples(
    st.sampled_from((-5.0, 0.0, 10.0, 10.0, 50.0, math.inf)), st.integers(0, 4)), max_size=8),
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from((1.0, 30.0, 100.0)),
                       st.sampled_from((20.0, 60.0, 1e9)), st.booleans()), max_size=8))
def test_profile_agrees_with_one_add_at_a_time(
        base: int, holds: list[tuple[float, int]],
        asks: list[tuple[int, float, float, bool]]) -> None:
    now = 0.0
    fast = ReservedGpus.of_holds(12, now, base, holds)
    slow = ref._ReservedGpus(12, now)
    slow.add(now, math.inf, base)
    for end, g in holds:
        slow.add(now, end, g)
    assert (fast.times, fast.used) == (slow.times, slow.used)
    for g, dur, deadline, now_only in asks:  # the memo of full segments agrees too
        s = fast.earliest(g, dur, deadline, now_only)
        assert s == slow.earliest(g, dur, deadline, now_only)
        if s is not None:
            fast.add(s, s + dur, g)
            slow.add(s, s + dur, g)
            assert (fast.times, fast.used) == (slow.times, slow.used)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.lists(st.tuples(
    st.sampled_from((-5.0, 0.0, 10.0, 10.0, 50.0, math.inf)), st.integers(0, 4)), max_size=8),
    st.integers(0, 6),
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from((1.0, 30.0, 100.0)),
                       st.sampled_from((0.5, 20.0, 60.0, 1e9)), st.booleans()), max_size=8))
def test_lazy_profile_answers_as_the_built_one(
        base: int, holds: list[tuple[float, int]], slack: int,
        asks: list[tuple[int, float, float, bool]]) -> None:
    """LazyProfile with any bound at or above what the profile holds at now (`slack` over it)
    answers and reserves as the profile built first."""
    now = 0.0
    eager = ReservedGpus.of_holds(12, now, base, holds)
    builds: list[int] = []

    def build() -> ReservedGpus:
        builds.append(1)
        return ReservedGpus.of_holds(12, now, base, holds)

    lazy = LazyProfile(12, now, lambda: eager.used[0] + slack, build)
    for g, dur, deadline, now_only in asks:
        s = lazy.earliest(g, dur, deadline, now_only)
        assert s == eager.earliest(g, dur, deadline, now_only)
        if s is not None:
            lazy.add(s, s + dur, g)
            eager.add(s, s + dur, g)
    assert len(builds) <= 1
    if lazy.built is not None:
        assert (lazy.built.times, lazy.built.used) == (eager.times, eager.used)


def _elastic(jobs: tuple[trace.TraceJob, ...]) -> tuple[trace.TraceJob, ...]:
    """Every third job a GPU range, half of those elastic."""
    return tuple(dataclasses.replace(j, gpus_min=1, gpus_max=8, elastic=i % 2 == 0)
                 if i % 3 == 0 else j for i, j in enumerate(jobs))


@pytest.mark.parametrize("one_step", [True, False], ids=["one-step restarts", "in steps"])
@pytest.mark.parametrize(("count", "load"), [(200, 1.1)])
def test_in_the_simulator(count: int, load: float, one_step: bool) -> None:
    """Admission is sticky (a declined job is never admitted later, an admitted one never
    declined), also while a restarted job waits out its requeue step (shown pending and held,
    as live); with one-step restarts every resize it asks for holds on the nodes; the same run
    twice is the same."""
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = _elastic(trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                            "itp-deadline").jobs, 0, count))
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4)
    if one_step:
        config = dataclasses.replace(config, restart_grace_s=0.0, requeue_s=0.0)
    policy = make("elasticflow")
    assert isinstance(policy, elasticflow.ElasticFlow)
    seen_admitted: set[str] = set()
    seen_declined: set[str] = set()
    sim = Simulator(jobs, policy, config)
    while (point := sim.step()) is not None:
        d = policy.decide(point.snapshot)
        sticky = policy._sticky
        assert not (seen_admitted & sticky.declined) and not (seen_declined & sticky.admitted)
        seen_admitted |= sticky.admitted
        seen_declined |= sticky.declined
        sim.apply(d)
    result = sim.result()
    assert result.resizes > 0
    if one_step:  # (in steps it asks to grow onto GPUs a signalled job holds until requeued)
        assert "resize does not fit" not in result.notes
    assert policy.declined_jobs == len(seen_declined) > 0
    again = Simulator(jobs, make("elasticflow"), config).run()
    assert (again.jobs, again.resizes) == (result.jobs, result.resizes)
