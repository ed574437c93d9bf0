"""Hypothesis properties of the engine, under every registered policy and under a chaotic fake
that reorders, resizes and preempts at random."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision, JobOrder, JobView, Preempt, Resize
from slurm_rl.policies.capabilities import Oracle
from slurm_rl.sim import backfill
from slurm_rl.sim.cluster import Cluster
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import SimResult, Simulator
from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.trace import TraceJob

MODELS = (None, "resnet50", "bert", "vgg16", "unknown-model")
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Chaos:
    """Test-only: random ranks and GPU counts, random requeues and resizes, seeded by the
    snapshot (so the same snapshot gives the same decision)."""

    name: str = "chaos"
    p_preempt: float = 0.15
    p_resize: float = 0.3

    def may_preempt(self, job: JobView) -> bool:  # capabilities.Preempting
        return True

    def may_resize(self, job: JobView) -> bool:  # capabilities.Resizing
        return True

    def decide(self, s: ClusterSnapshot) -> Decision:
        rng = random.Random(int(s.time * 1000) * 7919 + len(s.jobs))
        pending = list(s.pending)
        rng.shuffle(pending)
        order = tuple(JobOrder(job_id=j.id, rank=rng.randint(0, 3),
                               gpus=rng.choice([None, 1, 2, 3, 4, 8, 100]))
                      for j in pending if rng.random() < 0.8)
        pre = tuple(Preempt(job_id=j.id) for j in s.running if rng.random() < self.p_preempt)
        res = tuple(Resize(job_id=j.id, gpus=rng.randint(1, 9)) for j in s.running
                    if rng.random() < self.p_resize)
        return Decision(policy=self.name, order=order, preemptions=pre, resizes=res)


class ClockedSimulator(Simulator):
    """Checks that the snapshots a policy is given never go back in time (a subclass, not a
    wrapper around the policy, which would hide the capabilities it declares)."""

    last = float("-inf")

    def snapshot(self) -> ClusterSnapshot:
        s = super().snapshot()
        assert s.time >= self.last, f"clock went back: {self.last} -> {s.time}"
        self.last = s.time
        return s


@st.composite
def traces(draw: st.DrawFn, max_jobs: int = 14) -> list[TraceJob]:
    n = draw(st.integers(1, max_jobs))
    out = []
    for i in range(n):
        gpus = draw(st.sampled_from([1, 1, 1, 2, 3, 4, 8]))
        ranged = draw(st.booleans())
        steps = draw(st.one_of(st.none(), st.integers(1, 5000)))
        out.append(TraceJob(
            id=f"j{i}", submit=float(draw(st.integers(0, 300))),
            duration=float(draw(st.integers(0, 200))), gpus=gpus,
            time_limit_s=draw(st.one_of(st.none(), st.sampled_from([1.0, 50.0, 500.0]))),
            deadline=draw(st.one_of(st.none(), st.floats(0, 600))),
            total_steps=steps, model=draw(st.sampled_from(MODELS)) if steps else None,
            gpus_min=1 if ranged else None, gpus_max=draw(st.integers(1, 8)) if ranged else None,
            elastic=ranged and draw(st.booleans())))
    return out


def simulate(jobs: list[TraceJob], policy: object, nodes: int, per_node: int,
             **cfg: object) -> SimResult:
    config = EngineConfig(nodes=nodes, gpus_per_node=per_node, audit=True, tick_s=25,
                          restart_delay_s=7, **cfg)  # type: ignore[arg-type]
    return ClockedSimulator(jobs, policy, config).run()  # type: ignore[arg-type]


def check_invariants(jobs: list[TraceJob], r: SimResult, per_node: int) -> None:
    capacity = r.config.capacity
    def need(j: TraceJob) -> int:  # the smallest count a job may run at
        if j.gpus_min is not None:
            return j.gpus_min
        return min(j.gpus, j.gpus_max) if j.gpus_max is not None else j.gpus

    kept = [j for j in jobs if need(j) <= capacity]
    assert r.dropped == len(jobs) - len(kept)
    # Every submitted job ran and ended once, or (a Dropping policy's) was dropped, never run.
    declined = {d.job_id: d for d in r.declined_dropped}
    assert len(declined) == len(r.declined_dropped)
    assert len(r.jobs) + len(declined) == len(kept)
    assert [x.job_id for x in r.jobs] == [j.id for j in sorted(kept, key=lambda j: j.submit)
                                          if j.id not in declined]
    runs = defaultdict(list)
    for iv in r.intervals:
        assert iv.end >= iv.start
        assert iv.job_id not in declined, "a dropped job never runs"
        runs[iv.job_id].append(iv)
    for d in r.declined_dropped:
        assert d.at >= d.submit
    for rec in r.jobs:  # starts after submission, ends once, runs never overlap
        assert rec.submit <= rec.start <= rec.end
        ivs = runs[rec.job_id]
        assert ivs[0].start == rec.start and ivs[-1].end == rec.end
        assert all(a.end <= b.start for a, b in zip(ivs, ivs[1:], strict=False))
        assert len(ivs) == rec.restarts + 1
        if rec.restarts == 0 and rec.gpus == rec.trace_gpus:
            launch = r.config.launch_delay_s
            assert rec.end - rec.start == pytest.approx(rec.trace_duration + launch)
    # GPUs in use never exceed any node's capacity (sweep over the intervals).
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for iv in r.intervals:
        if iv.end == iv.start:
            continue  # holds nothing for any time
        assert sum(iv.node_gpus) == iv.gpus
        for node, g in zip(iv.nodes, iv.node_gpus, strict=True):
            events[node] += [(iv.start, g), (iv.end, -g)]
    for node, evs in events.items():
        used = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # frees before takes
            used += delta
            assert 0 <= used <= per_node, f"{node}: {used} GPUs in use"


@SETTINGS
@given(traces(), st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_invariants_under_chaos(jobs: list[TraceJob], nodes: int, per_node: int) -> None:
    r = simulate(jobs, Chaos(), nodes, per_node)
    check_invariants(jobs, r, per_node)


@pytest.mark.parametrize("name", policies.names())
@SETTINGS
@given(traces(), st.integers(1, 3), st.sampled_from([2, 4]))
def test_invariants_under_each_policy(name: str, jobs: list[TraceJob], nodes: int,
                                      per_node: int) -> None:
    r = simulate(jobs, policies.make(name), nodes, per_node)
    check_invariants(jobs, r, per_node)


SLURM_LIKE = st.fixed_dictionaries({
    "placement": st.sampled_from(["best-fit", "cons_tres"]),
    "conservative": st.booleans(),
    "bf_interval_s": st.sampled_from([0.0, 1.0, 7.0]),
    "bf_phase_s": st.floats(0, 1),
    "launch_delay_s": st.sampled_from([0.0, 0.03, 2.0]),
    "decide_on_events": st.booleans(),
    "tick_phase_s": st.sampled_from([None, 0.4]),
    "decision_delay_s": st.sampled_from([0.0, 0.05, 3.0]),
})


@pytest.mark.parametrize("name", ["chaos", "fifo", "deadline", "tiresias"])
@SETTINGS
@given(traces(), st.integers(1, 3), st.sampled_from([2, 4]), SLURM_LIKE)
def test_invariants_in_the_slurm_like_modes(name: str, jobs: list[TraceJob], nodes: int,
                                           per_node: int, cfg: dict[str, object]) -> None:
    """cons_tres placement, conservative backfill, scheduler cycles, launch and decision
    delays (what the sim-to-real check turns on) keep every invariant."""
    if cfg["bf_interval_s"]:
        cfg = {**cfg, "sched_interval_s": 1.0, "sched_phase_s": 0.25}
    policy = Chaos() if name == "chaos" else policies.make(name)
    r = simulate(jobs, policy, nodes, per_node, **cfg)
    check_invariants(jobs, r, per_node)


RESTART_STEPS = st.fixed_dictionaries({
    "restart_grace_s": st.sampled_from([0.0, 0.5, 5.0, 60.0]),
    "requeue_s": st.sampled_from([0.0, 1.0, 13.0]),
})


@pytest.mark.parametrize("name", ["chaos", "tiresias", "gittins", "rl"])
@SETTINGS
@given(traces(), st.integers(1, 3), st.sampled_from([2, 4]), RESTART_STEPS, st.booleans())
def test_invariants_with_restarts_in_steps(name: str, jobs: list[TraceJob], nodes: int,
                                           per_node: int, steps: dict[str, float],
                                           slurm_like: bool) -> None:
    """Restarts through the grace and requeue steps (a job holding its GPUs, then out of the
    queue) keep every invariant, with or without slurmctld's cadence and a decision delay."""
    cfg: dict[str, object] = dict(steps)
    if slurm_like:
        cfg |= {"bf_interval_s": 1.0, "sched_interval_s": 1.0, "decision_delay_s": 3.0,
                "restart_rules": True}
    policy = Chaos() if name == "chaos" else policies.make(name)
    r = simulate(jobs, policy, nodes, per_node, **cfg)
    check_invariants(jobs, r, per_node)


@SETTINGS
@given(traces(), st.integers(0, 3))
def test_same_seed_same_result(jobs: list[TraceJob], seed: int) -> None:
    runs = [simulate(jobs, Chaos(), 2, 4, seed=seed, elastic_fraction=0.5) for _ in range(2)]
    assert runs[0].jobs == runs[1].jobs and runs[0].intervals == runs[1].intervals
    assert runs[0].notes == runs[1].notes


@pytest.mark.parametrize("name", [*policies.names(), "chaos-without-preemption"])
@SETTINGS
@given(traces(max_jobs=8))
def test_without_contention_jct_is_the_duration(name: str, jobs: list[TraceJob]) -> None:
    # One 8-GPU node per job: nothing ever waits, so no policy has a reason to act.
    jobs = [TraceJob(id=j.id, submit=j.submit, duration=j.duration, gpus=j.gpus,
                     deadline=j.deadline, total_steps=j.total_steps, model=j.model)
            for j in jobs]
    policy = Chaos(p_preempt=0, p_resize=0) if name.startswith("chaos") else policies.make(name)
    r = simulate(jobs, policy, nodes=len(jobs), per_node=8)
    for rec in r.jobs:
        assert rec.start == rec.submit
        assert rec.end - rec.submit == pytest.approx(rec.trace_duration)


@SETTINGS
@given(traces(), st.integers(1, 3))
def test_skipping_futile_calls_changes_nothing(jobs: list[TraceJob], nodes: int) -> None:
    # Order-only policies (no capability declared) are skipped when nothing could change.
    for name in ("fifo", "edf", "sjf-oracle", "deadline"):
        a = simulate(jobs, policies.make(name), nodes, 4)
        b = simulate(jobs, policies.make(name), nodes, 4, skip_futile=False)
        assert a.jobs == b.jobs and a.intervals == b.intervals
        assert a.decisions <= b.decisions


@SETTINGS
@given(traces(), st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_backfill_never_delays_the_reserved_job(jobs: list[TraceJob], nodes: int,
                                                per_node: int) -> None:
    """fifo, limits = run times (so plans come true): the top blocked job starts no later than
    the reservation made when it first blocked. (And `available` is min(free, spare).)"""
    jobs = [TraceJob(id=j.id, submit=j.submit, duration=j.duration, gpus=j.gpus) for j in jobs]
    promised: dict[str, float] = {}
    real = backfill.reservation

    def spy(now: float, top: SimJob, cluster: Cluster, ends: backfill.Ends
            ) -> tuple[float, list[int], tuple[int, ...]]:
        shadow, spare, reserved = real(now, top, cluster, ends)
        # backfill's shortcut for what the reservation leaves per node
        assert backfill.available(cluster.free, spare, reserved) == list(
            map(min, cluster.free, spare))
        promised.setdefault(top.trace.id, shadow)
        return shadow, spare, reserved

    with patch.object(backfill, "reservation", spy):
        r = simulate(jobs, policies.make("fifo"), nodes, per_node,
                     time_limit=TimeLimitEstimate(factor=1, round_up_s=0, min_s=0))
    starts = {rec.job_id: rec.start for rec in r.jobs}
    for job_id, shadow in promised.items():
        assert starts[job_id] <= shadow


@SETTINGS
@given(traces(), st.integers(1, 2))
def test_oracle_remaining_is_the_true_remaining_time(jobs: list[TraceJob], nodes: int) -> None:
    seen: list[tuple[ClusterSnapshot, dict[str, float | None]]] = []
    fifo = policies.make("fifo")

    class Spy:  # an OracleReading policy that orders as fifo
        name = "spy"
        oracle: Oracle | None = None

        def bind_oracle(self, oracle: Oracle | None) -> None:
            self.oracle = oracle

        def decide(self, s: ClusterSnapshot) -> Decision:
            assert self.oracle is not None
            seen.append((s, {j.id: self.oracle.remaining_s(j.id) for j in s.running}))
            return fifo.decide(s)

    r = simulate(jobs, Spy(), nodes, 4)
    end = {rec.job_id: rec.end for rec in r.jobs}
    for s, truth in seen:
        for j in s.running:  # fifo never stops a job: it ends when the oracle says
            left = truth[j.id]
            assert left is not None
            assert s.time + left == pytest.approx(end[j.name])
            assert j.attained_gpu_s == pytest.approx(j.gpus * (s.time - (j.start_time or 0)))
