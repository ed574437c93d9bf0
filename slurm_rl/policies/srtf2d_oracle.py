"""`srtf2d-oracle`: shortest remaining (true) GPU-time first, PREEMPTIVE. An ORACLE.

`srtf-oracle` with the key a job's true remaining time × its GPUs (remaining GPU-seconds), the
two-dimensional form of SRTF: under gang scheduling a short wide job holds many GPUs, and
ranking by time alone lets it displace several narrow jobs (docs/evaluation.md: cluster02 at
load 1.0); by area, it does not. Reads true durations through the simulator's
`capabilities.Oracle` (`OracleReading`): a reference, not a scheduler for a real cluster.

Pending jobs are ranked by true remaining GPU-seconds. When a pending job does not fit in the
free GPUs, running jobs whose true remaining GPU-seconds exceed its own by more than
`margin_gpu_s` are requeued, largest first, until it fits; a job that cannot fit even then
stops nobody. Jobs without a true duration rank last (submit order) and are never preempted.
Never changes GPU counts.
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

NAME = "srtf2d-oracle"


def _area(rem: dict[JobId, float], jobs: list[JobView]) -> dict[JobId, float]:
    return {j.id: rem[j.id] * max(j.gpus, 1) for j in jobs if j.id in rem}


@dataclass(frozen=True, kw_only=True)
class Srtf2dOracle:
    name: str = field(default=NAME, init=False)
    margin_gpu_s: float = 0.0
    """Preempt a running job only if its true remaining GPU-seconds exceed the pending job's
    by more than this (0: textbook)."""
    _oracle: list[Oracle | None] = field(default_factory=lambda: [None], init=False,
                                         repr=False, compare=False)
    """The bound oracle (a one-slot list: the dataclass is frozen)."""

    def __post_init__(self) -> None:
        if self.margin_gpu_s < 0:
            raise ValueError(f"margin_gpu_s must be >= 0, got {self.margin_gpu_s}")

    def bind_oracle(self, oracle: Oracle | None) -> None:
        """OracleReading (capabilities.py): the simulator binds its true durations."""
        self._oracle[0] = oracle

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs; among them only those
        with a known true duration are ever stopped."""
        return job.managed and job.state is JobState.RUNNING

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        oracle = self._oracle[0]
        area = _area(true_remaining(oracle, jobs), jobs)
        known = sorted((j for j in jobs if j.id in area),
                       key=lambda j: (area[j.id], submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"oracle SRTF-2D: true remaining {fmt_dur(area[j.id] / max(j.gpus, 1))} x "
                f"{j.gpus} GPUs", None) for j in known
        ]
        ranked += [(j, "oracle SRTF-2D: no true duration known, submit order", None)
                   for j in jobs if j.id not in area]
        running: dict[JobId, float] = {}

        def victims() -> list[JobView]:  # (asked only if some pending job does not fit)
            stoppable = [j for j in snapshot.running if self.may_preempt(j)]
            running.update(_area(true_remaining(oracle, stoppable), stoppable))
            return sorted((j for j in stoppable if j.id in running),
                          key=lambda j: (running[j.id], submit_key(j)), reverse=True)

        def left(j: JobView) -> float:
            return area[j.id] if j.id in area else running[j.id]

        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in known if not j.held],
            victims,
            outranks=lambda p, v: left(v) > left(p) + self.margin_gpu_s,
            reason=lambda v, p: (f"oracle SRTF-2D: true remaining {left(v) / 3600:.3g} GPU-h > "
                                 f"{left(p) / 3600:.3g} GPU-h of job {p.id} ({p.gpus} GPUs)"),
        )
        return Decision(policy=self.name, order=orders(ranked), preemptions=preempts)


def new(**options: Any) -> Srtf2dOracle:
    """Options: margin_gpu_s (0.0)."""
    return build(Srtf2dOracle, options)
