"""`deadline` (memo per pending view, reservations in `profile.ReservedGpus`, spare GPUs
through a heap) against the same rules written plainly (reference_deadline.py: no memo, a list
of reservations searched at every boundary, every candidate scanned at every step): the same
ranks, GPU counts and resizes over sequences of snapshots in which views are kept, replaced,
the clock moves and the nodes change, and the same runs in the simulator."""

from __future__ import annotations

from importlib import resources

import pytest
import reference_deadline as ref
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
    ServiceClass,
)
from slurm_rl.policies import make
from slurm_rl.policies.gpu_counts import gpu_range
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator

NOW = 50_000.0
MODELS = (None, "resnet50", "bert", "unknown-model")


@st.composite
def intents(draw: st.DrawFn) -> Intent | None:
    if draw(st.integers(0, 4)) == 0:
        return None
    ranged = draw(st.booleans())
    return Intent(
        deadline=draw(st.one_of(st.none(), st.sampled_from((NOW - 100, NOW + 600, NOW + 5000)),
                                st.floats(NOW - 5000, NOW + 50_000))),
        hard=draw(st.booleans()), service_class=draw(st.sampled_from(ServiceClass)),
        gpus_min=draw(st.integers(1, 4)) if ranged else None,
        gpus_max=draw(st.integers(1, 32)) if ranged else None,
        elastic=ranged and draw(st.booleans()),
        total_steps=draw(st.one_of(st.none(), st.integers(0, 100_000))),
        model=draw(st.sampled_from(MODELS)), batch_size=draw(st.sampled_from((None, 32, 256))))


@st.composite
def views(draw: st.DrawFn, jid: str, state: JobState, now: float) -> JobView:
    progress = None
    if draw(st.booleans()):
        progress = Progress(steps_done=draw(st.integers(0, 5000)),
                            steps_total=draw(st.one_of(st.none(), st.integers(0, 10_000))),
                            rate=draw(st.one_of(st.none(), st.floats(0, 50))))
    submit = draw(st.sampled_from((0.0, 10.0, 10.0, 20.0)))
    return JobView(
        id=JobId(jid), state=state, submit_time=submit,
        user=draw(st.sampled_from(("", "a", "b"))),  # the urgent share (urgency.py)
        start_time=draw(st.floats(submit, now)) if state.is_running else None,
        time_limit_s=draw(st.one_of(st.none(), st.sampled_from((60.0, 3000.0, 90_000.0)))),
        gpus=draw(st.integers(1, 12)), nodes=draw(st.integers(1, 3)),
        held=draw(st.integers(0, 5)) == 0 if state.is_pending else False,
        managed=draw(st.integers(0, 5)) > 0, intent=draw(intents()), progress=progress,
        predicted_remaining_s=draw(st.one_of(st.none(), st.sampled_from((0.0, 600.0, 3000.0)),
                                             st.floats(0, 20_000))))  # ties: jobs end together


@st.composite
def histories(draw: st.DrawFn) -> list[ClusterSnapshot]:
    pool: dict[str, JobView] = {}
    now, snaps = NOW, []
    per_node = draw(st.sampled_from((4, 8)))
    for _ in range(draw(st.integers(1, 6))):
        now += draw(st.sampled_from((0.0, 30.0, 600.0, 4000.0)))
        if draw(st.integers(0, 4)) == 0:
            per_node = draw(st.sampled_from((2, 4, 8)))
        for _ in range(draw(st.integers(0, 4))):  # new or replaced pending views
            jid = str(draw(st.integers(0, 9)))
            pool[jid] = draw(views(jid, draw(st.sampled_from((JobState.PENDING,
                                                               JobState.REQUEUED))), now))
        for jid in [k for k in pool if draw(st.integers(0, 6)) == 0]:
            del pool[jid]
        running = [draw(views(f"r{i}", JobState.RUNNING, now))
                   for i in range(draw(st.integers(0, 5)))]
        node_views = tuple(
            NodeView(name=NodeName(f"n{k}"), gpus_total=per_node,
                     gpus_alloc=draw(st.integers(0, per_node)),
                     state=draw(st.sampled_from((NodeState.MIXED, NodeState.MIXED,
                                                 NodeState.DOWN))))
            for k in range(draw(st.integers(0, 5))))
        snaps.append(ClusterSnapshot(time=now, jobs=(*pool.values(), *running),
                                     nodes=node_views))
        if draw(st.booleans()):
            snaps.append(snaps[-1])
    return snaps


def compact(d: Decision) -> tuple[list[tuple[JobId, int | None]], list[tuple[JobId, int]]]:
    order = [(o.job_id, o.gpus) for o in sorted(d.order, key=lambda o: o.rank)]
    return order, [(r.job_id, r.gpus) for r in d.resizes]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.sampled_from((0.0, 0.1, 0.6)), st.sampled_from((0.1, 0.25, 1.0)),
       st.sampled_from((0.0, 30.0)))
def test_deadline_decides_as_the_reference(snaps: list[ClusterSnapshot], min_gain: float,
                                           share: float, cost: float) -> None:
    policy = make("deadline", min_gain=min_gain, urgent_share=share, resize_cost_s=cost,
                  suspend=False)
    for s in snaps:
        got = policy.decide(s)
        assert compact(got) == tuple(ref.decide(s, min_gain=min_gain, cost=cost, share=share))
        for o in got.order:  # the live daemon's contract: a count inside the job's range
            job = next(j for j in s.jobs if j.id == o.job_id)
            rng = gpu_range(job)
            assert (o.gpus is None) == (rng is None)
            assert rng is None or rng[0] <= o.gpus <= rng[1]  # type: ignore[operator]
        assert all(r.reason for r in got.resizes) and all(o.reason for o in got.order)


@pytest.mark.parametrize(("count", "load", "elastic"), [(150, 1.2, 0.0), (150, 1.2, 0.5),
                                                        (120, 0.8, 1.0)])
def test_deadline_in_the_simulator_as_the_reference(count: int, load: float,
                                                    elastic: float) -> None:
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                   "itp-deadline").jobs, 0, count)
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 8), gpus_per_node=8,
                          elastic_fraction=elastic)
    old = Simulator(jobs, ref.Reference(), config).run()  # type: ignore[arg-type]
    new = Simulator(jobs, make("deadline", suspend=False), config).run()
    assert (new.jobs, new.intervals, new.preemptions, new.resizes, new.notes) == (
        old.jobs, old.intervals, old.preemptions, old.resizes, old.notes)
