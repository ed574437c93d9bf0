"""`elasticflow`'s speed work, each part against what it replaced: the simulator's gate
(`futile`, capabilities.Gated) against asking the policy at every event, the rigid fast path of
the plan (`plan_rigid`) against the general loop, a plan reused from the last call against one
made afresh, and `Profile.of_holds` (and elasticflow.base.of_ends) against one hold taken at a
time."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_builders import itp_jobs

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies import elasticflow, make
from slurm_rl.policies.capabilities import Gated, Observing, Preempting, Resizing, Stateful
from slurm_rl.policies.elasticflow import plan as elasticflow_plan
from slurm_rl.policies.elasticflow.base import of_ends
from slurm_rl.policies.elasticflow.plan import Profile, plan_job, plan_rigid
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator


@dataclass
class AskedAtEveryEvent:
    """Test-only: `elasticflow` declared `Observing` and not `Gated`, so the simulator asks its
    `decide` at every event, as before the gate."""

    inner: elasticflow.ElasticFlow = field(default_factory=elasticflow.new)
    name: str = "elasticflow"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return self.inner.decide(snapshot)

    def may_resize(self, job: JobView) -> bool:
        return self.inner.may_resize(job)

    def may_preempt(self, job: JobView) -> bool:
        return self.inner.may_preempt(job)

    def reset(self) -> None:
        self.inner.reset()

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """Nothing: decide judges admission itself."""


def test_declares_the_gate_not_observing() -> None:
    policy = make("elasticflow")
    assert all(isinstance(policy, c) for c in (Gated, Preempting, Resizing, Stateful))
    assert not isinstance(policy, Observing)
    plain = AskedAtEveryEvent()
    assert isinstance(plain, Observing) and not isinstance(plain, Gated)


@pytest.mark.parametrize(("count", "load", "elastic"),
                         [(300, 0.8, False), (300, 1.1, False), (200, 1.1, True)])
def test_the_gate_changes_no_result(count: int, load: float, elastic: bool) -> None:
    """The same jobs (starts, ends, GPUs, restarts), resizes, preemptions and declines with
    the gate as when `decide` is asked at every event; the gate skips calls."""
    jobs = itp_jobs(count, elastic)
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4,
                          tick_s=60.0, audit=True)
    gated = make("elasticflow")
    assert isinstance(gated, elasticflow.ElasticFlow)
    plain = AskedAtEveryEvent()
    a = Simulator(jobs, gated, config).run()
    b = Simulator(jobs, plain, config).run()
    assert a.jobs == b.jobs
    assert (a.resizes, a.preemptions, a.dropped) == (b.resizes, b.preemptions, b.dropped)
    assert gated.declined_jobs == plain.inner.declined_jobs > 0
    assert a.decisions < b.decisions


def _profile(now: float, total: int, holds: list[tuple[float, int]]) -> Profile:
    p = Profile(now, total)
    for end, g in holds:
        p.take(now, end, g)
    return p


HOLDS = st.lists(st.tuples(st.sampled_from((-5.0, 0.0, 3.0, 10.0, 10.0, 17.5, 50.0, 1e4,
                                            math.inf)), st.integers(0, 5)), max_size=10)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 16), HOLDS)
def test_of_holds_is_one_take_at_a_time(total: int, holds: list[tuple[float, int]]) -> None:
    now = 0.0
    fast = Profile.of_holds(now, total, holds)
    slow = _profile(now, total, holds)
    assert (fast.times, fast.free) == (slow.times, slow.free)


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 16), HOLDS,
       st.lists(st.tuples(st.sampled_from((0.0, 2.0, 5.0, 12.0)), st.sampled_from(
           (1.0, 8.0, 30.0, math.inf)), st.integers(0, 6)), max_size=4),
       st.integers(1, 8), st.sampled_from((0.5, 7.0, 30.0, 333.3, 1e5)),
       st.sampled_from((-1.0, 0.0, 4.0, 10.0, 45.0, 1e3, 1e6)),
       st.sampled_from((1.0, 1.25)))
def test_the_rigid_fast_plan_is_the_general_loop(
        total: int, holds: list[tuple[float, int]], plans: list[tuple[float, float, int]],
        g: int, rem: float, deadline: float, work: float) -> None:
    """`plan_rigid` (a job of one count) gives the very plan of `plan_job`'s general loop, on
    profiles with steps taken later than now too (as the admitted jobs' plans take them)."""
    now = 0.0
    prof = Profile.of_holds(now, total, holds)
    for a, length, n in plans:
        prof.take(a, a + length, n)
    args = (prof, now, deadline, lambda c: rem, [g])
    slow = plan_job(*args, work=work, fast=False)
    window = elasticflow_plan._WINDOW
    try:
        for w in (1, 2, window):  # the windows it reads the profile in, small ones too
            elasticflow_plan._WINDOW = w
            assert plan_job(*args, work=work) == slow
    finally:
        elasticflow_plan._WINDOW = window


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 16), HOLDS, st.integers(0, 3), st.randoms(use_true_random=False))
def test_of_ends_is_of_holds(total: int, holds: list[tuple[float, int]], forever: int,
                             rnd: random.Random) -> None:
    """The base profile from ends and GPUs, sorted afresh or in an order kept from before
    (one that still sorts them, one that no longer does, one of other ends), is
    `Profile.of_holds`'."""
    now = 0.0
    ends, gpus = [e for e, _ in holds], tuple(g for _, g in holds)
    want = Profile.of_holds(now, total, [*holds, (math.inf, forever)])
    kept = sorted(range(len(ends)), key=ends.__getitem__)
    stale = list(range(len(ends)))
    rnd.shuffle(stale)
    for order in ([], kept, stale, [*kept, len(kept)]):  # (the last: of more ends)
        got = of_ends(now, total, ends, gpus, forever, list(order))
        assert got is not None
        assert (got[0].times, got[0].free) == (want.times, want.free)
        assert sorted(got[1]) == list(range(len(ends)))
    if holds:  # a NaN end: left to of_holds
        assert of_ends(now, total, [math.nan, *ends], (1, *gpus), forever, []) is None


STEPS = st.lists(st.tuples(st.sampled_from((0.0, 2.0, 5.0, 12.0, 40.0)), st.sampled_from(
    (1.0, 8.0, 30.0, math.inf)), st.integers(-2, 6)), max_size=5)


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 16), HOLDS, STEPS, STEPS, st.integers(1, 8),
       st.sampled_from((0.5, 7.0, 30.0, 333.3)), st.sampled_from((0.5, 4.0, 45.0, 1e3)),
       st.sampled_from((0.0, 1.0, 3.0)))
def test_a_reused_rigid_plan_is_the_plan_made_afresh(
        total: int, holds: list[tuple[float, int]], first: list[tuple[float, float, int]],
        then: list[tuple[float, float, int]], g: int, rem: float, deadline: float,
        later: float) -> None:
    """A plan made on one profile, then asked again on another (the same but for the steps
    taken, and from a later now): `plan_rigid` with the first call's `Reuse` gives exactly the
    plan it makes without it, whether it reuses the plan or not."""
    def profile(now: float, steps: list[tuple[float, float, int]]) -> Profile:
        prof = Profile.of_holds(now, total, holds)
        for a, length, n in steps:
            prof.take(a, a + length, n)
        return prof

    _, reuse = plan_rigid(profile(0.0, first), 0.0, deadline, 1.0 / rem, g)
    for steps in (first, then):
        prof = profile(later, steps)
        fresh, again = plan_rigid(prof, later, deadline, 1.0 / rem, g)
        kept, _ = plan_rigid(prof, later, deadline, 1.0 / rem, g, last=reuse)
        assert kept == fresh
        assert kept == plan_job(prof, later, deadline, lambda c: rem, [g], fast=False)
        if reuse is not None and again is not None:  # (the same values read: reused)
            assert (kept is reuse.plan) == (again.times == reuse.times
                                             and again.free == reuse.free)
