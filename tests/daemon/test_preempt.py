"""Live preemptions (daemon/preempt.py, restart.py): the pure judge, squeue's requeue facts,
and the sequence across cycles against a recorded-output fake of Slurm's commands (the real
thing: test_preempt_slurm.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from fake_slurm import FakeSlurm
from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.config import ResizeConfig
from slurm_rl.core import (
    ClusterSnapshot,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Preempt,
    Progress,
    Resize,
)
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.daemon.preempt import (
    NOT_OPTED_IN,
    Preempter,
    Requeueable,
    judge,
    parse_requeueable,
)
from slurm_rl.daemon.resize import PREEMPTION_UNDER_WAY, RESIZE_UNDER_WAY, Resizer
from slurm_rl.daemon.restart import held_after_requeue, recent_restarts, restart_counts
from slurm_rl.db.actions import (
    ActionOutcome,
    ActionSpec,
    finish_actions,
    next_cycle_id,
    plan_actions,
)
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.models import Action
from slurm_rl.db.repo import upsert_jobs

NOW = 10_000.0
ELASTIC = Intent(gpus_min=1, gpus_max=4, elastic=True)
OK = Requeueable(requeue=True, batch=True)


def job(i: int = 1, **kw: object) -> JobView:
    base: dict[str, object] = dict(
        id=JobId(str(i)), partition="gpu", state=JobState.RUNNING, submit_time=NOW - 600,
        start_time=NOW - 300, gpus=2, intent=ELASTIC)
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def why(j: JobView | None, *, recent: int = 0, slurm: Requeueable | None = OK,
        **cfg: object) -> str:
    return judge(j, settings=ResizeConfig(**cfg), recent=recent, slurm=slurm)  # type: ignore[arg-type]


# --- the judge (pure) -------------------------------------------------------------------------

def test_a_running_elastic_requeueable_batch_job_may_be_preempted() -> None:
    assert why(job()) == ""


def test_every_other_job_is_refused_with_its_reason() -> None:
    assert why(None) == "not in the snapshot"
    assert why(job(managed=False)) == "outside the daemon's scope"
    assert why(job(state=JobState.COMPLETING)) == "completing, not running"
    assert why(job(state=JobState.PENDING)) == "pending, not running"
    assert why(job(intent=None)) == NOT_OPTED_IN
    assert why(job(intent=Intent(gpus_min=1, gpus_max=4))) == \
        "not applied: job did not opt in to restarts (--rl-elastic)"
    assert why(job(1, id=JobId("7_[1-3]"))) == "job id is not a plain Slurm job id"
    assert why(job(), recent=2) == ("restarted 2 times in the last hour (max_per_hour 2, "
                                    "resizes and preemptions together)")
    assert why(job(), recent=0, max_per_hour=0).startswith("restarted 0 times")


def test_what_slurm_would_refuse_the_owner_is_not_asked_for() -> None:
    assert why(job(), slurm=None) == "Slurm did not say whether the job can be requeued"
    assert why(job(), slurm=Requeueable(requeue=True, batch=False)) == \
        "not a batch job: Slurm requeues batch jobs only"
    assert why(job(), slurm=Requeueable(requeue=False, batch=True)) == \
        "submitted with --no-requeue: Slurm would not requeue it for its owner"
    # Before squeue is asked, only the snapshot's rules.
    assert judge(job(), settings=ResizeConfig(), recent=0, check_slurm=False) == ""


def test_squeue_requeue_facts_are_parsed_and_odd_lines_left_out() -> None:
    # `squeue -h -O JobID:24,Requeue:8,BatchFlag:8`, as 22.05 prints it (tests/daemon probe).
    text = ("1                       1       1       \n"
            "4                       1       0       \n"
            "2                       0       1       \n"
            "x;rm                    1       1       \n"
            "5                       yes     1       \n")
    assert parse_requeueable(text) == {
        JobId("1"): OK, JobId("4"): Requeueable(requeue=True, batch=False),
        JobId("2"): Requeueable(requeue=False, batch=True)}


# --- the sequence, on a recorded fake of Slurm's commands --------------------------------------


NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.MIXED, gpus_total=4,
                       gpus_alloc=2, partitions=("gpu",)) for i in range(1, 3))


def preempter(fake: FakeSlurm, *, enabled: bool = True, **cfg: object
              ) -> tuple[Preempter, Resizer]:
    clock = iter(float(x) for x in range(10**6))
    seq = Resizer(fake, ResizeConfig(**cfg),  # type: ignore[arg-type]
                  clock=lambda: NOW + next(clock) / 1000, sleep=lambda s: None,
                  top=("SiteFactor", 10_000), bottom=1)
    return Preempter(seq, enabled=enabled), seq


def stored(session: Session) -> list[tuple[ActionKind, ActionStatus]]:
    return [(a.kind, a.status) for a in session.scalars(select(Action).order_by(Action.id))]


def step(p: Preempter, session: Session, t: float, ids: Sequence[int], *jobs: JobView
         ) -> list[str]:
    upsert_jobs(session, list(jobs), now=t)
    session.commit()
    pre = [Preempt(job_id=JobId(str(i)), reason="test") for i in ids]
    return p.step(session, pre, ClusterSnapshot(time=t, jobs=jobs, nodes=NODES), cycle_id=1,
                  decision_id=None).notes()


def test_signal_then_after_the_grace_requeuehold_and_release_at_the_lowest_rank(
        session: Session) -> None:
    fake = FakeSlurm(states=("RUNNING", "PENDING"))
    p, _ = preempter(fake, grace_s=30.0)
    assert step(p, session, NOW, [1], job()) == [
        "preemptions: 1 signalled, 0 requeued, 0 failed"]
    assert fake.commands() == ["scancel --signal=USR1 --full 1"]
    step(p, session, NOW + 10, [1], job())  # within the grace: nothing
    assert len(fake.commands()) == 1
    assert step(p, session, NOW + 31, [1], job()) == [
        "preemptions: 0 signalled, 1 requeued, 0 failed"]
    # No GPU change; it waits behind the job the policy ranked first until the next cycle.
    assert fake.commands()[1:] == ["scontrol requeuehold 1",
                                   "update JobId=1 SiteFactor=1 StartTime=now+1", "release 1"]
    assert stored(session) == [(ActionKind.PREEMPT_SIGNAL, ActionStatus.DONE),
                               (ActionKind.PREEMPT_REQUEUE, ActionStatus.DONE),
                               (ActionKind.PREEMPT_RELEASE, ActionStatus.DONE)]
    assert recent_restarts(session, [JobId("1")], since=NOW - 3600) == {JobId("1"): 1}
    assert held_after_requeue(session) == {}


def test_the_preemptions_due_in_a_cycle_wait_for_pending_together(session: Session) -> None:
    # Three jobs signalled in one cycle are requeued in one later cycle: all requeueholds, one
    # wait for PENDING (a squeue of all three per look), then the releases. One by one, each
    # job's GPUs were freed a wait after the one before (0.3 s live).
    fake = FakeSlurm(states=("RUNNING", "RUNNING", "PENDING"))
    p, _ = preempter(fake, grace_s=30.0)
    jobs = [job(i) for i in (1, 2, 3)]
    step(p, session, NOW, [1, 2, 3], *jobs)
    assert step(p, session, NOW + 31, [], *jobs) == [
        "preemptions: 0 signalled, 3 requeued, 0 failed"]
    assert fake.commands()[3:] == [
        "scontrol requeuehold 1", "scontrol requeuehold 2", "scontrol requeuehold 3",
        "update JobId=1 SiteFactor=1 StartTime=now+1", "release 1",
        "update JobId=2 SiteFactor=1 StartTime=now+1", "release 2",
        "update JobId=3 SiteFactor=1 StartTime=now+1", "release 3"]
    looks = [a for a, _ in fake.calls if a[0] == "squeue" and a[-1] == "%i %T"]
    assert [a[a.index("-j") + 1] for a in looks] == ["1,2,3"] * 3
    assert held_after_requeue(session) == {}


def test_a_requeued_job_keeps_its_first_submit_time_for_the_policy(session: Session) -> None:
    # Slurm dates a requeued job submitted at the requeue (22.05): the policy sees the first
    # submit time (as the simulator keeps it), the daemon's own records Slurm's.
    fake = FakeSlurm(states=("PENDING",))
    p, seq = preempter(fake, grace_s=0.0)
    first = job(1, submit_time=NOW - 600)
    step(p, session, NOW, [1], first, job(2))
    requeued = job(1, state=JobState.PENDING, submit_time=NOW + 1, start_time=None)
    raw = ClusterSnapshot(time=NOW + 5, jobs=(requeued, job(2)), nodes=NODES)
    annotated = seq.annotate(session, raw)
    assert annotated.jobs[0].submit_time == NOW + 1 and annotated.jobs[0].restarts == 1
    seen = seq.as_submitted(annotated)
    assert seen.jobs[0].submit_time == NOW - 600 and seen.jobs[0].restarts == 1
    assert seen.jobs[1] is annotated.jobs[1]
    assert seq.as_submitted(annotated).jobs[0] is seen.jobs[0]  # the same view while it is
    # Gone (or another job under the id): forgotten.
    seq.annotate(session, ClusterSnapshot(time=NOW + 9, jobs=(job(2),), nodes=NODES))
    later = ClusterSnapshot(time=NOW + 9, jobs=(requeued,), nodes=NODES)
    assert seq.as_submitted(later) is later


def test_a_job_not_pending_in_time_is_left_to_recovery_the_others_released(
        session: Session) -> None:
    class OneSlow(FakeSlurm):
        def run(self, args: Sequence[str], **kw: object):  # type: ignore[no-untyped-def]
            result = super().run(args, **kw)  # type: ignore[arg-type]
            if args[-1] == "%i %T":
                ids = args[args.index("-j") + 1].split(",")
                out = "".join(f"{i} {'RUNNING' if i == '2' else 'PENDING'}\n" for i in ids)
                result = replace(result, stdout=out)
            return result
    fake = OneSlow()
    p, seq = preempter(fake, grace_s=0.0, wait_pending_s=1.0)
    jobs = [job(i) for i in (1, 2, 3)]
    assert step(p, session, NOW, [1, 2, 3], *jobs) == [
        "preemptions: 0 signalled, 2 requeued, 1 failed"]
    assert [c for c in fake.commands() if c.startswith("release")] == ["release 1", "release 3"]
    assert held_after_requeue(session) == {JobId("2"): ActionKind.PREEMPT_REQUEUE}
    assert seq.recover_due


def test_a_job_in_one_restarts_grace_is_not_signalled_for_another(session: Session) -> None:
    """Seen live: a job in its preemption's grace got a resize's signal two cycles later, and
    the resize would have requeued it a second time once it ran again. Each restart's signal
    is followed by that restart alone."""
    fake = FakeSlurm(states=("RUNNING", "PENDING"))
    p, seq = preempter(fake, grace_s=30.0)
    step(p, session, NOW, [1], job())  # preemption signalled
    snap = ClusterSnapshot(time=NOW + 2, jobs=(job(),), nodes=NODES)
    notes = seq.step(session, [Resize(job_id=JobId("1"), gpus=4)], snap, limits=None,
                     assoc=None, cycle_id=2, decision_id=None,
                     restarting=p.in_flight).notes()
    assert notes == [f"resize of 1 skipped: {PREEMPTION_UNDER_WAY}"]
    assert fake.commands() == ["scancel --signal=USR1 --full 1"] and not seq.in_flight
    # And the other way round: a job a resize signalled is not preempted meanwhile.
    fake2 = FakeSlurm()
    p2, seq2 = preempter(fake2, grace_s=30.0)
    growing = job(2, progress=Progress(steps_done=100, steps_total=10_100, rate=1.0))
    upsert_jobs(session, [growing], now=NOW)
    session.commit()
    limits = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)}
    idle = (*NODES, NodeView(name=NodeName("node3"), state=NodeState.IDLE, gpus_total=4,
                             gpus_alloc=0, partitions=("gpu",)))
    assert seq2.step(session, [Resize(job_id=JobId("2"), gpus=4)],
                     ClusterSnapshot(time=NOW, jobs=(growing,), nodes=idle), limits=limits,
                     assoc=None, cycle_id=3, decision_id=None).notes() == [
        "resizes: 1 signalled, 0 restarted at a new count, 0 failed"]
    assert JobId("2") in seq2.in_flight
    assert step(p2, session, NOW + 1, [2], growing) == [
        f"preemption of 2 skipped: {RESIZE_UNDER_WAY}"]
    assert not p2.in_flight and len(fake2.commands()) == 1


def test_only_opted_in_jobs_are_touched_and_the_rest_say_why(session: Session) -> None:
    fake = FakeSlurm(facts={"3": "0       1", "4": "1       0"})
    p, _ = preempter(fake, grace_s=0.0)
    notes = step(p, session, NOW, [1, 2, 3, 4], job(1), job(2, intent=None), job(3), job(4))
    assert notes == [
        "preemptions: 0 signalled, 1 requeued, 0 failed",
        f"preemption of 2 skipped: {NOT_OPTED_IN}",
        "preemption of 3 skipped: submitted with --no-requeue: Slurm would not requeue it "
        "for its owner",
        "preemption of 4 skipped: not a batch job: Slurm requeues batch jobs only"]
    assert fake.commands()[0] == "scontrol requeuehold 1"
    assert all(" 2" not in c and " 3" not in c and " 4" not in c for c in fake.commands())


def test_the_cap_is_shared_with_resizes(session: Session) -> None:
    fake = FakeSlurm()
    p, seq = preempter(fake, grace_s=0.0, max_per_hour=1)
    upsert_jobs(session, [job()], now=NOW - 5000)
    # A resize's requeue an hour ago does not count; one a minute ago does.
    for at in (NOW - 4000, NOW - 60):
        seq._run_logged(session, ActionKind.REQUEUE_HOLD, JobId("1"),
                        ("scontrol", "requeuehold", "1"), None, 1, None)
        session.execute(Action.__table__.update().where(  # type: ignore[attr-defined]
            Action.id == max(a.id for a in session.scalars(select(Action)))).values(
            started_at=at))
        session.commit()
    calls = len(fake.commands())
    notes = step(p, session, NOW, [1], job())
    assert notes == ["preemption of 1 skipped: restarted 1 times in the last hour "
                     "(max_per_hour 1, resizes and preemptions together)"]
    assert len(fake.commands()) == calls


def test_a_signalled_preemption_goes_ahead_when_the_policy_no_longer_asks(
        session: Session) -> None:
    """The job was told to checkpoint: the requeue that signal announced follows it."""
    fake = FakeSlurm()
    p, _ = preempter(fake, grace_s=30.0)
    step(p, session, NOW, [1], job())
    notes = step(p, session, NOW + 31, [], job())  # the pending job started elsewhere
    assert notes == ["preemptions: 0 signalled, 1 requeued, 0 failed"]
    assert [c.split(" ")[0] for c in fake.commands()] == ["scancel", "scontrol", "update",
                                                           "release"]


def test_a_signalled_preemption_is_dropped_only_when_the_job_stopped(session: Session) -> None:
    fake = FakeSlurm()
    p, _ = preempter(fake, grace_s=30.0)
    step(p, session, NOW, [1], job())
    notes = step(p, session, NOW + 31, [], job(state=JobState.COMPLETED))
    assert notes == ["preemption of 1 skipped: dropped: the job no longer runs"]
    assert [c.split(" ")[0] for c in fake.commands()] == ["scancel"]


def test_a_job_is_signalled_at_most_max_per_hour_times_an_hour(session: Session) -> None:
    """Signals whose requeue was dropped (here: the job ended each time before its grace was
    over, then ran again) count too: the job is not told to checkpoint over and over."""
    fake = FakeSlurm()
    p, _ = preempter(fake, grace_s=30.0, max_per_hour=2)
    for k in range(2):
        step(p, session, NOW + 100 * k, [1], job())
        step(p, session, NOW + 100 * k + 10, [], job(state=JobState.PENDING))
    notes = step(p, session, NOW + 300, [1], job())
    assert notes == ["preemption of 1 skipped: signalled 2 times in the last hour "
                     "(max_per_hour 2): not told to checkpoint again"]
    assert [c.split(" ")[0] for c in fake.commands()] == ["scancel", "scancel"]
    assert step(p, session, NOW + 3700, [1], job()) == [
        "preemptions: 1 signalled, 0 requeued, 0 failed"]  # an hour later


def test_preemption_off_records_why_and_touches_nothing(session: Session) -> None:
    fake = FakeSlurm()
    p, _ = preempter(fake, enabled=False)
    assert step(p, session, NOW, [1], job()) == [
        "preemption of 1 skipped: preemption is off ([resize] preempt = false)"]
    assert fake.calls == []


def test_a_job_an_interrupted_preemption_left_held_is_released_at_the_lowest_rank(
        session: Session) -> None:
    first, _ = preempter(FakeSlurm(states=("RUNNING",)), grace_s=0.0, wait_pending_s=1.0)
    assert step(first, session, NOW, [1], job()) == [
        "preemptions: 0 signalled, 0 requeued, 1 failed"]
    assert held_after_requeue(session) == {JobId("1"): ActionKind.PREEMPT_REQUEUE}
    fake = FakeSlurm()
    _, second = preempter(fake)  # a restarted daemon: nothing in memory
    upsert_jobs(session, [job(state=JobState.PENDING)], now=NOW + 5)
    assert second.recover(session, ClusterSnapshot(time=NOW + 5, jobs=(
        job(state=JobState.PENDING),), nodes=NODES), cycle_id=2) == 1
    assert fake.commands() == ["update JobId=1 SiteFactor=1 StartTime=now+1", "release 1"]
    assert held_after_requeue(session) == {}


@pytest.mark.parametrize("kind", [ActionKind.PREEMPT_REQUEUE, ActionKind.REQUEUE_HOLD])
def test_an_abandoned_requeue_is_never_an_instruction_to_release(
        session: Session, kind: ActionKind) -> None:
    """A crash left a requeuehold PLANNED that never ran; the next daemon finished it as
    ABANDONED (Slurm did not show it). When the job is later held by someone else (an admin's
    or the owner's own `scontrol requeuehold`), recovery must not release it."""
    upsert_jobs(session, [job()], now=NOW)
    [action_id] = plan_actions(session, [ActionSpec(
        kind=kind, job_ids=(JobId("1"),), argv=("scontrol", "requeuehold", "1"),
        cycle_id=next_cycle_id(session))], at=NOW)
    finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=None,
                                           status=ActionStatus.ABANDONED)], at=NOW + 1)
    assert held_after_requeue(session) == {}
    fake = FakeSlurm()
    _, seq = preempter(fake)
    held = job(state=JobState.PENDING)
    upsert_jobs(session, [held], now=NOW + 5)
    assert seq.recover(session, ClusterSnapshot(time=NOW + 5, jobs=(held,), nodes=NODES),
                       cycle_id=2) == 0
    assert fake.calls == []


def test_an_abandoned_requeue_leaves_an_earlier_held_one_to_release(session: Session) -> None:
    """Only what ran counts: an abandoned requeue after a DONE one (no release since) leaves
    the job to release as the DONE one's kind."""
    upsert_jobs(session, [job()], now=NOW)
    cycle = next_cycle_id(session)
    done, abandoned = plan_actions(session, [ActionSpec(
        kind=k, job_ids=(JobId("1"),), argv=("scontrol", "requeuehold", "1"), cycle_id=cycle)
        for k in (ActionKind.PREEMPT_REQUEUE, ActionKind.REQUEUE_HOLD)], at=NOW)
    finish_actions(session, [ActionOutcome(action_id=done, exit_code=0),
                             ActionOutcome(action_id=abandoned, exit_code=None,
                                           status=ActionStatus.ABANDONED)], at=NOW + 1)
    assert held_after_requeue(session) == {JobId("1"): ActionKind.PREEMPT_REQUEUE}


def test_a_job_still_completing_after_its_requeue_is_looked_at_again_until_released(
        session: Session) -> None:
    fake = FakeSlurm(states=("COMPLETING",))
    p, seq = preempter(fake, grace_s=0.0, wait_pending_s=1.0)
    step(p, session, NOW, [1], job())
    assert seq.recover_due and held_after_requeue(session)
    completing = ClusterSnapshot(time=NOW + 5, jobs=(job(state=JobState.COMPLETING),),
                                 nodes=NODES)
    seq.recover_due = False  # (as step() clears it before recovering)
    assert seq.recover(session, completing, cycle_id=2) == 0
    assert seq.recover_due, "a job not yet pending must be looked at again next cycle"
    upsert_jobs(session, [job(state=JobState.PENDING)], now=NOW + 10)
    assert seq.recover(session, ClusterSnapshot(time=NOW + 10, jobs=(
        job(state=JobState.PENDING),), nodes=NODES), cycle_id=3) == 1
    assert held_after_requeue(session) == {}


def test_the_snapshot_says_how_often_a_job_restarted_and_what_it_had_run(
        session: Session) -> None:
    fake = FakeSlurm()
    p, seq = preempter(fake, grace_s=0.0)
    step(p, session, NOW, [1], job(start_time=NOW - 300, gpus=2))
    pending = job(state=JobState.PENDING, start_time=None, attained_gpu_s=0.0)
    seen = seq.annotate(session, ClusterSnapshot(time=NOW + 5, jobs=(pending, job(2)),
                                                 nodes=NODES))
    one, two = seen.jobs
    assert one.restarts == 1 and one.attained_gpu_s == pytest.approx(600.0, abs=1.0)
    assert two is job(2) or two == job(2)
    # A new daemon reads the count from the action log (the earlier run's GPU-time is lost).
    _, fresh = preempter(FakeSlurm())
    again = fresh.annotate(session, ClusterSnapshot(time=NOW + 5, jobs=(pending,), nodes=NODES))
    assert again.jobs[0].restarts == 1 and restart_counts(session) == {JobId("1"): 1}
    # Days later Slurm gives id 1 to another submission: it has not restarted, nor run.
    stranger = replace(pending, submit_time=NOW + 5 * 86400.0)
    for daemon in (seq, preempter(FakeSlurm())[1]):
        (new,) = daemon.annotate(session, ClusterSnapshot(time=NOW + 6 * 86400.0,
                                                          jobs=(stranger,), nodes=NODES)).jobs
        assert new.restarts == 0 and new.attained_gpu_s == 0.0


@pytest.mark.parametrize("other", [
    dict(submit_time=NOW + 5 * 86400.0),                     # submitted days after our requeue
    dict(submit_time=NOW + 5.0, managed=False, intent=None),  # not a job the daemon manages
    dict(submit_time=NOW + 5.0, restartable=False),           # never requeued by the daemon
])
def test_recovery_never_releases_another_job_under_the_same_id(
        session: Session, other: dict[str, object]) -> None:
    """A preemption's release failed, so the log still shows job 1 held by the daemon; days
    later Slurm (started with fresh state) gives id 1 to someone else's job, held by an admin.
    Recovery must not release it, give it the lowest rank, or touch its GPUs."""
    first, _ = preempter(FakeSlurm(states=("RUNNING",)), grace_s=0.0, wait_pending_s=1.0)
    step(first, session, NOW, [1], job())
    assert held_after_requeue(session) == {JobId("1"): ActionKind.PREEMPT_REQUEUE}
    stranger = replace(job(state=JobState.PENDING), **other)  # type: ignore[arg-type]
    fake = FakeSlurm()
    _, second = preempter(fake)
    upsert_jobs(session, [stranger], now=NOW + 6 * 86400.0)
    assert second.recover(session, ClusterSnapshot(time=NOW + 6 * 86400.0, jobs=(stranger,),
                                                   nodes=NODES), cycle_id=2) == 0
    assert fake.calls == []
