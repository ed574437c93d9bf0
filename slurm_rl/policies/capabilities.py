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

from typing import Protocol, runtime_checkable

from slurm_rl.core import ClusterSnapshot, JobId, JobView


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


@runtime_checkable
class Gated(Protocol):
    """Can tell cheaply that a call would change nothing, so the simulator may skip it.

    `futile(snapshot)`: True where the policy chooses not to act at this instant: where
    `decide(snapshot)` could start and resize nothing that the scheduling pass would not start
    anyway (no pending job fits the free GPUs) and the policy would requeue nothing at such an
    instant (rl's gate: only an arriving job may trigger a requeue then; its full `decide`
    might requeue for an older job, docs/rl.md). The simulator asks it, and on True skips the
    call as it skips its own futile ones (the ranks of the last decision stay in force), only
    where its skip rule is exact (`skip_futile`, deciding at events, no decision delay); it
    asks it instead of `decide`, so a `Stateful` policy may update its state in it. `decide`
    itself always answers in full: the daemon, which asks at every cycle, never skips."""

    def futile(self, snapshot: ClusterSnapshot) -> bool: ...


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
