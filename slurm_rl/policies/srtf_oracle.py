"""`srtf-oracle`: shortest remaining (true) time first, PREEMPTIVE. An ORACLE.

Reads `JobView.oracle_remaining_s`, which only the simulator sets: the lower-bound reference for
average JCT, not a scheduler for a real cluster. Pending jobs are ranked by true remaining time.
When a pending job does not fit in the free GPUs (gang, whole GPUs, per node), running jobs with
a longer true remaining time (by more than `margin_s`) are requeued, longest first, until it
fits; a job that cannot fit even then stops nobody. Jobs without an oracle value rank last (submit
order) and are never preempted. Never changes GPU counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies._common import (
    Capacity,
    build,
    fmt_dur,
    managed_pending,
    orders,
    plan_preemptions,
    preemptable,
    submit_key,
)

NAME = "srtf-oracle"


def _rem(job: JobView) -> float:
    assert job.oracle_remaining_s is not None
    return job.oracle_remaining_s


@dataclass(frozen=True, kw_only=True)
class SrtfOracle:
    name: str = field(default=NAME, init=False)
    # Declared for the simulator: it may skip decide() calls that could not change anything.
    resizes: ClassVar[bool] = False
    margin_s: float = 0.0
    """Preempt a running job only if its true remaining time exceeds the pending job's by more
    than this (0: textbook SRTF)."""

    def __post_init__(self) -> None:
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {self.margin_s}")

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        known = sorted((j for j in jobs if j.oracle_remaining_s is not None),
                       key=lambda j: (_rem(j), submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"oracle SRTF: true remaining {fmt_dur(_rem(j))}", None) for j in known
        ]
        ranked += [(j, "oracle SRTF: no true duration known, submit order", None)
                   for j in jobs if j.oracle_remaining_s is None]

        def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
            return sorted((j for j in preemptable(snapshot) if j.oracle_remaining_s is not None),
                          key=lambda j: (_rem(j), submit_key(j)), reverse=True)

        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in known if not j.held],
            victims,
            outranks=lambda p, v: _rem(v) > _rem(p) + self.margin_s,
            reason=lambda v, p: (f"oracle SRTF: true remaining {fmt_dur(_rem(v))} > "
                                 f"{fmt_dur(_rem(p))} of job {p.id} ({p.gpus} GPUs)"),
        )
        return Decision(policy=self.name, order=orders(ranked), preemptions=preempts)


def new(**options: Any) -> SrtfOracle:
    """Options: margin_s (0.0)."""
    return build(SrtfOracle, options)
