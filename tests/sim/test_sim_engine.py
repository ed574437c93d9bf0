"""The engine with test-only policies (fakes): how Decisions map onto the simulated cluster."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pytest
from sim_helpers import FREE, ONE_STEP, FakePolicy, OrderOnlyFakePolicy, by_id, job, run

from slurm_rl import perfmodel
from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobOrder,
    JobState,
    JobView,
    Preempt,
    Resize,
)
from slurm_rl.policies import make
from slurm_rl.policies.capabilities import Oracle
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate, from_table
from slurm_rl.sim.engine import SimulationError, Simulator


def ids(snapshot: ClusterSnapshot, state: JobState) -> dict[str, JobView]:
    """trace id -> view, for jobs in `state`."""
    return {j.name: j for j in snapshot.jobs if j.state is state}


def test_no_contention_jct_is_duration() -> None:
    jobs = [job("a", 0, 50, 2), job("b", 10, 20, 1), job("c", 10, 0, 1), job("d", 11, 7, 4)]
    r = run(jobs, FakePolicy(), nodes=2, gpus_per_node=4)
    assert {j.job_id: j.end - j.submit for j in r.jobs} == {"a": 50, "b": 20, "c": 0, "d": 7}
    assert all(j.start == j.submit for j in r.jobs)


def test_preemption_keeps_progress_and_pays_the_restart_delay() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        pend, running = ids(s, JobState.PENDING), ids(s, JobState.RUNNING)
        if "b" in pend and "a" in running:
            return Decision(policy="p", preemptions=(Preempt(job_id=running["a"].id),),
                            order=(JobOrder(job_id=pend["b"].id, rank=0),))
        return Decision(policy="p")

    r = run([job("a", 0, 100), job("b", 40, 10)], FakePolicy(fn), nodes=1, gpus_per_node=1,
            restart_delay_s=30, **ONE_STEP, **FREE)
    assert by_id(r) == {"a": (0, 140), "b": (40, 50)}  # 40 done, 50 + 30 + 60 = 140
    assert [j.restarts for j in r.jobs] == [1, 0]
    assert [(i.job_id, i.start, i.end) for i in r.intervals] == [
        ("a", 0, 40), ("b", 40, 50), ("a", 50, 140)]
    assert r.preemptions == 1


def test_resize_follows_the_throughput_curve() -> None:
    elastic = job("a", 0, 1000, 2, total_steps=1000, model="resnet50", gpus_min=1, gpus_max=4,
                  elastic=True)

    def fn(s: ClusterSnapshot) -> Decision:
        running = ids(s, JobState.RUNNING)
        if s.time == 100 and "a" in running:
            return Decision(policy="p", resizes=(Resize(job_id=running["a"].id, gpus=4),))
        return Decision(policy="p")

    r = run([elastic, job("tick", 100, 1)], FakePolicy(fn), nodes=2, gpus_per_node=4,
            restart_delay_s=30, **ONE_STEP)
    rate4 = perfmodel.scaled_rate(1.0, 2, 4, "resnet50", None)
    a = r.jobs[0]
    assert a.end == pytest.approx(100 + 30 + 900 / rate4)
    assert (a.gpus, a.restarts, r.resizes) == (4, 1, 1)
    assert [(i.gpus, i.start) for i in r.intervals if i.job_id == "a"] == [(2, 0), (4, 100)]


def test_resizes_that_cannot_apply_are_noted() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        running = ids(s, JobState.RUNNING)
        if s.time == 5:
            return Decision(policy="p", resizes=(
                Resize(job_id=running["rigid"].id, gpus=2),  # not elastic
                Resize(job_id=running["el"].id, gpus=8),  # clamped to 4, does not fit
                Resize(job_id=JobId("999"), gpus=1)))  # unknown
        return Decision(policy="p")

    jobs = [job("rigid", 0, 100, 2), job("el", 0, 100, 1, gpus_min=1, gpus_max=4, elastic=True),
            job("x", 5, 1, 1)]
    r = run(jobs, FakePolicy(fn), nodes=1, gpus_per_node=4)
    assert r.notes == {"resize of a job that is not elastic": 1, "resize does not fit": 1,
                       "resize clamped to the job's GPU range": 1,
                       "resize of a job not running": 1}
    assert r.resizes == 0 and by_id(r)["el"] == (0, 100)


def test_mentioned_jobs_first_then_the_rest_in_submit_order() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        pend = ids(s, JobState.PENDING)
        order = (JobOrder(job_id=pend["d"].id, rank=5),) if "d" in pend else ()
        return Decision(policy="p", order=order)

    jobs = [job("a", 0, 10), job("b", 1, 10), job("c", 2, 10), job("d", 3, 10)]
    got = by_id(run(jobs, FakePolicy(fn), nodes=1, gpus_per_node=1))
    assert [k for k, _ in sorted(got.items(), key=lambda kv: kv[1])] == ["a", "d", "b", "c"]


def test_gpu_count_for_pending_jobs() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        return Decision(policy="p", order=tuple(
            JobOrder(job_id=j.id, rank=0, gpus=8) for j in s.pending))

    jobs = [job("ranged", 0, 100, 1, total_steps=100, model="bert", gpus_min=1, gpus_max=2),
            job("rigid", 0, 100, 1)]
    r = run(jobs, FakePolicy(fn), nodes=1, gpus_per_node=4)
    ranged, rigid = r.jobs
    assert (ranged.gpus, rigid.gpus) == (2, 1)
    assert ranged.end == pytest.approx(100 / perfmodel.scaled_rate(1.0, 1, 2, "bert"))
    assert rigid.end == 100
    assert r.notes == {"GPU count clamped to the job's GPU range": 1,
                       "GPU count for a job without a GPU range": 1}


def test_invalid_orders_and_preemptions_are_noted() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        running = [j.id for j in s.running]
        return Decision(policy="p", order=tuple(JobOrder(job_id=i, rank=0) for i in running),
                        preemptions=(Preempt(job_id=JobId("nope")),))

    r = run([job("a", 0, 10), job("b", 5, 1)], FakePolicy(fn), nodes=1, gpus_per_node=2)
    # Decisions at 0, 5 and 6 (a runs during the last two); at 10 nothing is pending and
    # nothing running that could be resized: futile, skipped.
    assert r.notes == {"preempt of a job not running": 3, "order for a job not pending": 2}
    assert any("nope" in s for s in r.note_samples)


@dataclass
class OracleFakePolicy(FakePolicy):
    """FakePolicy that reads the engine's oracle (OracleReading) at every call: `truth[time]`
    maps trace job names to true remaining seconds."""

    oracle: Oracle | None = None
    truth: dict[float, dict[str, float | None]] = field(default_factory=dict)

    def bind_oracle(self, oracle: Oracle | None) -> None:
        self.oracle = oracle

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        assert self.oracle is not None
        self.truth[snapshot.time] = {j.name: self.oracle.remaining_s(j.id) for j in snapshot.jobs}
        return super().decide(snapshot)


def test_snapshot_views() -> None:
    seen: list[ClusterSnapshot] = []

    def fn(s: ClusterSnapshot) -> Decision:
        seen.append(s)
        running = ids(s, JobState.RUNNING)
        if s.time == 50:  # requeue a, b first; a restarts when b ends
            return Decision(policy="p", preemptions=(Preempt(job_id=running["a"].id),),
                            order=(JobOrder(job_id=ids(s, JobState.PENDING)["b"].id, rank=0),))
        return Decision(policy="p")

    jobs = [job("a", 0, 100, 2, total_steps=1000, deadline=500.0), job("b", 50, 10, 4),
            job("c", 55, 10, 4)]
    policy = OracleFakePolicy(fn)
    r = run(jobs, policy, nodes=1, gpus_per_node=4, restart_delay_s=20, tick_s=0, **ONE_STEP,
            **FREE)
    at = {s.time: s for s in seen}
    a = ids(at[50], JobState.RUNNING)["a"]
    assert a.attained_gpu_s == 100.0 and a.start_time == 0 and a.gpus == 2
    assert policy.truth[50]["a"] == 50.0 and a.predicted_remaining_s == 50.0
    assert a.progress is not None and (a.progress.steps_done, a.progress.rate) == (500, 10.0)
    assert a.intent is not None and a.intent.deadline == 500.0
    assert isinstance(a, JobView) and a == JobView(**{
        f.name: getattr(a, f.name) for f in dataclasses.fields(JobView)})
    assert dataclasses.replace(a, gpus=3).gpus == 3
    assert [n.gpus_alloc for n in at[50].nodes] == [2]
    # At 55 a waits, requeued with its progress; b runs; c is pending (fresh).
    snap = at[55]
    assert {j.name for j in snap.jobs} == {"a", "b", "c"}  # only active jobs
    pa = ids(snap, JobState.PENDING)["a"]
    assert pa.restarts == 1 and pa.progress is not None and pa.progress.steps_done == 500
    assert policy.truth[55]["a"] == 50.0 and pa.attained_gpu_s == 100.0
    assert ids(snap, JobState.PENDING)["c"].progress is None
    b = ids(snap, JobState.RUNNING)["b"]
    assert b.progress is None and b.predicted_remaining_s is None
    assert policy.truth[55]["b"] == 5.0
    assert by_id(r)["a"] == (0, 60 + 20 + 50)  # b ends 60, a restarts first (submit order)


def test_ticks_while_jobs_wait() -> None:
    jobs = [job("a", 0, 200, 1), job("b", 10, 10, 1)]
    p = FakePolicy()
    run(jobs, p, nodes=1, gpus_per_node=1, tick_s=60)
    # (not at 210: nothing is left pending or running to decide about)
    assert [s.time for s in p.seen] == [0, 10, 70, 130, 190, 200]
    p = FakePolicy()
    run(jobs, p, nodes=1, gpus_per_node=1, tick_s=0)
    assert [s.time for s in p.seen] == [0, 10, 200]
    p = FakePolicy()
    run(jobs[:1], p, nodes=1, gpus_per_node=1, tick_s=60)
    assert [s.time for s in p.seen] == [0]  # nothing waits: no ticks
    p = FakePolicy()
    run(jobs[:1], p, nodes=1, gpus_per_node=1, tick_s=60, idle_ticks=True)
    assert [s.time for s in p.seen] == [0, 60, 120, 180]  # a may be resized while it runs
    p = FakePolicy()
    run(jobs, p, nodes=1, gpus_per_node=1, tick_s=60, decide_on_events=False)
    assert [s.time for s in p.seen] == [60, 120, 180]  # first tick 60 s after the arrival


def test_declared_order_only_policy_is_asked_only_when_it_matters() -> None:
    jobs = [job("a", 0, 100, 1), job("b", 10, 10, 1), job("c", 20, 5, 1), job("d", 300, 1, 1)]
    plain = FakePolicy()
    declared = OrderOnlyFakePolicy()
    r1 = run(jobs, plain, nodes=1, gpus_per_node=1, tick_s=0)
    r2 = run(jobs, declared, nodes=1, gpus_per_node=1, tick_s=0)
    assert r1.jobs == r2.jobs and r1.intervals == r2.intervals
    # at 115 and 301 the last job ends: nothing pending or running, not asked
    assert [s.time for s in plain.seen] == [0, 10, 20, 100, 110, 300]
    assert [s.time for s in declared.seen] == [100]  # b and c wait, one GPU frees


def test_jobs_larger_than_the_cluster_are_dropped() -> None:
    r = run([job("big", 0, 10, 9), job("ok", 0, 10, 8)], FakePolicy(), nodes=2, gpus_per_node=4)
    assert r.dropped == 1 and [j.job_id for j in r.jobs] == ["ok"]


def test_events_in_the_past_raise() -> None:
    sim = Simulator([job("a", 0, 1)], FakePolicy(), EngineConfig(nodes=1, gpus_per_node=1))
    sim.now = 10.0
    with pytest.raises(SimulationError, match="in the past"):
        sim._events.push(sim.now, 9.0, 0)
    with pytest.raises(SimulationError, match="in the past"):
        sim._events.push(sim.now, math.nan, 0)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        EngineConfig(nodes=0, gpus_per_node=4)
    with pytest.raises(ValueError):
        EngineConfig(nodes=1, gpus_per_node=4, restart_delay_s=-1)
    with pytest.raises(ValueError, match=r"unknown key\(s\) tick \(valid: .*tick_s"):
        from_table(EngineConfig, {"nodes": 1, "gpus_per_node": 1, "tick": 5})
    cfg = from_table(EngineConfig, {"nodes": 1, "gpus_per_node": 1,
                                    "time_limit": {"fixed_s": 300}})
    assert cfg.time_limit.for_duration(5000) == 300


def test_time_limit_estimate() -> None:
    est = TimeLimitEstimate()
    assert [est.for_duration(d) for d in (0, 60, 1800, 1801, 8 * 3600)] == [
        60, 3600, 3600, 7200, 16 * 3600]
    assert TimeLimitEstimate(factor=1, round_up_s=0, min_s=0).for_duration(123.5) == 123.5


def test_a_job_started_as_a_pending_job_keeps_its_trace_time_limit() -> None:
    p = FakePolicy()
    run([job("a", 0, 10, 1, time_limit_s=42)], p, nodes=1, gpus_per_node=1)
    assert p.seen[0].jobs[0].time_limit_s == 42


def test_snapshots_behave_like_plain_ones() -> None:
    p = FakePolicy()
    run([job("a", 0, 10, 1, total_steps=10), job("b", 1, 5, 1)], p, nodes=1, gpus_per_node=1)
    snap = p.seen[1]  # a runs, b waits
    assert isinstance(snap, ClusterSnapshot)
    assert snap.pending == tuple(j for j in snap.jobs if j.state.is_pending)
    assert snap.running == tuple(j for j in snap.jobs if j.state.is_running)
    plain_jobs = tuple(JobView(**{f.name: getattr(j, f.name) for f in dataclasses.fields(JobView)})
                       for j in snap.jobs)
    plain = ClusterSnapshot(time=snap.time, jobs=plain_jobs, nodes=snap.nodes)
    assert snap == plain and plain == snap
    assert (snap.gpus_total, snap.gpus_free) == (1, 0)


# --- the daemon's timing: a fixed cycle grid and a poll-to-act delay ---------------------------

def test_ticks_on_a_fixed_grid() -> None:
    policy = FakePolicy()
    run([job("a", 0.2, 5, 4), job("b", 0.4, 5, 4), job("c", 7.9, 2, 4)], policy, nodes=1,
        tick_s=1.0, decide_on_events=False, tick_phase_s=0.3)
    times = [s.time for s in policy.seen]
    assert times and all(abs(t % 1.0 - 0.3) < 1e-9 for t in times), times


def test_ticks_at_explicit_instants_then_on_the_grid() -> None:
    # The daemon's cycles as its log shows them: the phase moves from 0.3 to 0.7 at 2.7 (a
    # cycle overran), and the grid of tick_phase_s takes over after the last instant.
    policy = FakePolicy()
    run([job("a", 0.2, 6, 4), job("b", 0.2, 6, 4)], policy, nodes=1, tick_s=1.0,
        decide_on_events=False, tick_phase_s=0.7, tick_times_s=(0.3, 1.3, 2.7, 3.7))
    times = [round(s.time, 6) for s in policy.seen]
    assert times[:5] == [0.3, 1.3, 2.7, 3.7, 4.7], times


@pytest.mark.parametrize("bad", [{"tick_times_s": (2.0, 1.0)},
                                 {"tick_times_s": (1.0,), "tick_s": 0.0}])
def test_tick_instants_ascend_and_need_a_tick(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="tick_times_s"):
        EngineConfig(nodes=1, gpus_per_node=1, **bad)  # type: ignore[arg-type]


def test_decision_applied_after_the_delay() -> None:
    """X holds the only GPU until t=10; A and B wait. The policy ranks B first from t=9.4 on.
    Decided at the 9.5 tick, that reaches Slurm at 10.3 with a 0.8 s delay: A (submit order)
    has started at 10. Without the delay B starts at 10."""
    def b_first(snap: ClusterSnapshot) -> Decision:
        if snap.time < 9.4:
            return Decision(policy="fake")
        last = max(snap.pending, key=lambda j: j.submit_time)  # B (the simulator's own ids)
        return Decision(policy="fake", order=tuple(
            JobOrder(job_id=j.id, rank=0 if j is last else 1) for j in snap.pending))
    jobs = [job("X", 0, 10, 1), job("A", 1, 5, 1), job("B", 2, 5, 1)]
    cfg = dict(nodes=1, gpus_per_node=1, tick_s=1.0, decide_on_events=False, tick_phase_s=0.5)
    late = by_id(run(jobs, FakePolicy(b_first), decision_delay_s=0.8, **cfg))
    assert late["A"] == (10, 15) and late["B"] == (15, 20)
    now = by_id(run(jobs, FakePolicy(b_first), **cfg))
    assert now["B"] == (10, 15) and now["A"] == (15, 20)
    # Each listed tick its own delay: the 9.5 tick's decision lands at 9.9, before X ends, so
    # B starts at 10 although the other ticks' (and the default) delay is 0.8 s.
    ticks = tuple(0.5 + k for k in range(12))
    own = by_id(run(jobs, FakePolicy(b_first), decision_delay_s=0.8, tick_times_s=ticks,
                    decision_delays_s=tuple(0.4 if t == 9.5 else 0.8 for t in ticks), **cfg))
    assert own["B"] == (10, 15) and own["A"] == (15, 20)


def test_per_tick_delays_match_the_ticks() -> None:
    with pytest.raises(ValueError, match="2 delays for 1 tick_times_s"):
        EngineConfig(nodes=1, gpus_per_node=1, tick_s=1.0, tick_times_s=(1.0,),
                     decision_delays_s=(0.1, 0.2))
    with pytest.raises(ValueError, match="decision_delays_s must be >= 0"):
        EngineConfig(nodes=1, gpus_per_node=1, tick_s=1.0, tick_times_s=(1.0,),
                     decision_delays_s=(-0.1,))


# --- slurmctld's cadence: main scheduler and backfill on their own cycles ----------------------

def test_new_jobs_wait_for_a_cycle_and_launch_delay_is_paid() -> None:
    """Nothing starts at submission: B, alone on an idle cluster, waits for the backfill cycle
    at 20.5; A waits for X's GPU until the cycle after X ends. Each start pays the launch
    delay before the job's work begins."""
    jobs = [job("X", 0, 10, 1), job("A", 1, 5, 1), job("B", 20.2, 2, 1)]
    got = by_id(run(jobs, FakePolicy(), nodes=1, gpus_per_node=1, bf_interval_s=1.0,
                    bf_phase_s=0.5, sched_interval_s=1.0, sched_phase_s=0.8,
                    launch_delay_s=0.25))
    assert got["X"] == (0.5, 10.75)
    assert got["A"] == (10.8, 16.05)  # main cycle at 10.8 (X ends at 10.75)
    assert got["B"] == (20.5, 22.75)


def test_main_cycle_stops_at_the_first_blocked_job_backfill_does_not() -> None:
    """Y holds 2 of 4 GPUs until 100, X the other 2 until 10. P (4 GPUs) must wait for Y;
    Q (1 GPU, 3 s) fits when X ends. The main cycle at 10.1 stops at P; the backfill cycle
    at 10.6 starts Q, which ends long before P's reservation."""
    jobs = [job("Y", 0, 100, 2, time_limit_s=100), job("X", 0, 10, 2, time_limit_s=10),
            job("P", 1, 5, 4, time_limit_s=5), job("Q", 2, 3, 1, time_limit_s=3)]
    got = by_id(run(jobs, make("fifo"), nodes=1, gpus_per_node=4, conservative=True,
                    bf_interval_s=1.0, bf_phase_s=0.6, sched_interval_s=1.0, sched_phase_s=0.1))
    assert got["Q"] == (10.6, 13.6)
    assert got["P"][0] == 100.1  # the first main cycle after Y ends


def test_cadence_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="sched_interval_s needs bf_interval_s"):
        EngineConfig(nodes=1, gpus_per_node=1, sched_interval_s=1.0)
    with pytest.raises(ValueError, match="launch_delay_s"):
        EngineConfig(nodes=1, gpus_per_node=1, launch_delay_s=-1)
    with pytest.raises(ValueError, match="placement"):
        EngineConfig(nodes=1, gpus_per_node=1, placement="first-fit")


def test_undeclared_preemptions_stop_the_run() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        return Decision(policy="p", preemptions=(Preempt(job_id=JobId("1")),))

    with pytest.raises(SimulationError, match="without declaring"):
        run([job("a", 0, 10), job("b", 0, 1)], OrderOnlyFakePolicy(fn), nodes=1,
            gpus_per_node=1)
