"""upsert_jobs and record_node_samples: what is written, what is an event, what is kept."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from slurm_rl.core import (
    GpuSample,
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
from slurm_rl.db.kinds import EventKind
from slurm_rl.db.models import GpuSampleRow, Job, JobEvent, JobProgress, Node
from slurm_rl.db.repo import (
    intent_json,
    record_node_samples,
    upsert_jobs,
)

INTENT = Intent(deadline=2_000_000_000.0, hard=True, service_class=ServiceClass.CRITICAL,
                gpus_min=2, gpus_max=8, elastic=True, total_steps=1000, model="bert",
                batch_size=64)


def count_rows(session: Session, model: type[Any]) -> int:
    return int(session.execute(select(func.count()).select_from(model)).scalar_one())


def job(i: int, **kw: object) -> JobView:
    base: dict[str, object] = dict(
        id=JobId(str(i)), user="ana", name=f"j{i}", partition="gpu", state=JobState.PENDING,
        submit_time=1000.0 + i, time_limit_s=3600.0, gpus=4, nodes=1,
    )
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def total_changes(session: Session) -> int:
    return int(session.execute(text("SELECT total_changes()")).scalar_one())


def events(session: Session, job_id: str) -> list[tuple[EventKind, str | None, str | None]]:
    rows = session.execute(
        select(JobEvent.kind, JobEvent.old, JobEvent.new)
        .where(JobEvent.job_id == job_id).order_by(JobEvent.id)
    )
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_new_jobs_are_inserted_with_a_first_seen_event(session: Session) -> None:
    result = upsert_jobs(session, [job(1), job(2, intent=INTENT)], now=50.0)
    session.commit()
    assert result.new == ("1", "2")
    assert result.state_changes == () and result.written == 2
    row = session.get(Job, "2", populate_existing=True)
    assert row is not None
    assert (row.state, row.first_seen_at, row.state_changed_at) == (JobState.PENDING, 50.0, 50.0)
    assert (row.deadline, row.hard, row.service_class, row.gpus_min, row.gpus_max) == (
        2_000_000_000.0, True, ServiceClass.CRITICAL, 2, 8)
    assert (row.elastic, row.total_steps, row.model, row.batch_size) == (True, 1000, "bert", 64)
    assert row.intent_seen_at == 50.0 and row.intent_last == intent_json(INTENT)
    plain = session.get(Job, "1", populate_existing=True)
    assert plain is not None and plain.intent_seen_at is None and plain.deadline is None
    assert events(session, "1") == [(EventKind.STATE, None, "PENDING")]


def test_an_unchanged_snapshot_writes_nothing(session: Session) -> None:
    snapshot = [job(i, intent=INTENT if i % 2 else None,
                    progress=Progress(steps_done=i, steps_total=100, rate=1.5, updated_at=9.0))
                for i in range(2000)]
    upsert_jobs(session, snapshot, now=1.0, user_comments={JobId("3"): "hello"})
    session.commit()
    before = total_changes(session)
    again = [dataclasses.replace(j) for j in snapshot]  # equal, not identical
    result = upsert_jobs(session, again, now=2.0)
    assert total_changes(session) == before  # same transaction, so the same connection
    session.commit()
    assert (result.new, result.state_changes, result.written, result.progress_written) == (
        (), (), 0, 0)
    assert dict(result.intent_overrides) == {}
    assert count_rows(session, JobEvent) == 2000


def test_a_state_change_updates_the_row_and_records_an_event(session: Session) -> None:
    upsert_jobs(session, [job(1), job(2)], now=1.0)
    result = upsert_jobs(
        session, [job(1, state=JobState.RUNNING, start_time=5.0), job(2)], now=7.0
    )
    session.commit()
    assert [(c.job_id, c.old, c.new) for c in result.state_changes] == [
        ("1", JobState.PENDING, JobState.RUNNING)]
    assert result.written == 1 and result.new == ()
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None
    assert (row.state, row.start_time, row.state_changed_at, row.first_seen_at) == (
        JobState.RUNNING, 5.0, 7.0, 1.0)
    assert events(session, "1")[-1] == (EventKind.STATE, "PENDING", "RUNNING")


def test_other_changes_update_without_a_state_event(session: Session) -> None:
    upsert_jobs(session, [job(1)], now=1.0)
    result = upsert_jobs(session, [job(1, gpus=8, name="renamed")], now=2.0)
    session.commit()
    assert result.written == 1 and result.state_changes == ()
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and (row.gpus, row.name, row.state_changed_at) == (8, "renamed", 1.0)
    assert len(events(session, "1")) == 1


def test_the_first_intent_is_kept_and_an_edit_is_an_event(session: Session) -> None:
    upsert_jobs(session, [job(1, intent=INTENT)], now=1.0)
    edited = dataclasses.replace(INTENT, service_class=ServiceClass.CRITICAL, deadline=1.0,
                                 gpus_max=64)
    result = upsert_jobs(session, [job(1, intent=edited)], now=2.0)
    session.commit()
    assert result.intent_changes == ("1",)
    assert result.intent_overrides == {"1": INTENT}
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None
    assert (row.deadline, row.gpus_max, row.intent_seen_at) == (2_000_000_000.0, 8, 1.0)
    assert row.intent_edited and row.intent_last == intent_json(edited)
    assert events(session, "1")[-1] == (
        EventKind.INTENT_CHANGED, intent_json(INTENT), intent_json(edited))

    # The edit persists: no new event, but the daemon is still told the recorded intent.
    before = total_changes(session)
    result = upsert_jobs(session, [job(1, intent=edited)], now=3.0)
    assert total_changes(session) == before
    assert result.intent_changes == () and result.intent_overrides == {"1": INTENT}

    # Reverting the edit is an event too, and the override goes away.
    result = upsert_jobs(session, [job(1, intent=INTENT)], now=4.0)
    session.commit()
    assert result.intent_changes == ("1",) and dict(result.intent_overrides) == {}
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and not row.intent_edited
    assert [e[0] for e in events(session, "1")] == [
        EventKind.STATE, EventKind.INTENT_CHANGED, EventKind.INTENT_CHANGED]


def test_a_removed_intent_is_an_event_and_the_recorded_one_stays(session: Session) -> None:
    upsert_jobs(session, [job(1, intent=INTENT)], now=1.0)
    result = upsert_jobs(session, [job(1, intent=None)], now=2.0)
    session.commit()
    assert result.intent_overrides == {"1": INTENT}
    assert events(session, "1")[-1] == (EventKind.INTENT_CHANGED, intent_json(INTENT), None)
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and row.deadline == 2_000_000_000.0 and row.intent_last is None


def test_an_intent_added_later_is_not_believed(session: Session) -> None:
    # docs/security.md, "one rule": a job first seen without an intent stays without one.
    upsert_jobs(session, [job(1)], now=1.0)
    result = upsert_jobs(session, [job(1, intent=INTENT)], now=2.0)
    session.commit()
    assert result.intent_changes == ("1",) and dict(result.intent_overrides) == {"1": None}
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and row.intent_seen_at is None and row.model is None
    assert events(session, "1")[-2:] == [
        (EventKind.INTENT_CHANGED, None, intent_json(INTENT)),
        (EventKind.INTENT_LATE, None, intent_json(INTENT))]
    # ...unchanged next cycle: still not believed, no new event.
    result = upsert_jobs(session, [job(1, intent=INTENT)], now=3.0)
    session.commit()
    assert dict(result.intent_overrides) == {"1": None}
    assert len(events(session, "1")) == 3
    # an edit of the late tag is still not believed
    other = dataclasses.replace(INTENT, model="gpt2")
    result = upsert_jobs(session, [job(1, intent=other)], now=4.0)
    session.commit()
    assert dict(result.intent_overrides) == {"1": None}
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and row.model is None and row.intent_seen_at is None


def test_user_comments_are_stored_and_kept_when_not_given(session: Session) -> None:
    upsert_jobs(session, [job(1)], now=1.0, user_comments={JobId("1"): "my run"})
    result = upsert_jobs(session, [job(1)], now=2.0)  # no comments this time: keep
    assert result.written == 0
    upsert_jobs(session, [job(1)], now=3.0, user_comments={JobId("1"): "edited"})
    session.commit()
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and row.user_comment == "edited"


def test_progress_is_written_when_it_changes(session: Session) -> None:
    p1 = Progress(steps_done=10, steps_total=100, rate=2.0, updated_at=5.0)
    assert upsert_jobs(session, [job(1, progress=p1)], now=1.0).progress_written == 1
    assert upsert_jobs(session, [job(1, progress=p1)], now=2.0).progress_written == 0
    p2 = dataclasses.replace(p1, steps_done=20, updated_at=6.0)
    assert upsert_jobs(session, [job(1, progress=p2)], now=3.0).progress_written == 1
    session.commit()
    row = session.get(JobProgress, "1", populate_existing=True)
    assert row is not None
    assert (row.steps_done, row.steps_total, row.rate, row.reported_at, row.recorded_at) == (
        20, 100, 2.0, 6.0, 3.0)


def test_a_snapshot_with_a_duplicate_id_is_refused(session: Session) -> None:
    with pytest.raises(ValueError, match="twice"):
        upsert_jobs(session, [job(1), job(1)], now=1.0)


def node(name: str, at: float | None, util: float = 50.0) -> NodeView:
    samples = tuple(GpuSample(index=i, util_pct=util, mem_used_mib=100.0, mem_total_mib=80_000.0,
                              power_w=300.0, temp_c=60.0) for i in range(4))
    return NodeView(name=NodeName(name), state=NodeState.MIXED, gpus_total=4, gpus_alloc=2,
                    samples=samples if at is not None else (), sampled_at=at)


def test_node_samples_are_stored_once_per_agent_reading(session: Session) -> None:
    assert record_node_samples(session, [node("node1", 100.0), node("node2", None)],
                               now=101.0) == 4
    assert record_node_samples(session, [node("node1", 100.0), node("node2", None)],
                               now=102.0) == 0
    assert record_node_samples(session, [node("node1", 110.0, util=90.0)], now=111.0) == 4
    session.commit()
    n1 = session.get(Node, "node1", populate_existing=True)
    assert n1 is not None
    assert (n1.state, n1.gpus_total, n1.gpus_alloc, n1.first_seen_at, n1.last_seen_at,
            n1.last_sample_at) == (NodeState.MIXED, 4, 2, 101.0, 111.0, 110.0)
    n2 = session.get(Node, "node2", populate_existing=True)
    assert n2 is not None and n2.last_sample_at is None and n2.last_seen_at == 102.0
    utils = session.execute(
        select(GpuSampleRow.at, GpuSampleRow.util_pct).where(GpuSampleRow.gpu_index == 0)
        .order_by(GpuSampleRow.at)
    ).all()
    assert [tuple(u) for u in utils] == [(100.0, 50.0), (110.0, 90.0)]
    assert count_rows(session, GpuSampleRow) == 8


def test_the_inference_model_is_recorded_and_an_added_one_is_an_edit(session: Session) -> None:
    marked = Intent(service_class=ServiceClass.BESTEFFORT, inference="mobilenet")
    upsert_jobs(session, [job(1, intent=marked), job(2, intent=INTENT)], now=50.0)
    session.commit()
    row = session.get(Job, "1", populate_existing=True)
    assert row is not None and row.inference == "mobilenet"
    assert row.intent_last == intent_json(marked) and '"inference":"mobilenet"' in row.intent_last
    # a job recorded without one: the same intent next cycle is no edit (the JSON without the
    # key is what rows written before migration 0003 hold) ...
    again = upsert_jobs(session, [job(1, intent=marked), job(2, intent=INTENT)], now=60.0)
    assert again.intent_changes == ()
    # ... while adding an inference model later is an edit, and the recorded intent is kept
    later = upsert_jobs(session, [job(2, intent=dataclasses.replace(INTENT, inference="gpt"))],
                        now=70.0)
    session.commit()
    assert later.intent_changes == (JobId("2"),)
    assert later.intent_overrides[JobId("2")] == INTENT
    kept = session.get(Job, "2", populate_existing=True)
    assert kept is not None and kept.inference is None


def test_a_reused_job_id_is_a_new_job_with_only_its_own_intent(session: Session) -> None:
    # A slurmctld started with fresh state numbers jobs from 1 again (and ids wrap at
    # MaxJobId): another user's job 415 must not inherit the old job 415's intent or progress.
    old_intent = dataclasses.replace(INTENT, deadline=1_900_000_000.0, gpus_min=1, gpus_max=8)
    progress = Progress(steps_done=900, steps_total=1000, rate=5.0, updated_at=50.0)
    upsert_jobs(session, [job(415, intent=old_intent, state=JobState.RUNNING,
                              start_time=1500.0, progress=progress)], now=1.0)
    upsert_jobs(session, [job(415, intent=old_intent, state=JobState.COMPLETED,
                              start_time=1500.0, end_time=1900.0)], now=2.0)
    session.commit()

    own = Intent(deadline=2_100_000_000.0, gpus_min=2, gpus_max=4,
                 service_class=ServiceClass.STANDARD)
    new = job(415, user="bo", name="other", submit_time=5000.0, intent=own)
    result = upsert_jobs(session, [new], now=10.0)
    session.commit()
    assert result.new == ("415",)
    assert dict(result.intent_overrides) == {} and result.intent_changes == ()
    assert result.state_changes == ()
    row = session.get(Job, "415", populate_existing=True)
    assert row is not None
    assert (row.user, row.submit_time, row.first_seen_at, row.intent_seen_at) == (
        "bo", 5000.0, 10.0, 10.0)
    assert (row.deadline, row.gpus_min, row.gpus_max, row.service_class) == (
        2_100_000_000.0, 2, 4, ServiceClass.STANDARD)
    assert not row.intent_edited and row.intent_last == intent_json(own)
    assert session.get(JobProgress, "415", populate_existing=True) is None
    assert events(session, "415")[-1] == (EventKind.STATE, None, JobState.PENDING.value)

    # From then on it is an ordinary job: an edit of its comment is not believed.
    edited = dataclasses.replace(own, gpus_max=64)
    result = upsert_jobs(session, [dataclasses.replace(new, intent=edited)], now=11.0)
    assert result.intent_overrides == {"415": own}


def test_a_reused_job_id_without_an_intent_has_none(session: Session) -> None:
    upsert_jobs(session, [job(415, intent=INTENT)], now=1.0)
    result = upsert_jobs(session, [job(415, submit_time=5000.0)], now=2.0)
    session.commit()
    assert result.new == ("415",) and dict(result.intent_overrides) == {}
    row = session.get(Job, "415", populate_existing=True)
    assert row is not None
    assert (row.intent_seen_at, row.deadline, row.gpus_max, row.service_class) == (
        None, None, None, None)
    # ...and a tag it adds later is not believed, as for any job first seen without one.
    result = upsert_jobs(session, [job(415, submit_time=5000.0, intent=INTENT)], now=3.0)
    assert dict(result.intent_overrides) == {"415": None}
