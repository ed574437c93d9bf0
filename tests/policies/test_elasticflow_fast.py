"""`elasticflow` against the code it replaced (reference_elasticflow), decision for decision:
on sequences of snapshots that share view objects (its per-view cache, its running-set cache)
and in the simulator, rigid and elastic."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from typing import Any

import pytest
import reference_elasticflow as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
)
from slurm_rl.policies import make
from slurm_rl.policies.gpu_profile import LazyProfile, ReservedGpus
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator

NOW = 10_000.0
MODELS = (None, "resnet50", "bert")


def _plain(d: Decision) -> tuple[Any, ...]:
    """Everything a Decision holds, reasons read."""
    return (d.policy, [(o.job_id, o.rank, o.gpus, o.reason) for o in d.order], d.resizes,
            d.preemptions, d.notes)


@st.composite
def views(draw: st.DrawFn, i: int, state: JobState) -> JobView:
    ranged = draw(st.booleans())
    lo = draw(st.integers(1, 4))
    intent = Intent(
        deadline=draw(st.sampled_from((None, NOW + 50, NOW + 600, NOW + 3000, NOW + 20000))),
        gpus_min=lo if ranged else None, gpus_max=lo * draw(st.sampled_from((2, 4))) if ranged
        else None, elastic=draw(st.booleans()), model=draw(st.sampled_from(MODELS)),
        batch_size=draw(st.sampled_from((None, 64, 256))),
        total_steps=draw(st.sampled_from((None, 1000, 50000))))
    running = state is JobState.RUNNING
    return JobView(
        id=JobId(str(i)), state=state, submit_time=draw(st.sampled_from((0.0, 5.0, 9.0))),
        gpus=draw(st.sampled_from((1, 1, 2, 4, 8))), held=not running and draw(
            st.sampled_from((False, False, True))),
        intent=draw(st.sampled_from((intent, intent, None))),
        start_time=NOW - 100 if running else None,
        time_limit_s=draw(st.sampled_from((None, 700.0, 9000.0))),
        predicted_remaining_s=draw(st.sampled_from((None, 0.0, 100.0, 400.0, 2500.0))),
        progress=draw(st.sampled_from((None, Progress(steps_done=10, steps_total=1000,
                                                         rate=1.0)))))


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, Any], list[ClusterSnapshot]]:
    options = {"resize_cost_s": draw(st.sampled_from((0.0, 30.0, 600.0))),
               "min_gain": draw(st.sampled_from((0.0, 0.1, 0.5)))}
    n = draw(st.integers(1, 9))
    jobs = [draw(views(i + 1, draw(st.sampled_from((JobState.PENDING, JobState.RUNNING)))))
            for i in range(n)]
    snaps, now = [], NOW
    for _ in range(draw(st.integers(1, 5))):
        for i in range(n):  # some jobs change (a new view), the others keep theirs
            if draw(st.integers(0, 3)) == 0:
                state = draw(st.sampled_from((JobState.PENDING, JobState.RUNNING)))
                jobs[i] = draw(views(i + 1, state))
        now += draw(st.sampled_from((0.0, 1.0, 600.0)))
        shown = [j for j in jobs if draw(st.integers(0, 5))]
        free = draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
        nodes = tuple(NodeView(name=NodeName(f"n{k}"), state=draw(st.sampled_from(
            (NodeState.MIXED, NodeState.MIXED, NodeState.DOWN))), gpus_total=4,
            gpus_alloc=4 - f + draw(st.sampled_from((0, 0, 1)))) for k, f in enumerate(free))
        snaps.append(ClusterSnapshot(time=now, jobs=tuple(shown), nodes=nodes))
        if draw(st.booleans()):
            snaps.append(snaps[-1])
    return options, snaps


@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_decides_as_before(history: tuple[dict[str, Any], list[ClusterSnapshot]]) -> None:
    options, snaps = history
    old, new = ref.new(**options), make("elasticflow", **options)
    for s in snaps:
        assert _plain(new.decide(s)) == _plain(old.decide(s))


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


@pytest.mark.parametrize(("count", "load", "elastic"), [(600, 0.8, False), (600, 1.2, False),
                                                         (300, 0.9, True)])
def test_in_the_simulator_as_before(count: int, load: float, elastic: bool) -> None:
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                   "itp-deadline").jobs, 0, count)
    jobs = _elastic(jobs) if elastic else jobs
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4)
    old = Simulator(jobs, ref.new(), config).run()
    new = Simulator(jobs, make("elasticflow"), config).run()
    assert (new.jobs, new.intervals, new.decisions, new.resizes, new.notes) == (
        old.jobs, old.intervals, old.decisions, old.resizes, old.notes)
    assert not elastic or new.resizes > 0
