"""The simulator's snapshots (views.SimSnapshot) answer as plain ClusterSnapshots would: running
views built only when read (even long after), running_ids, finished, and the free-GPU counts
that policies' Capacity.of reads from them."""

from __future__ import annotations

import dataclasses

from sim_helpers import FREE, ONE_STEP, FakePolicy, job, run

from slurm_rl.core import ClusterSnapshot, Decision, JobView, Preempt
from slurm_rl.policies.capacity import Capacity


def plain(s: ClusterSnapshot) -> ClusterSnapshot:
    jobs = tuple(JobView(**{f.name: getattr(j, f.name) for f in dataclasses.fields(JobView)})
                 for j in s.jobs)
    return ClusterSnapshot(time=s.time, jobs=jobs, nodes=s.nodes)


def test_running_ids_read_at_every_call_are_the_running_jobs() -> None:
    """A policy that reads running_ids at every call gets each set derived from the one
    before (less the runs stopped, plus those started): the same as counting afresh, through
    starts, finishes, requeues and restarts of the same job."""
    checked = []

    def fn(s: ClusterSnapshot) -> Decision:
        ids = s.running_ids
        assert ids == frozenset(j.id for j in s.running), s.time
        checked.append(len(ids))
        if when and s.time >= when[0] and s.running:
            when.pop(0)
            wide = max(s.running, key=lambda j: (j.gpus, j.id))
            return Decision(policy="p", preemptions=(Preempt(job_id=wide.id),))
        return Decision(policy="p")

    when = [30.0, 60.0, 95.0]
    p = FakePolicy(fn)
    jobs = [job(i, submit=7.0 * i, duration=30.0 + 11 * (i % 5), gpus=(1, 2, 4, 8, 3)[i % 5])
            for i in range(20)]
    r = run(jobs, p, nodes=3, gpus_per_node=4, tick_s=5.0, restart_delay_s=5.0, **ONE_STEP,
            **FREE)
    assert r.preemptions == 3 and len(checked) > 30 and max(checked) > 2


def test_sim_snapshots_answer_like_plain_ones() -> None:
    def fn(s: ClusterSnapshot) -> Decision:
        # requeue the widest running job now and then: restarts, multi-node gangs, free maps
        if s.time in (30.0, 95.0) and s.running:
            wide = max(s.running, key=lambda j: (j.gpus, j.id))
            return Decision(policy="p", preemptions=(Preempt(job_id=wide.id),))
        return Decision(policy="p")

    p = FakePolicy(fn)
    jobs = [job(i, submit=10.0 * i, duration=40.0 + 15 * (i % 4), gpus=(1, 2, 4, 8, 3)[i % 5],
                total_steps=None if i % 3 == 0 else 100 * (i + 1)) for i in range(14)]
    r = run(jobs, p, nodes=3, gpus_per_node=4, tick_s=5.0, restart_delay_s=5.0, **ONE_STEP,
            **FREE)
    assert r.preemptions == 2 and len(p.seen) > 20
    predicted = [x for s in p.seen for x in s.running_predicted]
    assert None in predicted and len({x for x in predicted if x is not None}) > 10
    steps = [x for s in p.seen for x in s.running_steps]
    assert None in steps and len({x for x in steps if x is not None}) > 10
    assert any(len(s.running) > 1 and any(j.gpus > 4 for j in s.running) for s in p.seen)
    for s in p.seen:  # read only now, after the run
        ref = plain(s)
        assert s == ref and ref == s
        assert s.pending == ref.pending and s.running == ref.running and s.jobs == ref.jobs
        assert s.running_ids == ref.running_ids == frozenset(j.id for j in ref.running)
        # the bulk shortcuts: the same values (the same floats) as each view's field
        assert s.running_predicted == ref.running_predicted == tuple(
            j.predicted_remaining_s for j in s.running)
        assert s.running_gpus == ref.running_gpus == tuple(j.gpus for j in ref.running)
        assert s.running_attained == ref.running_attained == tuple(
            j.attained_gpu_s for j in s.running)
        assert s.running_steps == ref.running_steps == tuple(
            None if j.progress is None else (j.progress.steps_done, j.progress.rate)
            for j in s.running)
        assert s.finished == ref.finished == ()
        got, want = Capacity.of(s), Capacity.of(ref)
        assert (got.free, got.node_cap, got.total_free) == (want.free, want.node_cap,
                                                            want.total_free)
        copy = dataclasses.replace(s)
        assert copy == s and copy.running == s.running and copy.pending == s.pending
        assert Capacity.of(copy).free == want.free
