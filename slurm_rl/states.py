"""Slurm's job and node states and the service classes, as enums (re-exported by core.py).

States are squeue's / sinfo's long names; `JobState.is_pending` / `is_running` group them the
way the daemon, the simulator and every policy need.
"""

from __future__ import annotations

import enum


class JobState(enum.Enum):
    """Slurm's job states (squeue's long names), in one enum for daemon and simulator."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    CONFIGURING = "CONFIGURING"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Parse a state as squeue/scontrol print it ("PENDING", "CANCELLED by 0", ...)."""
        word = text.strip().split(" ", 1)[0].upper()
        try:
            return cls(word)
        except ValueError:
            raise ValueError(f"unknown Slurm job state {text!r}") from None

    _pending: bool
    _running: bool

    @property
    def is_pending(self) -> bool:
        return self._pending

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def is_finished(self) -> bool:
        return not (self._pending or self._running)


_PENDING_LIKE = frozenset(
    {JobState.PENDING, JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED,
     JobState.RESV_DEL_HOLD}
)
_RUNNING_LIKE = frozenset(
    {JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING, JobState.CONFIGURING,
     JobState.RESIZING, JobState.SIGNALING, JobState.STAGE_OUT, JobState.STOPPED}
)
# Looked up on the member (asked of every job several times a cycle; an Enum's __hash__ is
# Python code, so a set lookup costs several times more).
for _state in JobState:
    _state._pending = _state in _PENDING_LIKE
    _state._running = _state in _RUNNING_LIKE
del _state


class NodeState(enum.Enum):
    """Base node states as sinfo's %T prints them, flags ('*', '~', '+DRAIN') stripped."""

    IDLE = "IDLE"
    MIXED = "MIXED"
    ALLOCATED = "ALLOCATED"
    COMPLETING = "COMPLETING"
    DOWN = "DOWN"
    DRAINED = "DRAINED"
    DRAINING = "DRAINING"
    FAIL = "FAIL"
    FAILING = "FAILING"
    FUTURE = "FUTURE"
    MAINT = "MAINT"
    REBOOT = "REBOOT"
    RESERVED = "RESERVED"
    PLANNED = "PLANNED"
    POWER_DOWN = "POWER_DOWN"
    POWERED_DOWN = "POWERED_DOWN"
    POWERING_DOWN = "POWERING_DOWN"
    POWERING_UP = "POWERING_UP"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str) -> NodeState:
        word = text.strip().upper().rstrip("*~#!%$@^-+")
        word = word.split("+", 1)[0]
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    @property
    def usable(self) -> bool:
        """Whether new jobs may start on a node in this state."""
        return self in (NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED,
                        NodeState.COMPLETING, NodeState.PLANNED)


class ServiceClass(enum.Enum):
    """The QoS class a user asks for with `rlsbatch --rl-class`.

    critical:   deadline jobs that matter most; ordered first among jobs that can make it.
    standard:   the default.
    besteffort: runs when GPUs are free; never delays the other classes.
    """

    CRITICAL = "critical"
    STANDARD = "standard"
    BESTEFFORT = "besteffort"

    @classmethod
    def parse(cls, text: str) -> ServiceClass:
        key = text.strip().lower().replace("-", "").replace("_", "")
        for member in cls:
            if member.value == key:
                return member
        valid = ", ".join(m.value for m in cls)
        raise ValueError(f"unknown service class {text!r} (valid: {valid})")
