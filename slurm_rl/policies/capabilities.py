"""Optional capabilities a policy declares by implementing them, after the Kubernetes scheduler
framework's one-small-interface-per-extension-point: `core.Policy` (`name`, `decide`) is the
whole contract; each Protocol here is one thing a policy may also do or need, checked with
`isinstance` by the simulator (and by the conformance test, tests/policies/test_conformance.py).

A capability is declared by a method the policy really has and uses, never by a flag: a policy
that declares nothing only orders pending jobs (and GPU counts of range jobs), keeps no state
between calls and reads no true durations. Its Preempts or Resizes would be refused by the
simulator (a SimulationError), since it skips the calls of such a policy that could not
change anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView


@runtime_checkable
class Preempting(Protocol):
    """May return `Decision.preemptions`.

    `may_preempt(job)`: whether the policy could ever requeue this running job (its own rule,
    e.g. managed and plainly RUNNING); every Preempt it returns names such a job."""

    def may_preempt(self, job: JobView) -> bool: ...


@runtime_checkable
class Resizing(Protocol):
    """May return `Decision.resizes`.

    `may_resize(job)`: whether the policy could ever resize this running job (e.g. managed,
    RUNNING, `intent.elastic`); every Resize it returns names such a job."""

    def may_resize(self, job: JobView) -> bool: ...


class CycleState:
    """Scratch space for one decision point, as the Kubernetes scheduler framework's
    CycleState: the simulator makes one for each point at which it asks a `Gated` policy,
    passes it to that policy's `futile` and then, if the call is not skipped, to its `decide`
    on the same snapshot, and drops it afterwards. What `futile` worked out reaches `decide`
    through it, explicitly, instead of through a cell inside the policy. A policy writes under
    its own key; a value is never seen by another decision point."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, object] = {}

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str) -> object | None:
        """What was written under `key` at this point (None: nothing)."""
        return self._data.get(key)


@runtime_checkable
class Gated(Protocol):
    """Can tell cheaply that a call would change nothing, so the simulator may skip it.

    `futile(snapshot, cycle)`: True where the policy chooses not to act at this instant: where
    `decide(snapshot)` could start and resize nothing that the scheduling pass would not start
    anyway (no pending job fits the free GPUs) and the policy would requeue nothing at such an
    instant (rl's gate: only an arriving job may trigger a requeue then; its full `decide`
    might requeue for an older job, docs/rl.md). The simulator asks it, and on True skips the
    call as it skips its own futile ones (the ranks of the last decision stay in force), only
    where its skip rule is exact (`skip_futile`, deciding at events, no decision delay); it
    asks it instead of `decide`, so a `Stateful` policy may update its state in it. On False
    the simulator calls `decide(snapshot, cycle)` with the same `CycleState`, which may carry
    what `futile` already worked out. `decide` without a cycle (the daemon, which asks at
    every cycle and never skips) answers in full."""

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState) -> bool: ...

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        ...


@dataclass(frozen=True, kw_only=True)
class GuardStatus:
    """What a `Guarding` policy's guard is doing, for metrics and logs."""

    fallback_active: bool
    """The fallback decides now."""
    switches: int
    """Switches so far, either way (this run, or since the daemon started)."""
    since: float | None
    """When the current mode began (snapshot time; None: the learned policy from the start)."""
    why: str
    """Why the fallback decides ("" while the learned policy does)."""


@runtime_checkable
class Guarding(Protocol):
    """Decides through a guard that hands the decision to a fallback policy while its rule
    fires (`policies/guard.py`). `guard_status()`: whether the fallback decides now, the
    switches so far and why; the simulator reports the switches, the daemon's metrics the
    mode."""

    def guard_status(self) -> GuardStatus: ...


@runtime_checkable
class Stateful(Protocol):
    """Keeps state between `decide` calls (bounded, documented in its module).

    `reset()` forgets it all: afterwards the policy decides as a new instance would. The
    simulator calls it at the start of every run. The policy's decisions must not depend on
    calls the simulator skips as futile (no pending job could start, nothing to preempt or
    resize), unless it is also `Observing`."""

    def reset(self) -> None: ...


@runtime_checkable
class Observing(Stateful, Protocol):
    """Learns from every snapshot it is shown (`sjf`: run times of jobs seen finishing), so a
    skipped call would change what it learns: the simulator asks it at every event.

    `observe(snapshot)`: take in what the snapshot shows (decide calls it first)."""

    def observe(self, snapshot: ClusterSnapshot) -> None: ...


class Oracle(Protocol):
    """The simulator's true durations: a reference for what perfect knowledge would buy.

    Never part of a snapshot and never built by the daemon: it reaches only `OracleReading`
    policies, bound by the simulator."""

    def remaining_s(self, job_id: JobId) -> float | None:
        """True remaining run time of an active job at its current GPU count, as of the
        snapshot being decided (restart delay included); None for a job it does not know."""
        ...


@runtime_checkable
class OracleReading(Protocol):
    """Reads true durations: an ORACLE, a reference and not a scheduler for a real cluster.
    Its registered name ends in `-oracle` (checked by the conformance test).

    `bind_oracle(oracle)`: the simulator binds its oracle before a run; unbound (None, as
    anywhere but the simulator), the policy knows no true duration and says so."""

    def bind_oracle(self, oracle: Oracle | None) -> None: ...


@runtime_checkable
class Declining(Protocol):
    """Declines deadline jobs at admission (`elasticflow`) and counts them; the simulator's
    summary reports the count."""

    @property
    def declined_jobs(self) -> int:
        """Jobs declined at admission since the last `reset`."""
        ...


@runtime_checkable
class Dropping(Protocol):
    """Drops the jobs it declines (`elasticflow` with `declined="drop"`, as ElasticFlow's own
    simulator drops a job that fails admission), instead of letting them run best-effort.

    `take_dropped()`: ids of the pending jobs declined to be dropped since the last call
    (emptied by the call). The simulator asks after every decision point, before its scheduling
    pass, and removes those jobs: they never run, are counted in `SimResult.declined_dropped`
    and as missed deadlines. The daemon never asks (it cancels no job): the policy's own
    Decision says what such a job gets live."""

    def take_dropped(self) -> tuple[JobId, ...]: ...
