"""Retention: the daemon deletes what is older than `[database] retention_days`, a little every
cycle, so the file stops growing under churn (SQLite reuses the freed pages).

Each call deletes at most `batch` rows per table, oldest first, through the indexed time
columns, so a call with nothing to delete is a handful of empty index range scans. What is kept
even when old, because the daemon still reads it:

- a job's latest decision entry while the job is not finished (`slurm-rl explain` shows it);
- an action that still covers a job that is not finished (the SiteFactor Slurm has is known
  from the latest DONE action), and every action still PLANNED (crash reconciliation);
- a job that is not finished, or that an entry or action kept above still names.

Events, GPU samples and quarantined records go by time alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, cast

from sqlalchemy import Table, and_, delete, exists, or_, select
from sqlalchemy.orm import Session

from slurm_rl.core import JobState

from .kinds import ActionStatus
from .models import (
    Action,
    ActionJob,
    DecisionEntry,
    DecisionRow,
    GpuSampleRow,
    Job,
    JobEvent,
    QuarantinedRecord,
)

_jobs = cast(Table, Job.__table__)
_events = cast(Table, JobEvent.__table__)
_samples = cast(Table, GpuSampleRow.__table__)
_decisions = cast(Table, DecisionRow.__table__)
_entries = cast(Table, DecisionEntry.__table__)
_actions = cast(Table, Action.__table__)
_links = cast(Table, ActionJob.__table__)
_quarantine = cast(Table, QuarantinedRecord.__table__)

_FINISHED = [s for s in JobState if s.is_finished]
_LIVE = [s for s in JobState if not s.is_finished]
DAY_S = 86400.0


@dataclass(frozen=True, kw_only=True)
class PruneReport:
    """Rows deleted by one `prune` call, per table (cascaded rows not counted)."""

    decision_entries: int = 0
    decisions: int = 0
    actions: int = 0
    gpu_samples: int = 0
    job_events: int = 0
    quarantined_records: int = 0
    jobs: int = 0
    backlog: bool = False
    """Some table had a full batch to delete: more is left for the next call."""

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self) if f.name != "backlog")

    def line(self) -> str:
        parts = [f"{getattr(self, f.name)} {f.name}" for f in fields(self)
                 if f.name != "backlog" and getattr(self, f.name)]
        more = " (more left)" if self.backlog else ""
        return "pruned " + (", ".join(parts) if parts else "nothing") + more


def _delete_ids(session: Session, table: Table, key: Any, chosen: Any) -> int:
    """DELETE FROM table WHERE key IN (chosen); SQLite has no DELETE ... LIMIT by default."""
    ids = [r[0] for r in session.execute(chosen)]
    if not ids:
        return 0
    session.execute(delete(table).where(key.in_(ids)))
    return len(ids)


def prune(session: Session, *, now: float, retention_days: float, batch: int) -> PruneReport:
    """Delete up to `batch` rows per table older than `retention_days` before `now`, and
    COMMIT. Call once per daemon cycle (cheap when there is nothing to delete)."""
    if batch < 1:
        raise ValueError(f"prune: batch must be >= 1 (got {batch})")
    cutoff = now - retention_days * DAY_S
    newer_entry = _entries.alias("newer")
    # (decision_id IN the old decisions, not a join: SQLite then walks the decisions' `at`
    # index instead of scanning every entry; tests/db/test_db_retention.py reads the plans)
    entries = _delete_ids(session, _entries, _entries.c.id, (
        select(_entries.c.id)
        .select_from(_entries.join(_jobs, _jobs.c.job_id == _entries.c.job_id))
        .where(_entries.c.decision_id.in_(select(_decisions.c.id)
                                          .where(_decisions.c.at < cutoff)),
               or_(_jobs.c.state.in_(_FINISHED),
                   exists().where(newer_entry.c.job_id == _entries.c.job_id,
                                  newer_entry.c.decision_id > _entries.c.decision_id)))
        .limit(batch)))
    decisions = _delete_ids(session, _decisions, _decisions.c.id, (
        select(_decisions.c.id)
        .where(_decisions.c.at < cutoff,
               ~exists().where(_entries.c.decision_id == _decisions.c.id))
        .order_by(_decisions.c.at).limit(batch)))
    live_link = (select(_links.c.action_id)
                 .join(_jobs, _jobs.c.job_id == _links.c.job_id)
                 .where(_links.c.action_id == _actions.c.id, _jobs.c.state.in_(_LIVE)))
    actions = _delete_ids(session, _actions, _actions.c.id, (
        select(_actions.c.id)
        .where(_actions.c.finished_at < cutoff, _actions.c.status != ActionStatus.PLANNED,
               ~live_link.exists())
        .order_by(_actions.c.finished_at).limit(batch)))
    samples = _delete_ids(session, _samples, _samples.c.id, (
        select(_samples.c.id).where(_samples.c.at < cutoff).order_by(_samples.c.at)
        .limit(batch)))
    events = _delete_ids(session, _events, _events.c.id, (
        select(_events.c.id).where(_events.c.at < cutoff).order_by(_events.c.at).limit(batch)))
    quarantined = _delete_ids(session, _quarantine, _quarantine.c.id, (
        select(_quarantine.c.id).where(_quarantine.c.last_seen < cutoff)
        .order_by(_quarantine.c.last_seen).limit(batch)))
    jobs = _delete_ids(session, _jobs, _jobs.c.job_id, (
        select(_jobs.c.job_id)
        .where(and_(_jobs.c.state_changed_at < cutoff, _jobs.c.state.in_(_FINISHED)),
               ~exists().where(_entries.c.job_id == _jobs.c.job_id),
               ~exists().where(_links.c.job_id == _jobs.c.job_id))
        .order_by(_jobs.c.state_changed_at).limit(batch)))
    session.commit()
    counts = (entries, decisions, actions, samples, events, quarantined, jobs)
    return PruneReport(
        decision_entries=entries, decisions=decisions, actions=actions, gpu_samples=samples,
        job_events=events, quarantined_records=quarantined, jobs=jobs,
        backlog=any(c >= batch for c in counts))
