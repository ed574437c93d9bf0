"""`srtf-oracle`: shortest remaining (true) time first, PREEMPTIVE. An ORACLE.

Reads true durations through the simulator's `capabilities.Oracle` (`OracleReading`): the
lower-bound reference for average JCT, not a scheduler for a real cluster. Pending jobs are
ranked by true remaining time. When a pending job does not fit in the free GPUs (gang, whole
GPUs, per node), running jobs with a longer true remaining time (by more than `margin_s`) are
requeued, longest first, until it fits; a job that cannot fit even then stops nobody. Jobs
without a true duration rank last (submit order) and are never preempted. Never changes GPU
counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
from slurm_rl.policies.capabilities import Oracle
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key
from slurm_rl.policies.preemption import may_preempt as requeueable
from slurm_rl.policies.preemption import plan_preemptions
from slurm_rl.policies.sjf_oracle import true_remaining

NAME = "srtf-oracle"


@dataclass(frozen=True, kw_only=True)
class SrtfBase:
    """Preemptive shortest-remaining-first on a measure of each job's true remaining work;
    subclasses say which measure (`measure`), how it reads (`describe`) and the margin."""

    name: str
    label: ClassVar[str] = "oracle SRTF"
    _oracle: list[Oracle | None] = field(default_factory=lambda: [None], init=False,
                                         repr=False, compare=False)
    """The bound oracle (a one-slot list: the dataclass is frozen)."""

    @property
    def margin(self) -> float:
        raise NotImplementedError

    def measure(self, rem: dict[JobId, float], jobs: list[JobView]) -> dict[JobId, float]:
        """Job → the value ranked (smallest first), from true remaining seconds `rem`."""
        raise NotImplementedError

    def describe(self, job: JobView, value: float) -> str:
        raise NotImplementedError

    def bind_oracle(self, oracle: Oracle | None) -> None:
        """OracleReading (capabilities.py): the simulator binds its true durations."""
        self._oracle[0] = oracle

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs (not completing,
        resizing or suspended) whose requeue would be carried out (`restartable`); among them
        only those with a known true duration are ever stopped."""
        return requeueable(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        oracle = self._oracle[0]
        rem = self.measure(true_remaining(oracle, jobs), jobs)
        known = sorted((j for j in jobs if j.id in rem), key=lambda j: (rem[j.id], submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"{self.label}: {self.describe(j, rem[j.id])}", None) for j in known
        ]
        ranked += [(j, f"{self.label}: no true duration known, submit order", None)
                   for j in jobs if j.id not in rem]
        running: dict[JobId, float] = {}

        def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
            stoppable = [j for j in snapshot.running if self.may_preempt(j)]
            running.update(self.measure(true_remaining(oracle, stoppable), stoppable))
            return sorted((j for j in stoppable if j.id in running),
                          key=lambda j: (running[j.id], submit_key(j)), reverse=True)

        def left(j: JobView) -> float:
            return rem[j.id] if j.id in rem else running[j.id]

        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in known if not j.held],
            victims,
            outranks=lambda p, v: left(v) > left(p) + self.margin,
            reason=lambda v, p: self.victim_reason(left(v), left(p), p),
        )
        return Decision(policy=self.name, order=orders(ranked), preemptions=preempts)

    def victim_reason(self, victim: float, pending: float, p: JobView) -> str:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class SrtfOracle(SrtfBase):
    name: str = field(default=NAME, init=False)
    margin_s: float = 0.0
    """Preempt a running job only if its true remaining time exceeds the pending job's by more
    than this (0: textbook SRTF)."""

    def __post_init__(self) -> None:
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {self.margin_s}")

    @property
    def margin(self) -> float:
        return self.margin_s

    def measure(self, rem: dict[JobId, float], jobs: list[JobView]) -> dict[JobId, float]:
        return rem

    def describe(self, job: JobView, value: float) -> str:
        return f"true remaining {fmt_dur(value)}"

    def victim_reason(self, victim: float, pending: float, p: JobView) -> str:
        return (f"{self.label}: true remaining {fmt_dur(victim)} > {fmt_dur(pending)} of job "
                f"{p.id} ({p.gpus} GPUs)")


def new(**options: Any) -> SrtfOracle:
    """Options: margin_s (0.0)."""
    return build(SrtfOracle, options)
