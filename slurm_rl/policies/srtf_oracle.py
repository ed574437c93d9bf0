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
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, JobView
from slurm_rl.policies.capabilities import Oracle
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key
from slurm_rl.policies.preemption import plan_preemptions
from slurm_rl.policies.sjf_oracle import true_remaining

NAME = "srtf-oracle"


@dataclass(frozen=True, kw_only=True)
class SrtfOracle:
    name: str = field(default=NAME, init=False)
    margin_s: float = 0.0
    """Preempt a running job only if its true remaining time exceeds the pending job's by more
    than this (0: textbook SRTF)."""
    _oracle: list[Oracle | None] = field(default_factory=lambda: [None], init=False,
                                         repr=False, compare=False)
    """The bound oracle (a one-slot list: the dataclass is frozen)."""

    def __post_init__(self) -> None:
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {self.margin_s}")

    def bind_oracle(self, oracle: Oracle | None) -> None:
        """OracleReading (capabilities.py): the simulator binds its true durations."""
        self._oracle[0] = oracle

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs (not completing,
        resizing or suspended); among them only those with a known true duration are ever
        stopped."""
        return job.managed and job.state is JobState.RUNNING

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        oracle = self._oracle[0]
        rem = true_remaining(oracle, jobs)
        known = sorted((j for j in jobs if j.id in rem), key=lambda j: (rem[j.id], submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"oracle SRTF: true remaining {fmt_dur(rem[j.id])}", None) for j in known
        ]
        ranked += [(j, "oracle SRTF: no true duration known, submit order", None)
                   for j in jobs if j.id not in rem]
        running: dict[JobId, float] = {}

        def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
            stoppable = [j for j in snapshot.running if self.may_preempt(j)]
            running.update(true_remaining(oracle, stoppable))
            return sorted((j for j in stoppable if j.id in running),
                          key=lambda j: (running[j.id], submit_key(j)), reverse=True)

        def left(j: JobView) -> float:
            return rem[j.id] if j.id in rem else running[j.id]

        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in known if not j.held],
            victims,
            outranks=lambda p, v: left(v) > left(p) + self.margin_s,
            reason=lambda v, p: (f"oracle SRTF: true remaining {fmt_dur(left(v))} > "
                                 f"{fmt_dur(left(p))} of job {p.id} ({p.gpus} GPUs)"),
        )
        return Decision(policy=self.name, order=orders(ranked), preemptions=preempts)


def new(**options: Any) -> SrtfOracle:
    """Options: margin_s (0.0)."""
    return build(SrtfOracle, options)
