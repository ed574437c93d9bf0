"""What a simulation returns: per-job records, per-run intervals, counters."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_rl.sim.config import EngineConfig


class SimulationError(RuntimeError):
    """An invariant broke or the run can not go on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRecord:
    job_id: str
    submit: float
    start: float
    end: float
    gpus: int
    """GPU count at the end."""
    restarts: int
    deadline: float | None
    trace_gpus: int
    trace_duration: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Interval:
    """One contiguous run of a job at a fixed GPU count."""

    job_id: str
    start: float
    end: float
    gpus: int
    nodes: tuple[str, ...]
    node_gpus: tuple[int, ...]
    """GPUs on each of `nodes`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DroppedJob:
    """A job the policy declined and dropped (capabilities.Dropping): it never ran."""

    job_id: str
    submit: float
    at: float
    """When it was dropped."""
    deadline: float | None


@dataclass(frozen=True, kw_only=True)
class SimResult:
    policy: str
    config: EngineConfig
    jobs: tuple[JobRecord, ...]
    """In submit order: every job that ran (all submitted jobs but `declined_dropped`)."""
    intervals: tuple[Interval, ...]
    dropped: int
    """Trace jobs larger than the cluster, never submitted."""
    declined_dropped: tuple[DroppedJob, ...] = ()
    """Jobs the policy declined and dropped (capabilities.Dropping), in the order dropped:
    submitted, never run, not in `jobs`; each one with a deadline is a missed deadline."""
    decisions: int
    preemptions: int
    resizes: int
    notes: dict[str, int]
    note_samples: tuple[str, ...]
    wall_s: float
    guard_switches: int | None = None
    """How often a guarded policy's guard switched to its fallback or back (None: no guard,
    capabilities.Guarding)."""
