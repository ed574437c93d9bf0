"""Hypothesis properties every policy must keep, on random snapshots."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_builders import oracle_policy

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
    Policy,
    Progress,
    ServiceClass,
)
from slurm_rl.policies import ORACLES, make
from slurm_rl.policies.capabilities import Resizing
from slurm_rl.policies.gpu_counts import gpu_range

ALL = ("fifo", "deadline", "sjf", "sjf-oracle", "srtf-oracle", "edf", "tiresias", "elasticflow")
NOW = 50_000.0

STATES = (JobState.PENDING, JobState.PENDING, JobState.RUNNING, JobState.RUNNING,
          JobState.REQUEUED, JobState.COMPLETING)
MODELS = (None, "resnet50", "bert", "gpt2", "unknown-model")


@st.composite
def intents(draw: st.DrawFn) -> Intent | None:
    if draw(st.booleans()):
        return None
    lo = draw(st.one_of(st.none(), st.integers(1, 8)))
    hi = draw(st.one_of(st.none(), st.integers(1, 32)))
    return Intent(
        deadline=draw(st.one_of(st.none(), st.floats(NOW - 5000, NOW + 50_000))),
        hard=draw(st.booleans()),
        service_class=draw(st.sampled_from(ServiceClass)),
        gpus_min=lo, gpus_max=hi, elastic=draw(st.booleans()),
        total_steps=draw(st.one_of(st.none(), st.integers(0, 100_000))),
        model=draw(st.sampled_from(MODELS)),
        batch_size=draw(st.sampled_from((None, 32, 256))),
    )


@st.composite
def jobs(draw: st.DrawFn, jid: str) -> JobView:
    state = draw(st.sampled_from(STATES))
    submit = draw(st.floats(0, NOW))
    progress = None
    if draw(st.booleans()):
        progress = Progress(steps_done=draw(st.integers(0, 5000)),
                            steps_total=draw(st.one_of(st.none(), st.integers(0, 10_000))),
                            rate=draw(st.one_of(st.none(), st.floats(0, 50))))
    return JobView(
        id=JobId(jid), user=draw(st.sampled_from(("", "alice", "bob"))), state=state,
        submit_time=submit,
        start_time=draw(st.floats(submit, NOW)) if state.is_running else None,
        time_limit_s=draw(st.one_of(st.none(), st.floats(1, 100_000))),
        gpus=draw(st.integers(1, 12)), nodes=draw(st.integers(1, 3)),
        held=draw(st.booleans()) if state.is_pending else False,
        managed=draw(st.integers(0, 5)) > 0,
        intent=draw(intents()), progress=progress,
        predicted_remaining_s=draw(st.one_of(st.none(), st.floats(0, 50_000))),
        attained_gpu_s=draw(st.floats(0, 50_000)), restarts=draw(st.integers(0, 3)),
    )


@st.composite
def elastic_runner(draw: st.DrawFn, jid: str) -> JobView:
    """A running elastic job with a range and a duration estimate: food for resizes."""
    lo = draw(st.integers(1, 4))
    gpus = draw(st.integers(lo, 16))
    return JobView(
        id=JobId(jid), state=JobState.RUNNING, submit_time=0.0, start_time=NOW - 100, gpus=gpus,
        intent=Intent(gpus_min=lo, gpus_max=draw(st.integers(gpus, 16)), elastic=True,
                      model="resnet50", batch_size=256,
                      deadline=draw(st.one_of(st.none(), st.floats(NOW, NOW + 20_000)))),
        predicted_remaining_s=draw(st.floats(10, 20_000)))


@st.composite
def snapshots(draw: st.DrawFn, elastic: bool = False) -> ClusterSnapshot:
    per_node = draw(st.sampled_from((2, 4, 8)))
    node_views = []
    for i in range(draw(st.integers(0, 4))):
        total = draw(st.sampled_from((per_node, per_node // 2 or 1)))
        node_views.append(NodeView(
            name=NodeName(f"n{i}"), gpus_total=total, gpus_alloc=draw(st.integers(0, total)),
            state=draw(st.sampled_from((NodeState.IDLE, NodeState.MIXED, NodeState.DOWN)))))
    n = draw(st.integers(0, 12))
    js = [draw(jobs(str(i))) for i in range(n)]
    if elastic:
        js += [draw(elastic_runner(f"e{i}")) for i in range(draw(st.integers(1, 3)))]
    return ClusterSnapshot(time=NOW, jobs=tuple(js), nodes=tuple(node_views))


def build(name: str, s: ClusterSnapshot) -> Policy:
    """Policy `name`; an oracle one with true durations for the jobs that have a prediction
    (random values: the oracle need not agree with anything)."""
    if name not in ORACLES:
        return make(name)
    return oracle_policy(name, {j.id: j.predicted_remaining_s for j in s.jobs
                                if j.predicted_remaining_s is not None})


def check(s: ClusterSnapshot, d: Decision, name: str) -> None:
    by_id = {j.id: j for j in s.jobs}
    assert d.policy == name
    # every managed pending job ranked exactly once, ranks 0..n-1, nothing else
    assert sorted(o.job_id for o in d.order) == sorted(
        j.id for j in s.jobs if j.state.is_pending and j.managed)
    assert sorted(o.rank for o in d.order) == list(range(len(d.order)))
    for o in d.order:
        assert o.reason
        rng = gpu_range(by_id[o.job_id])
        if o.gpus is not None:
            assert rng is not None, "a GPU count only for jobs with a range"
            assert rng[0] <= o.gpus <= rng[1]
            assert o.gpus <= max(s.gpus_total, rng[0])
    # preemptions: managed, plainly running jobs, each once
    pre = [p.job_id for p in d.preemptions]
    assert len(pre) == len(set(pre))
    for p in d.preemptions:
        j = by_id[p.job_id]
        assert p.reason and j.managed and j.state is JobState.RUNNING
    # resizes: managed running elastic jobs with a range, within it, a change
    rs = [r.job_id for r in d.resizes]
    assert len(rs) == len(set(rs))
    for r in d.resizes:
        j = by_id[r.job_id]
        rng = gpu_range(j)
        assert r.reason and j.managed and j.state.is_running
        assert j.intent is not None and j.intent.elastic and rng is not None
        assert rng[0] <= r.gpus <= rng[1] and r.gpus != j.gpus
        assert r.gpus <= max(s.gpus_total, rng[0])
    assert not set(rs) & set(pre)


SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(s=snapshots(), name=st.sampled_from(ALL))
def test_decisions_are_well_formed_and_deterministic(s: ClusterSnapshot, name: str) -> None:
    policy = build(name, s)
    d = policy.decide(s)
    check(s, d, name)
    assert build(name, s).decide(s) == d  # a fresh instance decides the same
    assert policy.decide(s) == d  # and so does the same one, again


@SETTINGS
@given(s=snapshots(elastic=True))
def test_elasticflow_resizes_are_well_formed(s: ClusterSnapshot) -> None:
    d = make("elasticflow").decide(s)
    check(s, d, "elasticflow")
    assert make("elasticflow").decide(s) == d
    # never more GPUs in use after the resizes than the cluster has (grown from free GPUs)
    running = {j.id: j.gpus for j in s.running}
    grown = sum(r.gpus - running[r.job_id] for r in d.resizes if r.gpus > running[r.job_id])
    shrunk = sum(running[r.job_id] - r.gpus for r in d.resizes if r.gpus < running[r.job_id])
    assert grown <= s.gpus_free + shrunk


@SETTINGS
@given(s=snapshots())
def test_non_preemptive_policies_never_preempt_or_resize(s: ClusterSnapshot) -> None:
    for name in ("fifo", "sjf", "sjf-oracle", "edf"):
        d = build(name, s).decide(s)
        assert not d.preemptions and not d.resizes
    # deadline resizes running elastic jobs, and suspends (preempts) only jobs it declares it
    # may preempt (best-effort elastic ones, to start a deadline job)
    dl = build("deadline", s)
    assert isinstance(dl, Resizing)
    d = dl.decide(s)
    running = {j.id: j for j in s.running}
    assert all(p.job_id in running and dl.may_preempt(running[p.job_id])  # type: ignore[attr-defined]
               for p in d.preemptions)
    assert all(r.job_id in running and dl.may_resize(running[r.job_id]) for r in d.resizes)
    for name in ("srtf-oracle", "tiresias"):
        assert not build(name, s).decide(s).resizes
