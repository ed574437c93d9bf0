"""Live resizes (daemon/resize.py): the pure verdict, the scontrol lines, and the sequence
across cycles against a recorded-output fake of Slurm's commands (the real thing:
test_resize_slurm.py)."""

from __future__ import annotations

from collections.abc import Sequence

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
    Progress,
    Resize,
)
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.daemon.resize import (
    Resizer,
    Verdict,
    _Free,
    _take,
    free_for,
    judge,
    release_lines,
)
from slurm_rl.daemon.restart import held_after_requeue, recent_restarts
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.models import Action
from slurm_rl.db.repo import upsert_jobs

NOW = 10_000.0
LIMITS = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)}
ELASTIC = Intent(gpus_min=1, gpus_max=8, elastic=True)


def job(i: int = 1, **kw: object) -> JobView:
    base: dict[str, object] = dict(
        id=JobId(str(i)), partition="gpu", state=JobState.RUNNING, submit_time=NOW - 600,
        start_time=NOW - 300, gpus=1, intent=ELASTIC,
        progress=Progress(steps_done=100, steps_total=1100, rate=1.0))  # 1000 s left at 1 GPU
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def verdict(resize: Resize, j: JobView | None, *, free: tuple[int, ...] = (3, 4, 4, 4),
            recent: int = 0, settings: ResizeConfig | None = None) -> Verdict:
    return judge(resize, j, now=NOW, settings=settings or ResizeConfig(), limits=LIMITS,
                 assoc=None, node_free=free, recent=recent)


def grow(gpus: int, i: int = 1) -> Resize:
    return Resize(job_id=JobId(str(i)), gpus=gpus)


# --- the verdict (pure) -----------------------------------------------------------------------

def test_a_grow_that_saves_more_than_the_restart_cost_goes() -> None:
    v = verdict(grow(2), job())
    assert v.why == ""
    assert (v.gpus, v.per_node, v.nodes) == (2, 2, 1)
    assert v.gain_s > 30.0


def test_a_grow_over_a_node_is_split_evenly_over_whole_nodes() -> None:
    v = verdict(grow(8), job())
    assert (v.why, v.per_node, v.nodes) == ("", 4, 2)
    assert "can not be split evenly" in verdict(grow(5), job()).why


@pytest.mark.parametrize(("j", "r", "why"), [
    (None, grow(2), "not in the snapshot"),
    (job(managed=False), grow(2), "outside the daemon's scope"),
    (job(state=JobState.PENDING), grow(2), "pending, not running"),
    (job(intent=Intent(gpus_min=1, gpus_max=8)), grow(2), "not elastic"),
    (job(intent=Intent(elastic=True)), grow(2), "outside the job's range None-None"),
    (job(id=JobId("1_[2-4]")), Resize(job_id=JobId("1_[2-4]"), gpus=2), "not a plain"),
    (job(), grow(1), "already at that count"),
    (job(), grow(9), "outside the job's range 1-8"),
    (job(intent=Intent(gpus_min=1, gpus_max=64, elastic=True)), grow(32),
     "exceed what partition 'gpu' allows this job (16)"),
    (job(partition="cpu"), grow(2), "partition 'cpu' has no known GPU limits"),
])
def test_what_is_never_resized(j: JobView | None, r: Resize, why: str) -> None:
    assert why in verdict(r, j).why


def test_a_grow_must_fit_on_free_gpus_with_its_own_counted() -> None:
    # node_free already holds the job's own GPUs where the snapshot says (free_for, below).
    assert verdict(grow(3), job(), free=(3, 0)).why == ""
    assert verdict(grow(4), job(), free=(3, 0)).why == (
        "does not fit now: 4 GPUs need 1 node(s) with 4 GPUs free or its own")
    assert verdict(grow(8), job(), free=(4, 3, 4)).why == ""
    assert "need 2 node(s) with 4 GPUs free" in verdict(grow(8), job(), free=(4, 3, 3)).why


def test_the_hourly_cap() -> None:
    cfg = ResizeConfig(max_per_hour=2)
    assert verdict(grow(2), job(), recent=1, settings=cfg).why == ""
    assert "restarted 2 times in the last hour" in verdict(grow(2), job(), recent=2,
                                                         settings=cfg).why
    assert "max_per_hour 0" in verdict(grow(2), job(), settings=ResizeConfig(max_per_hour=0)).why


def test_gain_must_beat_the_restart_cost() -> None:
    # 20 s left at 1 GPU; 2 GPUs save at most 10 s (less, by the generic speed-up curve).
    short = job(progress=Progress(steps_done=1080, steps_total=1100, rate=1.0))
    assert "does not beat the restart cost 30s" in verdict(grow(2), short).why
    assert verdict(grow(2), short, settings=ResizeConfig(restart_cost_s=1.0)).why == ""
    unknown = job(progress=None, time_limit_s=None)
    assert verdict(grow(2), unknown).why == "no prediction of its remaining time"


def test_a_shrink_is_not_made_on_a_job_about_to_finish() -> None:
    big = job(gpus=4, progress=Progress(steps_done=1000, steps_total=1100, rate=20.0))  # 5 s
    assert verdict(Resize(job_id=JobId("1"), gpus=1), big).why == (
        "finishes within the restart cost (5s left)")
    long = job(gpus=4)
    v = verdict(Resize(job_id=JobId("1"), gpus=1), long, free=())  # shrinking always fits
    assert (v.why, v.per_node, v.nodes) == ("", 1, 1)


def test_the_release_lines_set_a_begin_time_after_the_revoked_second() -> None:
    v = Verdict(job_id=JobId("42"), gpus=8, per_node=4, nodes=2)
    assert release_lines(v, 1) == (
        "update JobId=42 TresPerNode=gres:gpu:4 NumNodes=2 StartTime=now+1", "release 42")
    one = Verdict(job_id=JobId("42"), gpus=3, per_node=3, nodes=1)
    assert release_lines(one, 1) == (
        "update JobId=42 TresPerNode=gres:gpu:3 StartTime=now+1", "release 42")
    # Ahead of the queue, as the simulator restarts it: SiteFactor with the update; Priority
    # (refused on a held job) after the release.
    assert release_lines(one, 1, ("SiteFactor", 10000)) == (
        "update JobId=42 TresPerNode=gres:gpu:3 SiteFactor=10000 StartTime=now+1", "release 42")
    assert release_lines(one, 1, ("Priority", 10000)) == (
        "update JobId=42 TresPerNode=gres:gpu:3 StartTime=now+1", "release 42",
        "update JobId=42 Priority=10000")


# --- the sequence, on a recorded fake of Slurm's commands --------------------------------------


NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.MIXED, gpus_total=4,
                       gpus_alloc=1 if i == 1 else 0, partitions=("gpu",)) for i in range(1, 5))


def snap(t: float, *jobs: JobView) -> ClusterSnapshot:
    return ClusterSnapshot(time=t, jobs=jobs, nodes=NODES)


def resizer(fake: FakeSlurm, **cfg: object) -> Resizer:
    clock = iter(float(x) for x in range(10**6))
    return Resizer(fake, ResizeConfig(**cfg),  # type: ignore[arg-type]
                   clock=lambda: NOW + next(clock) / 1000, sleep=lambda s: None)


def stored(session: Session) -> list[tuple[ActionKind, ActionStatus]]:
    return [(a.kind, a.status) for a in session.scalars(select(Action).order_by(Action.id))]


def step(r: Resizer, session: Session, t: float, resizes: Sequence[Resize], *jobs: JobView
         ) -> list[str]:
    upsert_jobs(session, list(jobs), now=t)
    session.commit()
    return r.step(session, resizes, snap(t, *jobs), limits=LIMITS, assoc=None, cycle_id=1,
                  decision_id=None).notes()


def test_the_gpus_a_job_holds_count_for_its_grow_where_the_snapshot_says() -> None:
    free = [_Free(node=NodeName("node1"), gpus=2), _Free(node=NodeName("node2"), gpus=1)]
    on_1 = job(gpus=2, placement=((NodeName("node1"), 2),))
    assert free_for(free, on_1) == [4, 1]
    # a multi-node --gpus=N job: Slurm does not say how it split them, so none are counted
    assert free_for(free, job(gpus=2, placement=((NodeName("node1"), None),
                                                  (NodeName("node2"), None)))) == [2, 1]
    # the grow takes node1: there the job then holds 4, none free; node2 is untouched
    v = verdict(grow(4), on_1, free=tuple(free_for(free, on_1)))
    assert (v.why, v.per_node, v.nodes) == ("", 4, 1)
    _take(free, v, on_1)
    assert [f.gpus for f in free] == [0, 1]


def test_a_grow_onto_the_jobs_own_node_is_made_live(session: Session) -> None:
    # node1 has 3 of 4 GPUs free and the job holds the fourth: 1 -> 4 fits there once it is
    # requeued, as the simulator and the policies count it (before: refused, "besides its own").
    fake = FakeSlurm()
    r = resizer(fake, grace_s=0.0)
    full = tuple(NodeView(name=n.name, state=NodeState.ALLOCATED, gpus_total=4,
                          gpus_alloc=1 if n.name == "node1" else 4, partitions=("gpu",))
                 for n in NODES)
    j = job(placement=((NodeName("node1"), 1),))
    upsert_jobs(session, [j], now=NOW)
    session.commit()
    notes = r.step(session, [grow(4)], ClusterSnapshot(time=NOW, jobs=(j,), nodes=full),
                   limits=LIMITS, assoc=None, cycle_id=1, decision_id=None).notes()
    assert notes == ["resizes: 0 signalled, 1 restarted at a new count, 0 failed"]
    assert fake.commands()[-2:] == [
        "update JobId=1 TresPerNode=gres:gpu:4 StartTime=now+1", "release 1"]
    # without the placement the same grow does not fit
    r2 = resizer(FakeSlurm(), grace_s=0.0)
    notes = r2.step(session, [grow(4)],
                    ClusterSnapshot(time=NOW, jobs=(job(),), nodes=full), limits=LIMITS,
                    assoc=None, cycle_id=2, decision_id=None).notes()
    assert notes == ["resize of 1 skipped: does not fit now: 4 GPUs need 1 node(s) with 4 GPUs "
                     "free or its own"]


def test_signal_then_after_the_grace_requeuehold_update_release(session: Session) -> None:
    fake = FakeSlurm(states=("RUNNING", "PENDING"))
    r = resizer(fake, grace_s=30.0)
    notes = step(r, session, NOW, [grow(2)], job())
    assert fake.commands() == ["scancel --signal=USR1 --full 1"]
    assert notes == ["resizes: 1 signalled, 0 restarted at a new count, 0 failed"]
    step(r, session, NOW + 10, [grow(2)], job())  # within the grace: nothing
    assert len(fake.commands()) == 1
    notes = step(r, session, NOW + 31, [grow(2)], job())
    assert fake.commands()[1:] == [
        "scontrol requeuehold 1",
        "update JobId=1 TresPerNode=gres:gpu:2 StartTime=now+1", "release 1"]
    assert notes == ["resizes: 0 signalled, 1 restarted at a new count, 0 failed"]
    assert stored(session) == [(ActionKind.RESIZE_SIGNAL, ActionStatus.DONE),
                               (ActionKind.REQUEUE_HOLD, ActionStatus.DONE),
                               (ActionKind.RESIZE_RELEASE, ActionStatus.DONE)]
    assert recent_restarts(session, [JobId("1")], since=NOW - 3600) == {JobId("1"): 1}
    assert held_after_requeue(session) == {}


def test_a_signalled_resize_follows_the_policys_new_count(session: Session) -> None:
    """The policy changed its mind during the grace (2 -> 4 GPUs): one signal, one restart, at
    the count it wants now (before: a second signal, and the restart put off again)."""
    fake = FakeSlurm()
    r = resizer(fake, grace_s=30.0)
    step(r, session, NOW, [grow(2)], job())
    notes = step(r, session, NOW + 31, [grow(4)], job())
    assert notes == ["resizes: 0 signalled, 1 restarted at a new count, 0 failed"]
    assert fake.commands() == ["scancel --signal=USR1 --full 1", "scontrol requeuehold 1",
                               "update JobId=1 TresPerNode=gres:gpu:4 StartTime=now+1",
                               "release 1"]
    assert r.in_flight == {}


def test_a_signalled_resize_goes_ahead_when_the_policy_no_longer_asks(session: Session) -> None:
    fake = FakeSlurm()
    r = resizer(fake, grace_s=30.0)
    step(r, session, NOW, [grow(2)], job())
    step(r, session, NOW + 10, [], job())  # within the grace: nothing, and nothing withdrawn
    notes = step(r, session, NOW + 31, [], job())
    assert notes == ["resizes: 0 signalled, 1 restarted at a new count, 0 failed"]
    assert fake.commands()[-2:] == ["update JobId=1 TresPerNode=gres:gpu:2 StartTime=now+1",
                                    "release 1"]


def test_a_job_whose_resizes_keep_being_dropped_is_not_signalled_again_and_again(
        session: Session) -> None:
    """Each signalled grow finds its GPUs gone after the grace: the job is told to checkpoint
    at most max_per_hour (2) times an hour."""
    fake = FakeSlurm()
    r = resizer(fake, grace_s=30.0, max_per_hour=2)
    busy = tuple(NodeView(name=n.name, state=NodeState.ALLOCATED, gpus_total=4, gpus_alloc=4,
                          partitions=("gpu",)) for n in NODES)
    notes: list[str] = []
    for k in range(3):
        t = NOW + 100 * k
        step(r, session, t, [grow(4)], job())
        upsert_jobs(session, [job()], now=t + 31)
        session.commit()
        notes = r.step(session, [grow(4)], ClusterSnapshot(time=t + 31, jobs=(job(),),
                                                           nodes=busy),
                       limits=LIMITS, assoc=None, cycle_id=2, decision_id=None).notes()
    assert [c.split(" ")[0] for c in fake.commands()] == ["scancel", "scancel"]
    assert any("signalled 2 times in the last hour (max_per_hour 2)" in n for n in
               step(r, session, NOW + 400, [grow(4)], job())), notes


def test_without_grace_the_job_is_requeued_at_once_and_the_cap_holds(session: Session) -> None:
    fake = FakeSlurm()
    r = resizer(fake, grace_s=0.0, max_per_hour=1)
    step(r, session, NOW, [grow(2)], job())
    assert fake.commands()[0] == "scontrol requeuehold 1"
    notes = step(r, session, NOW + 60, [grow(4)], job(gpus=2))
    assert ("resize of 1 skipped: restarted 1 times in the last hour (max_per_hour 1, "
            "resizes and preemptions together)") in notes
    assert len(fake.commands()) == 3  # requeuehold, update, release: nothing more


def test_a_job_not_requeued_in_time_is_released_by_a_later_cycle(session: Session) -> None:
    fake = FakeSlurm(states=("RUNNING",))
    r = resizer(fake, grace_s=0.0, wait_pending_s=1.0)
    notes = step(r, session, NOW, [grow(2)], job())
    assert notes == ["resizes: 0 signalled, 0 restarted at a new count, 1 failed"]
    assert held_after_requeue(session) == {JobId("1"): ActionKind.REQUEUE_HOLD}
    held = job(state=JobState.PENDING, gpus=1)  # 22.05: reason "job requeued in held state"
    step(r, session, NOW + 10, [], held)
    assert fake.commands()[-2:] == ["update JobId=1 TresPerNode=gres:gpu:1 StartTime=now+1",
                                    "release 1"]
    assert held_after_requeue(session) == {}


def test_a_new_daemon_releases_a_job_an_interrupted_resize_left_held(session: Session) -> None:
    upsert_jobs(session, [job()], now=NOW)
    session.commit()
    first = resizer(FakeSlurm(states=("RUNNING",)), grace_s=0.0, wait_pending_s=1.0)
    first.step(session, [grow(2)], snap(NOW, job()), limits=LIMITS, assoc=None, cycle_id=1,
               decision_id=None)
    fake = FakeSlurm()
    second = resizer(fake)  # a restarted daemon: nothing in memory
    step(second, session, NOW + 5, [], job(state=JobState.PENDING))
    assert fake.commands() == ["update JobId=1 TresPerNode=gres:gpu:1 StartTime=now+1",
                               "release 1"]


def test_a_refused_release_is_failed_and_retried(session: Session) -> None:
    fake = FakeSlurm()
    fake.fail_on = "release"
    r = resizer(fake, grace_s=0.0)
    notes = step(r, session, NOW, [grow(2)], job())
    assert notes[0].endswith("1 failed")
    assert stored(session)[-1] == (ActionKind.RESIZE_RELEASE, ActionStatus.FAILED)
    fake.fail_on = ""
    step(r, session, NOW + 10, [], job(state=JobState.PENDING, gpus=2))
    assert stored(session)[-1] == (ActionKind.RESIZE_RELEASE, ActionStatus.DONE)


def test_after_the_grace_the_resize_is_judged_again(session: Session) -> None:
    fake = FakeSlurm()
    r = resizer(fake, grace_s=30.0)
    step(r, session, NOW, [grow(4)], job())
    # Meanwhile the free GPUs went to other jobs: the requeue is not made.
    upsert_jobs(session, [job()], now=NOW + 31)
    session.commit()
    busy = ClusterSnapshot(time=NOW + 31, jobs=(job(),), nodes=tuple(
        NodeView(name=n.name, state=NodeState.ALLOCATED, gpus_total=4, gpus_alloc=4,
                 partitions=("gpu",)) for n in NODES))
    notes = r.step(session, [grow(4)], busy, limits=LIMITS, assoc=None, cycle_id=2,
                   decision_id=None).notes()
    assert notes == ["resize of 1 skipped: resize to 4 GPUs dropped after the signal: does not "
                     "fit now: 4 GPUs need 1 node(s) with 4 GPUs free or its own"]
    assert [c.split(" ")[0] for c in fake.commands()] == ["scancel"]


def test_resizing_off_records_why(session: Session) -> None:
    fake = FakeSlurm()
    r = resizer(fake, enabled=False)
    notes = step(r, session, NOW, [grow(2)], job())
    assert notes == ["resize of 1 skipped: resizing is off ([resize] enabled = false)"]
    assert fake.commands() == []


def test_a_refused_update_is_not_followed_by_the_release(session: Session) -> None:
    """scontrol reading stdin goes on after a refused line: a release after a refused update
    would start the job without StartTime=now+1 (the credential race) or its new request."""
    fake = FakeSlurm()
    fake.fail_on = "StartTime=now+1"
    r = resizer(fake, grace_s=0.0)
    notes = step(r, session, NOW, [grow(2)], job())
    assert notes == ["resizes: 0 signalled, 0 restarted at a new count, 1 failed"]
    assert fake.commands() == ["scontrol requeuehold 1",
                               "update JobId=1 TresPerNode=gres:gpu:2 StartTime=now+1"]
