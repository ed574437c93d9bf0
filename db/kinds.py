"""Enums stored in the database, kept free of SQLAlchemy so pure code may import them.

Values are what the database holds (lower-case words); the columns are plain strings without a
CHECK constraint, so adding a member later needs no migration.
"""

from __future__ import annotations

import enum


class EventKind(enum.Enum):
    """What a `job_events` row records."""

    STATE = "state"
    """The job's Slurm state changed (old NULL: first seen)."""
    INTENT_CHANGED = "intent_changed"
    """The intent in the job's comment differs from the one last seen. The recorded (first)
    intent is kept; the daemon never silently upgrades a job to an edited intent."""
    CLASS_DENIED = "class_denied"
    """The job claimed a service class the site did not grant it (old: claimed, new: used)."""
    INTENT_LATE = "intent_late"
    """An intent appeared on (or changed in) the job's comment after submission."""
    GPU_LIMITED = "gpu_limited"
    """The job's GPU range exceeds what Slurm would let the user ask for: capped or ignored."""
    DEADLINE_DROPPED = "deadline_dropped"
    """The claimed deadline lies beyond the site's horizon ([trust] deadline_horizon_s)."""


class EntryKind(enum.Enum):
    """The part of a `Decision` a `decision_entries` row comes from."""

    ORDER = "order"
    RESIZE = "resize"
    PREEMPT = "preempt"


class ActionKind(enum.Enum):
    """One `scontrol` change the actuator makes (possibly for many jobs in one call). Only what
    the actuator really does: it resizes (daemon/resize.py) and preempts (daemon/preempt.py)
    running elastic jobs only (docs/daemon.md)."""

    SITE_FACTOR = "site_factor"
    PRIORITY = "priority"
    TRES_PER_NODE = "tres_per_node"
    """A pending job's GPUs per node (`TresPerNode`), with `NumNodes` when that changes too."""
    RESIZE_SIGNAL = "resize_signal"
    """A running elastic job is told to checkpoint (`scancel --signal`) before a resize."""
    REQUEUE_HOLD = "requeue_hold"
    """A running elastic job is requeued held (`scontrol requeuehold`) to be resized."""
    RESIZE_RELEASE = "resize_release"
    """The requeued job gets its new GPU count and is released (daemon/resize.py)."""
    PREEMPT_SIGNAL = "preempt_signal"
    """A running elastic job is told to checkpoint before it is preempted (daemon/preempt.py)."""
    PREEMPT_REQUEUE = "preempt_requeue"
    """A running elastic job is requeued held (`scontrol requeuehold`) to be preempted."""
    PREEMPT_RELEASE = "preempt_release"
    """The preempted job is released to wait in the queue (`StartTime=now+1`, lowest rank)."""
    SIZE_RELEASE = "size_release"
    """A job submitted held for sizing (rlsbatch, a deadline and no GPU request) gets its GPU
    count and CPUs and is released (daemon/sizing.py)."""


class ActionStatus(enum.Enum):
    """Life cycle of an action: written PLANNED before the command runs, finished after.

    An action still PLANNED when the daemon starts was interrupted by a crash: the daemon checks
    what Slurm shows and finishes it as DONE (Slurm reflects it) or ABANDONED (it does not; the
    next cycle decides afresh). It is never simply run again.
    """

    PLANNED = "planned"
    DONE = "done"
    FAILED = "failed"
    ABANDONED = "abandoned"

    @property
    def finished(self) -> bool:
        return self is not ActionStatus.PLANNED
