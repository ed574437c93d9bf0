"""The database schema as typed SQLAlchemy 2 ORM models.

Times are epoch seconds as floats (REAL), like the core types. Job ids are Slurm's own ids as
text ("1234", "1234_5"); the database holds one cluster. An id alone is not one job: a slurmctld
started with fresh state numbers from 1 again, ids wrap at MaxJobId, and a requeue resets the
submit time. A job is its id and its submit time: `jobs` holds the latest submission of each id
(`repo.upsert_jobs` records one with another submit time as a new job), `claim_records` is
keyed by both. Enums are stored as their lower-case values in
plain string columns (see `kinds.py`). The Alembic migrations create exactly this schema
(0001: the tables; 0002: the daemon holder, quarantined records and retention indexes);
`tests/db` checks that the two agree.
"""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import JSON, Enum, ForeignKey, Index, MetaData, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from slurm_rl.core import JobState, NodeState, ServiceClass

from .kinds import ActionKind, ActionStatus, EntryKind, EventKind

# Named constraints, so that later (batch-mode) migrations on SQLite can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ENUM_LENGTH = 32


def _enum(cls: type[enum.Enum]) -> Enum:
    return Enum(
        cls,
        native_enum=False,
        create_constraint=False,
        length=ENUM_LENGTH,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {
        JobState: _enum(JobState),
        NodeState: _enum(NodeState),
        ServiceClass: _enum(ServiceClass),
        EventKind: _enum(EventKind),
        EntryKind: _enum(EntryKind),
        ActionKind: _enum(ActionKind),
        ActionStatus: _enum(ActionStatus),
        list[str]: JSON(),
    }


class Job(Base):
    """One Slurm job id's latest submission (its `submit_time`), as last seen, with the QoS
    intent first seen in that submission's comment."""

    __tablename__ = "jobs"

    job_id: Mapped[str] = mapped_column(primary_key=True)
    user: Mapped[str]
    name: Mapped[str]
    partition: Mapped[str]
    state: Mapped[JobState]
    state_changed_at: Mapped[float]
    submit_time: Mapped[float]
    first_seen_at: Mapped[float]
    start_time: Mapped[float | None]
    end_time: Mapped[float | None]
    gpus: Mapped[int]
    nodes: Mapped[int]
    time_limit_s: Mapped[float | None]
    managed: Mapped[bool]
    user_comment: Mapped[str | None]

    # The recorded intent: the first one seen, never overwritten (NULL columns: no intent).
    intent_seen_at: Mapped[float | None]
    deadline: Mapped[float | None]
    hard: Mapped[bool | None]
    service_class: Mapped[ServiceClass | None]
    gpus_min: Mapped[int | None]
    gpus_max: Mapped[int | None]
    elastic: Mapped[bool | None]
    total_steps: Mapped[int | None]
    model: Mapped[str | None]
    batch_size: Mapped[int | None]
    inference: Mapped[str | None]  # migration 0003
    # The intent the comment carried last time (canonical JSON) and whether it differs from the
    # recorded one: edits are detected against `intent_last` and logged as events.
    intent_last: Mapped[str | None]
    intent_edited: Mapped[bool] = mapped_column(default=False)

    __table_args__ = (
        Index(None, "state"),
        Index(None, "user", "submit_time"),
        Index(None, "state_changed_at"),  # retention: finished jobs, oldest first
    )


class JobEvent(Base):
    """A state change of a job (old NULL: first seen) or an edit of its intent."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.job_id", ondelete="CASCADE"))
    at: Mapped[float]
    kind: Mapped[EventKind]
    old: Mapped[str | None]
    new: Mapped[str | None]

    __table_args__ = (Index(None, "job_id", "at"), Index(None, "at"))


class JobProgress(Base):
    """The latest progress a job reported about itself."""

    __tablename__ = "job_progress"

    job_id: Mapped[str] = mapped_column(
        ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    steps_done: Mapped[int]
    steps_total: Mapped[int | None]
    rate: Mapped[float | None]
    """Steps per second, as the job reported it."""
    reported_at: Mapped[float | None]
    """The job's own time stamp for the report."""
    recorded_at: Mapped[float]
    """When the daemon first saw this report."""


class Node(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(primary_key=True)
    state: Mapped[NodeState]
    gpus_total: Mapped[int]
    gpus_alloc: Mapped[int]
    first_seen_at: Mapped[float]
    last_seen_at: Mapped[float]
    last_sample_at: Mapped[float | None]
    """Time of the newest GPU sample stored for the node (the agent's own clock)."""


class GpuSampleRow(Base):
    """One GPU's reading from the node agent (NVML), as read from the node's Extra field."""

    __tablename__ = "gpu_samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="CASCADE"))
    at: Mapped[float]
    gpu_index: Mapped[int]
    util_pct: Mapped[float | None]
    mem_used_mib: Mapped[float | None]
    mem_total_mib: Mapped[float | None]
    power_w: Mapped[float | None]
    temp_c: Mapped[float | None]

    __table_args__ = (
        # The daemon re-reads the same Extra field until the agent rewrites it: a sample is
        # stored once. The unique index also serves "samples of node N since T".
        UniqueConstraint("node", "at", "gpu_index"),
        Index(None, "at"),
    )


class DecisionRow(Base):
    """One policy decision (one per daemon cycle)."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    cycle_id: Mapped[int]
    at: Mapped[float]
    policy: Mapped[str]
    dry_run: Mapped[bool]
    notes: Mapped[list[str]]

    __table_args__ = (Index(None, "cycle_id"), Index(None, "at"))


class DecisionEntry(Base):
    """One job's part of a decision: its rank and/or GPU count, and why."""

    __tablename__ = "decision_entries"

    id: Mapped[int] = mapped_column(primary_key=True)
    decision_id: Mapped[int] = mapped_column(ForeignKey("decisions.id", ondelete="CASCADE"))
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.job_id", ondelete="CASCADE"))
    kind: Mapped[EntryKind]
    rank: Mapped[int | None]
    gpus: Mapped[int | None]
    reason: Mapped[str]

    __table_args__ = (Index(None, "decision_id"), Index(None, "job_id", "decision_id"))


class Action(Base):
    """One scontrol command, written before it runs (PLANNED) and after (DONE/FAILED)."""

    __tablename__ = "actions"

    id: Mapped[int] = mapped_column(primary_key=True)
    cycle_id: Mapped[int]
    decision_id: Mapped[int | None] = mapped_column(
        ForeignKey("decisions.id", ondelete="SET NULL")
    )
    kind: Mapped[ActionKind]
    argv: Mapped[list[str]]
    """The command as an argument list (JSON)."""
    status: Mapped[ActionStatus]
    started_at: Mapped[float]
    """When it was planned, immediately before the command ran."""
    finished_at: Mapped[float | None]
    exit_code: Mapped[int | None]
    output: Mapped[str | None]
    """stdout and stderr, or the reconciliation note; truncated."""

    __table_args__ = (
        Index(None, "status"),
        Index(None, "cycle_id"),
        Index(None, "decision_id"),
        Index(None, "finished_at"),  # retention
    )


class ActionJob(Base):
    """The jobs one action covers (scontrol takes many job ids in one call)."""

    __tablename__ = "action_jobs"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("actions.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[str] = mapped_column(
        ForeignKey("jobs.job_id", ondelete="CASCADE"), primary_key=True
    )

    __table_args__ = (Index(None, "job_id"),)


class DaemonHolder(Base):
    """The daemon that holds the database (one row, id 1): informational, for the message a
    second daemon prints. The lock itself is an `flock` on `<db>.lock` (slurm_rl.daemon.lock)."""

    __tablename__ = "daemon_holder"

    id: Mapped[int] = mapped_column(primary_key=True)
    pid: Mapped[int]
    host: Mapped[str]
    started_at: Mapped[float]
    version: Mapped[str]


class QuarantinedRecord(Base):
    """A record from Slurm the daemon could not parse: left alone, counted, kept for the admin.

    Keyed by (job_id, reason); `job_id` is no foreign key (the job may never have been stored).
    """

    __tablename__ = "quarantined_records"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str | None]
    first_seen: Mapped[float]
    last_seen: Mapped[float]
    count: Mapped[int]
    reason: Mapped[str]
    excerpt: Mapped[str]

    __table_args__ = (Index(None, "job_id", "reason"), Index(None, "last_seen"))


class ClaimRecord(Base):
    """A finished job's claimed run time held against its observed one: its owner's record,
    which stretches or disbelieves that user's next claims (slurm_rl/daemon/claims.py).

    Kept per user (the newest `[claims] remember` rows), not by age, so that a wrong claim
    weighs until enough right ones follow it. Keyed by (job_id, submit_time): Slurm reuses ids.
    """

    __tablename__ = "claim_records"

    id: Mapped[int] = mapped_column(primary_key=True)
    user: Mapped[str]
    job_id: Mapped[str]
    submit_time: Mapped[float]
    claimed_s: Mapped[float]
    """The run time the job's claims stated for its last run (the earliest end any of them
    gave, from the run's start)."""
    observed_s: Mapped[float]
    """How long that run took."""
    at: Mapped[float]

    __table_args__ = (UniqueConstraint("job_id", "submit_time"), Index(None, "user", "id"))
