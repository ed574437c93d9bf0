"""Simulator settings: one frozen dataclass per component, built from TOML tables that reject
unknown keys by name."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar


@dataclass(frozen=True, kw_only=True)
class TimeLimitEstimate:
    """The Slurm time limit given to trace jobs that have none (ITP and Philly traces).

    Backfill plans with time limits, as slurmctld does, so the limit matters. Users ask for
    round, generous limits; by default a job's limit is twice its run time rounded up to a whole
    hour: a 40-minute job gets 2 h, an 8-hour job 16 h. Set `factor = 1` and `round_up_s = 0`
    to plan with true durations, or `fixed_s` to give every job the same limit (as the
    sim-to-real replays do). Jobs are never killed at their limit: the trace says how long they
    ran; a job past its limit is planned as ending now.
    """

    factor: float = 2.0
    """Multiple of the job's run time (at its trace GPU count)."""
    round_up_s: float = 3600.0
    """Round the limit up to a multiple of this (0: no rounding)."""
    fixed_s: float | None = None
    """One limit for every job; overrides factor and rounding."""
    min_s: float = 60.0
    """Smallest limit (Slurm's limits are whole minutes)."""

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.round_up_s < 0 or self.min_s < 0:
            raise ValueError(f"bad time-limit estimate {self}")
        if self.fixed_s is not None and self.fixed_s <= 0:
            raise ValueError(f"fixed_s must be positive, got {self.fixed_s}")

    def for_duration(self, duration: float) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        limit = self.factor * duration
        if self.round_up_s > 0:
            limit = math.ceil(limit / self.round_up_s - 1e-9) * self.round_up_s
        return max(limit, self.min_s)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """How the simulated cluster and its slurmctld behave."""

    nodes: int
    gpus_per_node: int
    tick_s: float = 60.0
    """Call the policy at least this often while jobs are pending (0: only at events)."""
    idle_ticks: bool = False
    """Also call the policy on ticks when no job is pending. Off by default: with an empty
    queue an order changes nothing, and every arrival and completion calls the policy anyway."""
    decide_on_events: bool = True
    """Call the policy at every arrival/completion (coalesced per timestamp). False models
    the daemon's fixed poll cycle: decisions only on ticks."""
    skip_futile: bool = True
    """Skip decide() calls that can not change anything, for a policy that declares it never
    preempts (`preempts = False`) or never resizes (`resizes = False`): see
    Simulator._worth_deciding. Exact for pure policies; a large saving on big traces."""
    restart_delay_s: float = 30.0
    """Time a job makes no progress after a requeue or a resize (checkpoint reload)."""
    backfill: bool = True
    """EASY backfill; False: strict priority order (the main scheduler alone)."""
    conservative: bool = False
    """With backfill: give every job that backfill examines a reservation, as slurmctld's
    backfill scheduler does (`sim/conservative.py`), instead of protecting only the top blocked
    job (EASY). This is what reproduced the test cluster's start order (docs/sim-to-real.md)."""
    bf_max_job_test: int = 500
    """Jobs below the top blocked one that backfill examines per pass (Slurm's default
    bf_max_job_test; 0: no limit)."""
    time_limit: TimeLimitEstimate = field(default_factory=TimeLimitEstimate)
    elastic_fraction: float = 0.0
    """Share of jobs (drawn with the seed) made elastic with GPU range 1..elastic_max_gpus,
    for traces that carry no range of their own."""
    elastic_max_gpus: int = 64
    seed: int = 0
    audit: bool = False
    """Check the whole cluster state after every event (slow; tests turn it on). Cheap
    invariants are always checked."""

    def __post_init__(self) -> None:
        if self.nodes <= 0 or self.gpus_per_node <= 0:
            raise ValueError(f"need nodes and gpus_per_node > 0, got {self.nodes} x "
                             f"{self.gpus_per_node}")
        if self.tick_s < 0 or self.restart_delay_s < 0 or self.bf_max_job_test < 0:
            raise ValueError("tick_s, restart_delay_s and bf_max_job_test must be >= 0")
        if not self.decide_on_events and self.tick_s <= 0:
            raise ValueError("decide_on_events = false needs tick_s > 0")
        if not 0.0 <= self.elastic_fraction <= 1.0:
            raise ValueError(f"elastic_fraction must be in [0, 1], got {self.elastic_fraction}")
        if self.elastic_max_gpus <= 0:
            raise ValueError("elastic_max_gpus must be positive")

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node


T = TypeVar("T")


def from_table(cls: type[T], table: dict[str, Any], *, where: str = "") -> T:
    """Build a config dataclass from a TOML table; unknown keys raise with the valid ones.
    Nested dataclass fields take nested tables."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        label = f"[{where}] " if where else ""
        raise ValueError(f"{label}unknown key(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(sorted(fields))})")
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key == "time_limit" and isinstance(value, dict):
            value = from_table(TimeLimitEstimate, value, where=f"{where}.time_limit")
        kwargs[key] = value
    return cls(**kwargs)
