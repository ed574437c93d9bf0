"""The fast policy code against the code it replaced (reference_policies): the count-per-free
capacity, the planners, the sort shortcuts, and tiresias over sequences of snapshots in which
jobs start, stop, finish, vanish and come back."""

from __future__ import annotations

import math
from importlib import resources
from typing import Any

import pytest
import reference_policies as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_rl.core import (
    ClusterSnapshot,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
)
from slurm_rl.policies import make
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.ordering import latest_first, managed_pending, orders, submit_key
from slurm_rl.policies.preemption import plan_by_level, plan_preemptions
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

parts_lists = st.lists(st.integers(0, 9), max_size=4)


@SETTINGS
@given(free=st.lists(st.integers(0, 8), max_size=10),
       ops=st.lists(st.tuples(st.sampled_from(("fits", "take", "release", "copy")), parts_lists),
                    max_size=25))
def test_capacity_agrees_with_the_per_node_model(free: list[int],
                                                 ops: list[tuple[str, list[int]]]) -> None:
    node_cap = max(free, default=0)
    old, new = ref.Capacity(free=list(free), node_cap=node_cap), Capacity(free, node_cap)
    for op, parts in ops:
        if op == "fits":
            assert new.fits(parts) == old.fits(parts)
        elif op == "take":
            assert new.take(parts) == old.take(parts)
        elif op == "release":
            new.release(parts)
            old.release(parts)
        else:
            new, old = new.copy(), old.copy()
        assert new.free == sorted(old.free)
        assert new.total_free == old.total_free and new.node_cap == old.node_cap


def _job(i: int, gpus: int, nodes: int, submit: float, state: JobState) -> JobView:
    return JobView(id=JobId(str(i)), state=state, submit_time=submit, gpus=gpus, nodes=nodes)


shapes = st.sampled_from([(1, 1), (2, 1), (3, 1), (4, 1), (8, 2), (6, 2), (12, 3), (16, 4), (5, 2)])


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    free = draw(st.lists(st.integers(0, 4), min_size=1, max_size=10))
    top = draw(st.integers(1, 3))
    times = st.sampled_from((0.0, 10.0, 10.0, 20.0, 35.0, 50.0))
    victims, pending, level = [], [], {}
    for i in range(draw(st.integers(0, 14))):
        g, n = draw(shapes)
        v = _job(i, g, n, draw(times), JobState.RUNNING)
        victims.append(v)
        level[v.id] = draw(st.integers(0, top))
    for i in range(100, 100 + draw(st.integers(0, 6))):
        g, n = draw(shapes)
        p = _job(i, g, n, draw(times), JobState.PENDING)
        pending.append(p)
        level[p.id] = draw(st.integers(0, top))
    pending.sort(key=lambda p: level[p.id])
    return {"free": free, "top": top, "victims": victims, "pending": pending, "level": level}


@SETTINGS
@given(plans())
def test_planners_agree_with_the_reference(case: dict[str, Any]) -> None:
    free, level, victims = case["free"], case["level"], case["victims"]

    def reason(v: JobView, p: JobView) -> str:
        return f"{v.id} for {p.id}"

    ordered = sorted(victims, key=lambda v: (level[v.id], submit_key(v)), reverse=True)
    expected = ref.plan_preemptions(ref.Capacity(free=list(free), node_cap=4), case["pending"],
                                    ordered, lambda p, v: level[v.id] > level[p.id], reason)
    assert plan_preemptions(Capacity(free, 4), case["pending"], ordered,
                            lambda p, v: level[v.id] > level[p.id], reason) == expected
    assert plan_preemptions(Capacity(free, 4), case["pending"], lambda: ordered,
                            lambda p, v: level[v.id] > level[p.id], reason) == expected
    assert plan_by_level(Capacity(free, 4), case["pending"], lambda p: level[p.id],
                         lambda: list(victims), lambda v: level[v.id], case["top"],
                         latest_first, reason) == expected


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from((0.0, 1.0, 1.0, 2.5, -0.0, math.nan, 7.0)),
                          st.sampled_from(("1", "2", "10", "9_1", "01", "a"))), max_size=12))
def test_sort_shortcuts(keys: list[tuple[float, str]]) -> None:
    jobs = [JobView(id=JobId(i), state=JobState.PENDING, submit_time=t, gpus=1)
            for t, i in keys]
    assert latest_first(list(jobs)) == sorted(jobs, key=submit_key, reverse=True)
    snapshot = ClusterSnapshot(time=0.0, jobs=tuple(jobs), nodes=())
    assert managed_pending(snapshot) == sorted(jobs, key=submit_key)
    ordered = ClusterSnapshot(time=0.0, jobs=tuple(sorted(jobs, key=submit_key)), nodes=())
    assert managed_pending(ordered) == sorted(jobs, key=submit_key)


def test_orders_are_plain_job_orders() -> None:
    j = JobView(id=JobId("7"), state=JobState.PENDING, submit_time=0.0, gpus=1)
    made = orders([(j, "a", None), (j, "b", 4)])
    assert made == (JobOrder(job_id=JobId("7"), rank=0, reason="a"),
                    JobOrder(job_id=JobId("7"), rank=1, gpus=4, reason="b"))
    assert hash(made[1]) == hash(JobOrder(job_id=JobId("7"), rank=1, gpus=4, reason="b"))


# --- tiresias over sequences of snapshots -------------------------------------------------------

ABSENT = None
STATES = (ABSENT, JobState.PENDING, JobState.PENDING, JobState.RUNNING, JobState.RUNNING,
          JobState.REQUEUED, JobState.COMPLETING, JobState.COMPLETED)


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, Any], list[ClusterSnapshot]]:
    options = {"thresholds": draw(st.sampled_from([(3600.0,), (100.0, 1000.0), (50.0,)])),
               "promote_knob": draw(st.sampled_from([0.0, 0.5, 1.0, 8.0]))}
    n = draw(st.integers(1, 7))
    submit = [draw(st.sampled_from((0.0, 5.0, 5.0, 9.0))) for _ in range(n)]
    now, snaps = 10_000.0, []
    attained = [0.0] * n
    for _ in range(draw(st.integers(1, 10))):
        now += draw(st.sampled_from((0.0, 1.0, 60.0, 700.0, 5000.0)))
        jobs = []
        for i in range(n):
            state = draw(st.sampled_from(STATES))
            if draw(st.booleans()):
                attained[i] = draw(st.sampled_from((0.0, 40.0, 200.0, 1500.0, 4000.0, 9000.0)))
            if state is ABSENT:
                continue
            g, nodes = draw(shapes)
            jobs.append(JobView(id=JobId(str(i + 1)), state=state, submit_time=submit[i],
                                gpus=g, nodes=nodes, attained_gpu_s=attained[i],
                                start_time=submit[i] if state.is_running else None,
                                managed=draw(st.sampled_from((True, True, True, False))),
                                held=draw(st.sampled_from((False, False, False, True)))))
        if draw(st.booleans()):
            draw(st.randoms()).shuffle(jobs)
        free = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
        node_views = tuple(NodeView(name=NodeName(f"n{k}"), state=NodeState.MIXED,
                                    gpus_total=4, gpus_alloc=4 - f) for k, f in enumerate(free))
        snaps.append(ClusterSnapshot(time=now, jobs=tuple(jobs), nodes=node_views))
        if draw(st.booleans()):
            snaps.append(snaps[-1])  # the same snapshot again: the fast path
    return options, snaps


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_tiresias_decides_as_before(history: tuple[dict[str, Any], list[ClusterSnapshot]]
                                    ) -> None:
    options, snaps = history
    old, new = ref.Tiresias(**options), make("tiresias", **options)
    for s in snaps:
        assert new.decide(s) == old.decide(s)


@pytest.mark.parametrize(("options", "count", "load"), [
    ({}, 400, 0.8),  # 50 promotions, 291 preemptions
    ({"promote_knob": 1.0}, 80, 1.0),  # thrashes: promoted, preempted, promoted, ...
    ({"thresholds": (600.0, 6000.0)}, 400, 1.0),
])
def test_tiresias_in_the_simulator_as_before(options: dict[str, Any], count: int,
                                             load: float) -> None:
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                   "itp-deadline").jobs, 0, count)
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4,
                          restart_rules=False)  # free: the preemptive path compared
    old = Simulator(jobs, ref.Tiresias(**options), config).run()
    new = Simulator(jobs, make("tiresias", **options), config).run()
    assert new.preemptions > 0
    assert (new.jobs, new.intervals, new.decisions, new.preemptions, new.notes) == (
        old.jobs, old.intervals, old.decisions, old.preemptions, old.notes)
