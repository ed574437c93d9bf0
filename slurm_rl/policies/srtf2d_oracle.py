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
from typing import Any, ClassVar

from slurm_rl.core import JobId, JobView
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.srtf_oracle import SrtfBase

NAME = "srtf2d-oracle"


@dataclass(frozen=True, kw_only=True)
class Srtf2dOracle(SrtfBase):
    name: str = field(default=NAME, init=False)
    label: ClassVar[str] = "oracle SRTF-2D"
    margin_gpu_s: float = 0.0
    """Preempt a running job only if its true remaining GPU-seconds exceed the pending job's
    by more than this (0: textbook)."""

    def __post_init__(self) -> None:
        if self.margin_gpu_s < 0:
            raise ValueError(f"margin_gpu_s must be >= 0, got {self.margin_gpu_s}")

    @property
    def margin(self) -> float:
        return self.margin_gpu_s

    def measure(self, rem: dict[JobId, float], jobs: list[JobView]) -> dict[JobId, float]:
        return {j.id: rem[j.id] * max(j.gpus, 1) for j in jobs if j.id in rem}

    def describe(self, job: JobView, value: float) -> str:
        return f"true remaining {fmt_dur(value / max(job.gpus, 1))} x {job.gpus} GPUs"

    def victim_reason(self, victim: float, pending: float, p: JobView) -> str:
        return (f"{self.label}: true remaining {victim / 3600:.3g} GPU-h > "
                f"{pending / 3600:.3g} GPU-h of job {p.id} ({p.gpus} GPUs)")


def new(**options: Any) -> Srtf2dOracle:
    """Options: margin_gpu_s (0.0)."""
    return build(Srtf2dOracle, options)
