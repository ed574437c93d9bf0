"""What the daemon reads and writes each cycle: jobs, progress, nodes and GPU samples.

Written for 10,000 jobs a cycle: the stored rows are read in a few large SELECTs, compared in
Python, and only new or changed rows are written, with one executemany
`INSERT ... ON CONFLICT DO UPDATE` per table. A cycle in which nothing changed writes nothing.

These functions write in the caller's transaction and do not commit; the caller commits once
per cycle phase. The action log (`actions.py`) is the exception: it commits, because it must
reach the disk before and after each command. Core statements bypass the ORM identity map:
reload ORM objects (`populate_existing=True`) after calling these.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import Table, case, select
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.orm import Session

from slurm_rl.core import Intent, JobId, JobState, JobView, NodeView

from .bounds import (
    bounded_job,
    bounded_progress,
    storable_count,
    storable_real,
    storable_text,
    storable_time,
)
from .kinds import EventKind
from .models import GpuSampleRow, Job, JobEvent, JobProgress, Node

CHUNK = 5000
"""Ids per `IN (...)` query; SQLite allows 32,766 bound parameters."""

_jobs = cast(Table, Job.__table__)
_events = cast(Table, JobEvent.__table__)
_progress = cast(Table, JobProgress.__table__)
_nodes = cast(Table, Node.__table__)
_samples = cast(Table, GpuSampleRow.__table__)

# Columns compared with the snapshot to decide whether a job's row changed, in this order.
_TRACKED = (
    "user", "name", "partition", "state", "submit_time", "start_time", "end_time", "gpus",
    "nodes", "time_limit_s", "managed", "user_comment", "intent_last",
)
_INTENT = tuple(f.name for f in fields(Intent))
"""The job row's intent columns: named as Intent's fields (a test checks models.Job has them)."""
_INTENT_JSON_KEYS = tuple({"service_class": "class"}.get(name, name) for name in _INTENT)
"""intent_json's keys, in Intent's field order: its field names but "class" (the stored
`intent_last` values compare as text, so these may never change)."""
_INTENT_JSON_LATER = frozenset({"inference"})
"""Fields added after rows were first written (migration 0003 on): intent_json leaves them out
while they are None, so an older row's `intent_last` still equals today's text."""
_STATE = _TRACKED.index("state")
_SUBMIT = _TRACKED.index("submit_time")
_COMMENT = _TRACKED.index("user_comment")
_INTENT_LAST = _TRACKED.index("intent_last")


@dataclass(frozen=True, kw_only=True)
class StateChange:
    job_id: JobId
    old: JobState
    new: JobState


@dataclass(frozen=True, kw_only=True)
class UpsertResult:
    """What `upsert_jobs` found."""

    new: tuple[JobId, ...] = ()
    state_changes: tuple[StateChange, ...] = ()
    intent_changes: tuple[JobId, ...] = ()
    """Jobs whose comment now carries a different intent than last cycle (an event each)."""
    written: int = 0
    """Job rows inserted or updated."""
    progress_written: int = 0
    intent_overrides: Mapping[JobId, Intent | None] = field(default_factory=dict)
    """The recorded (first-seen) intent of every job whose comment now says something else
    (None: the job was first seen without one, and one was added later). The daemon must
    decide with these, never with the edited or late intent."""
    dropped: tuple[tuple[JobId, str], ...] = ()
    """(job, field) of every value that could not be stored (out of SQLite's range, not finite,
    a time past year 9999): NULLed, or 0 in a NOT NULL column. The rest of the row is stored."""


@functools.lru_cache(maxsize=1 << 16)
def intent_json(intent: Intent | None) -> str | None:
    """Canonical JSON of an intent (what `intent_last` and intent events hold).

    Cached: a job's intent is decoded afresh every poll but is almost always equal to the last.
    """
    if intent is None:
        return None
    out = {key: _json_value(getattr(intent, name))
           for name, key in zip(_INTENT, _INTENT_JSON_KEYS, strict=True)
           if name not in _INTENT_JSON_LATER or getattr(intent, name) is not None}
    return json.dumps(out, separators=(",", ":"))


def _json_value(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


def _intent_columns(intent: Intent | None) -> dict[str, Any]:
    if intent is None:
        return dict.fromkeys(_INTENT)
    return {name: getattr(intent, name) for name in _INTENT}


def _tracked(
    job: JobView, stored_comment: str | None, user_comments: Mapping[JobId, str] | None
) -> tuple[Any, ...]:
    """The values of `_TRACKED` a snapshot job gives (its comment: given, else stored)."""
    if user_comments is not None and job.id in user_comments:
        comment: str | None = user_comments[job.id]
    else:
        comment = stored_comment
    return (
        job.user, job.name, job.partition, job.state, job.submit_time, job.start_time,
        job.end_time, job.gpus, job.nodes, job.time_limit_s, job.managed, comment,
        intent_json(job.intent),
    )


def _recorded_intents(session: Session, ids: Sequence[str]) -> dict[str, Intent]:
    found: dict[str, Intent] = {}
    cols = [_jobs.c[c] for c in _INTENT]
    for chunk in _chunks(ids):
        query = select(_jobs.c.job_id, *cols).where(_jobs.c.job_id.in_(chunk))
        for row in session.execute(query):
            try:
                found[row[0]] = _intent_from(row[1:])
            except ValueError:
                continue  # a row out of today's bounds (older release): no believed intent
    return found


def _intent_from(values: Sequence[Any]) -> Intent:
    """The Intent of a row's intent columns (NULL: the field's default)."""
    stored = {name: v for name, v in zip(_INTENT, values, strict=True) if v is not None}
    return Intent(**stored)


_T = TypeVar("_T")


def _chunks(items: Sequence[_T], size: int = CHUNK) -> Iterator[Sequence[_T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _upsert_jobs_stmt() -> Any:
    stmt = insert(_jobs)
    ex = stmt.excluded
    first_seen = _jobs.c.intent_seen_at.is_(None)
    # The recorded intent is written once: the CASE keeps it even if a caller passes another.
    set_: dict[str, Any] = {c: ex[c] for c in _TRACKED}
    set_["state_changed_at"] = ex.state_changed_at
    set_["intent_edited"] = ex.intent_edited
    set_["intent_seen_at"] = case((first_seen, ex.intent_seen_at), else_=_jobs.c.intent_seen_at)
    for c in _INTENT:
        set_[c] = case((first_seen, ex[c]), else_=_jobs.c[c])
    return stmt.on_conflict_do_update(index_elements=[_jobs.c.job_id], set_=set_)


class _StoredJob(NamedTuple):
    """A job's row as the last cycle left it (a NamedTuple: one is read per changed job)."""

    tracked: tuple[Any, ...]
    """The values of `_TRACKED`."""
    state_changed_at: float
    intent_seen_at: float | None
    intent_edited: bool


def upsert_jobs(
    session: Session,
    jobs: Sequence[JobView],
    *,
    now: float,
    user_comments: Mapping[JobId, str] | None = None,
) -> UpsertResult:
    """Record a snapshot's jobs: insert new ones, update changed ones, log events.

    A new job gets a STATE event (old NULL); so does a job whose id is stored with another
    submit time (a reused id, or a requeue): it is another submission, recorded afresh with
    only its own intent and progress. A state change gets a STATE event. The first intent
    seen for a job is recorded in its intent columns and kept; a later, different intent in the
    comment gets an INTENT_CHANGED event (once per edit) and shows up in `intent_overrides`.
    `user_comments` (job id → the user's part of the comment) is stored when given; jobs missing
    from it keep their stored comment. Values the database can not hold are dropped for that
    job only (see `UpsertResult.dropped`); the intents compared and recorded are the bounded ones.
    """
    jobs, dropped = _bounded_jobs(jobs)
    if user_comments is not None:
        user_comments = {k: storable_text(v) for k, v in user_comments.items()}
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("upsert_jobs: the snapshot lists a job id twice")
    stored = _stored_jobs(session, ids)
    # A job is its id and its submit time: Slurm reuses ids (a slurmctld started with fresh
    # state numbers from 1 again; ids wrap at MaxJobId), and a requeue resets the submit time
    # ("so the restarted job looks like a new job"). Either way the row's intent, progress and
    # first sighting belong to another submission: they are cleared, and the job is new.
    resubmitted = [j.id for j in jobs if (old := stored.get(j.id)) is not None
                   and old.tracked[_SUBMIT] != j.submit_time]
    if resubmitted:
        _forget_submissions(session, resubmitted, now)
        for job_id in resubmitted:
            del stored[job_id]
    snapshot = [
        _tracked(j, None if (old := stored.get(j.id)) is None else old.tracked[_COMMENT],
                 user_comments)
        for j in jobs
    ]
    # Recorded intents are read only for the few jobs that need them: edited or changed ones.
    need = [
        j.id for j, tracked in zip(jobs, snapshot, strict=True)
        if (old := stored.get(j.id)) is not None and old.intent_seen_at is not None
        and (old.intent_edited or old.tracked != tracked)
    ]
    writes = _JobWrites(now, _recorded_intents(session, need))
    for job, tracked in zip(jobs, snapshot, strict=True):
        old = stored.get(job.id)
        if old is None:
            writes.new_job(job, tracked)
        else:
            writes.known_job(job, tracked, old)
    if writes.rows:
        session.execute(_upsert_jobs_stmt(), writes.rows)
    if writes.events:
        session.execute(_events.insert(), writes.events)
    progress_written = _upsert_progress(session, jobs, now=now, dropped=dropped)
    return UpsertResult(
        new=tuple(writes.new), state_changes=tuple(writes.changes),
        intent_changes=tuple(writes.intent_changes), written=len(writes.rows),
        progress_written=progress_written, intent_overrides=writes.overrides,
        dropped=tuple(dropped),
    )


def _forget_submissions(session: Session, ids: Sequence[str], now: float) -> None:
    """Clear what the rows of `ids` hold of an earlier submission (its recorded intent, first
    sighting and progress), so that the upsert records the new one as first seen. The row's
    events, decisions and actions stay: they are history, told apart by time."""
    reset: dict[str, Any] = dict.fromkeys((*_INTENT, "intent_seen_at", "intent_last"))
    reset |= {"intent_edited": False, "first_seen_at": now}
    for chunk in _chunks(ids):
        session.execute(_jobs.update().where(_jobs.c.job_id.in_(chunk)).values(reset))
        session.execute(_progress.delete().where(_progress.c.job_id.in_(chunk)))


def _stored_jobs(session: Session, ids: Sequence[str]) -> dict[str, _StoredJob]:
    cols = [_jobs.c[c] for c in (*_TRACKED, "state_changed_at", "intent_seen_at", "intent_edited")]
    n = len(_TRACKED)
    stored: dict[str, _StoredJob] = {}
    for chunk in _chunks(ids):
        for row in session.execute(select(_jobs.c.job_id, *cols).where(_jobs.c.job_id.in_(chunk))):
            stored[row[0]] = _StoredJob(tuple(row[1:n + 1]), *row[n + 1:])
    return stored


class _JobWrites:
    """The rows, events and findings of one `upsert_jobs` call, job by job."""

    def __init__(self, now: float, recorded_intents: Mapping[str, Intent]) -> None:
        self.now = now
        self.recorded_intents = recorded_intents
        self.rows: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.new: list[JobId] = []
        self.changes: list[StateChange] = []
        self.intent_changes: list[JobId] = []
        self.overrides: dict[JobId, Intent | None] = {}

    def _event(self, job: JobView, kind: EventKind, old: str | None, new: str | None) -> None:
        self.events.append({"job_id": job.id, "at": self.now, "kind": kind, "old": old,
                            "new": new})

    def new_job(self, job: JobView, tracked: tuple[Any, ...]) -> None:
        now = self.now
        self.new.append(job.id)
        self._event(job, EventKind.STATE, None, job.state.value)
        self.rows.append({
            "job_id": job.id, **dict(zip(_TRACKED, tracked, strict=True)),
            "state_changed_at": now, "first_seen_at": now,
            "intent_seen_at": now if job.intent is not None else None,
            "intent_edited": False, **_intent_columns(job.intent),
        })

    def known_job(self, job: JobView, tracked: tuple[Any, ...], old: _StoredJob) -> None:
        if old.tracked == tracked:
            if old.intent_edited:
                self.overrides[job.id] = self.recorded_intents.get(job.id)
            return
        state_changed_at = old.state_changed_at
        old_state, old_last = old.tracked[_STATE], old.tracked[_INTENT_LAST]
        last = tracked[_INTENT_LAST]
        if old_state != job.state:
            self.changes.append(StateChange(job_id=job.id, old=old_state, new=job.state))
            self._event(job, EventKind.STATE, old_state.value, job.state.value)
            state_changed_at = self.now
        if old_last != last:
            self.intent_changes.append(job.id)
            self._event(job, EventKind.INTENT_CHANGED, old_last, last)
        if old.intent_seen_at is None:
            # First seen without an intent: one that shows up later is not believed
            # (docs/security.md, "one rule"); the job stays as it was first seen.
            recorded = None
            if job.intent is not None and old_last != last:
                self._event(job, EventKind.INTENT_LATE, old_last, last)
        else:
            recorded = self.recorded_intents.get(job.id)
        edited = job.intent != recorded
        if edited:
            self.overrides[job.id] = recorded
        self.rows.append({
            "job_id": job.id, **dict(zip(_TRACKED, tracked, strict=True)),
            "state_changed_at": state_changed_at, "first_seen_at": self.now,
            "intent_seen_at": old.intent_seen_at, "intent_edited": edited,
            **_intent_columns(recorded),
        })


def _bounded_jobs(jobs: Sequence[JobView]) -> tuple[list[JobView], list[tuple[JobId, str]]]:
    out: list[JobView] = []
    dropped: list[tuple[JobId, str]] = []
    for job in jobs:
        safe, fields = bounded_job(job)
        out.append(safe)
        dropped.extend((job.id, f) for f in fields)
    return out, dropped


def _upsert_progress(session: Session, jobs: Sequence[JobView], *, now: float,
                     dropped: list[tuple[JobId, str]]) -> int:
    reporting = [j for j in jobs if j.progress is not None]
    if not reporting:
        return 0
    cols = (_progress.c.steps_done, _progress.c.steps_total, _progress.c.rate,
            _progress.c.reported_at)
    stored: dict[str, tuple[Any, ...]] = {}
    for chunk in _chunks([j.id for j in reporting]):
        query = select(_progress.c.job_id, *cols).where(_progress.c.job_id.in_(chunk))
        for row in session.execute(query):
            stored[row[0]] = tuple(row[1:])
    rows = []
    for job in reporting:
        assert job.progress is not None
        bounded, fields = bounded_progress(job.progress)
        dropped.extend((job.id, f"progress.{f}") for f in fields)
        if bounded is None:
            continue
        values = (bounded["steps_done"], bounded["steps_total"], bounded["rate"],
                  bounded["reported_at"])
        if stored.get(job.id) != values:
            rows.append({"job_id": job.id, **bounded, "recorded_at": now})
    if rows:
        stmt = insert(_progress)
        stmt = stmt.on_conflict_do_update(
            index_elements=[_progress.c.job_id],
            set_={c: stmt.excluded[c] for c in
                  ("steps_done", "steps_total", "rate", "reported_at", "recorded_at")},
        )
        session.execute(stmt, rows)
    return len(rows)


def record_node_samples(session: Session, nodes: Sequence[NodeView], *, now: float) -> int:
    """Upsert the nodes and store GPU samples not stored before; returns samples stored.

    A node's samples are new when its `sampled_at` differs from the last one stored (the
    daemon re-reads the same Extra field until the agent rewrites it).
    """
    if not nodes:
        return 0
    last = {
        r[0]: r[1]
        for r in session.execute(select(_nodes.c.name, _nodes.c.last_sample_at))
    }
    node_rows: list[dict[str, Any]] = []
    sample_rows: list[dict[str, Any]] = []
    for node in nodes:
        # The Extra field is written by an agent on the node: bounded like a user's values.
        sampled_at = storable_time(node.sampled_at)
        fresh = sampled_at is not None and sampled_at != last.get(node.name)
        node_rows.append({
            "name": storable_text(node.name, 1024), "state": node.state,
            "gpus_total": storable_count(node.gpus_total) or 0,
            "gpus_alloc": storable_count(node.gpus_alloc) or 0, "first_seen_at": now,
            "last_seen_at": now,
            "last_sample_at": sampled_at if fresh else last.get(node.name),
        })
        if fresh:
            sample_rows.extend(
                {"node": node_rows[-1]["name"], "at": sampled_at, "gpu_index": s.index,
                 "util_pct": storable_real(s.util_pct),
                 "mem_used_mib": storable_real(s.mem_used_mib),
                 "mem_total_mib": storable_real(s.mem_total_mib),
                 "power_w": storable_real(s.power_w), "temp_c": storable_real(s.temp_c)}
                for s in node.samples if storable_count(s.index) is not None
            )
    stmt = insert(_nodes)
    stmt = stmt.on_conflict_do_update(
        index_elements=[_nodes.c.name],
        set_={c: stmt.excluded[c] for c in
              ("state", "gpus_total", "gpus_alloc", "last_seen_at", "last_sample_at")},
    )
    session.execute(stmt, node_rows)
    if sample_rows:
        ins = insert(_samples).on_conflict_do_nothing(
            index_elements=[_samples.c.node, _samples.c.at, _samples.c.gpu_index]
        )
        session.execute(ins, sample_rows)
    return len(sample_rows)

