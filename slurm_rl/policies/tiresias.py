"""`tiresias`: discretised two-dimensional least-attained-service (2D-LAS), preemptive.

After Tiresias (Gu et al., NSDI'19), the "dlas-gpu" variant of its simulator:
- A job's attained service is GPU-seconds (`JobView.attained_gpu_s`: both dimensions, GPUs ×
  time). `thresholds` split it into queues: Q0 below thresholds[0], Q1 below thresholds[1], …;
  the default, one threshold at 3600 GPU-s (two queues), is the simulator's default.
- Lower queues first; within a queue FIFO by submit time (ties by id). A running job is not
  preempted by a job of its own queue (Tiresias keeps running jobs at the head of their queue).
- A pending job that does not fit in the free GPUs (gang, whole GPUs, per node) preempts running
  jobs of strictly lower-priority queues, lowest queue and latest submitted first, until it fits;
  a job that cannot fit even then stops nobody.
- Starvation: a pending job in Q1+ that has waited since it last ran at least
  `promote_knob` × its run time since its last promotion goes back to Q0 and its attained service
  counts from zero again (Tiresias's PromoteKnob; 0 disables).

State kept across calls (bounded by the jobs in the snapshot): per job, when it was last seen
running (the wait clock; for a job this instance never saw running, when it first saw it
waiting) and its attained service at its last promotion.
Never changes GPU counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
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

NAME = "tiresias"


@dataclass(frozen=True, kw_only=True)
class Tiresias:
    name: str = field(default=NAME, init=False)
    # Declared for the simulator: it may skip decide() calls that could not change anything.
    resizes: ClassVar[bool] = False
    thresholds: tuple[float, ...] = (3600.0,)
    """Queue limits on attained GPU-seconds, ascending; len(thresholds) + 1 queues."""
    promote_knob: float = 8.0
    """Promote to Q0 after waiting promote_knob × run time since the last promotion (0: never)."""
    _last_run: dict[JobId, float] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)
    """Per job: last seen running (or first seen waiting): when its wait started."""
    _base: dict[JobId, float] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)

    def __post_init__(self) -> None:
        th = tuple(float(t) for t in self.thresholds)
        if any(t <= 0 for t in th) or list(th) != sorted(set(th)):
            raise ValueError(f"thresholds must be positive and strictly ascending, got {th}")
        if self.promote_knob < 0:
            raise ValueError(f"promote_knob must be >= 0, got {self.promote_knob}")
        object.__setattr__(self, "thresholds", th)

    def _service(self, job: JobView) -> float:
        """Attained GPU-seconds since the job's last promotion."""
        return max(0.0, job.attained_gpu_s - self._base.get(job.id, 0.0))

    def queue(self, job: JobView) -> int:
        s = self._service(job)
        return sum(1 for t in self.thresholds if s >= t)

    def _bookkeep(self, snapshot: ClusterSnapshot) -> dict[JobId, str]:
        """Update state; return the promotion note for jobs promoted now."""
        now = snapshot.time
        ids = {j.id for j in snapshot.jobs}
        for d in (self._last_run, self._base):
            for k in [k for k in d if k not in ids]:
                del d[k]
        promoted: dict[JobId, str] = {}
        for j in snapshot.jobs:
            if j.state.is_running or j.id not in self._last_run:
                self._last_run[j.id] = now
            elif j.state.is_pending and self.promote_knob > 0 and self.queue(j) > 0:
                ran = self._service(j) / max(j.gpus, 1)
                waited = now - self._last_run[j.id]
                if ran > 0 and waited >= self.promote_knob * ran:
                    self._base[j.id] = j.attained_gpu_s
                    promoted[j.id] = (f"promoted: waited {fmt_dur(waited)} >= "
                                      f"{self.promote_knob:g} x {fmt_dur(ran)} run")
        return promoted

    def _why(self, job: JobView) -> str:
        q, s = self.queue(job), self._service(job)
        if q == 0:
            return f"Q0 (attained {s:.0f} GPU-s < {self.thresholds[0]:.0f})"
        return f"Q{q} (attained {s:.0f} GPU-s >= {self.thresholds[q - 1]:.0f})"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        promoted = self._bookkeep(snapshot)
        q = {j.id: self.queue(j) for j in snapshot.jobs}
        pending = sorted(managed_pending(snapshot), key=lambda j: (q[j.id], submit_key(j)))
        ranked = []
        for j in pending:
            why = self._why(j)
            if j.id in promoted:
                why += f", {promoted[j.id]}"
            ranked.append((j, f"{why}, FIFO in queue", None))
        victims = sorted(preemptable(snapshot), key=lambda j: (q[j.id], submit_key(j)),
                         reverse=True)
        preempts, _ = plan_preemptions(
            Capacity.of(snapshot),
            [j for j in pending if not j.held],
            victims,
            outranks=lambda p, v: q[p.id] < q[v.id],
            reason=lambda v, p: f"{self._why(v)}: job {p.id} of Q{q[p.id]} needs {p.gpus} GPUs",
        )
        return Decision(policy=self.name, order=orders(ranked), preemptions=preempts)


def new(**options: Any) -> Tiresias:
    """Options: thresholds ((3600.0,) GPU-s), promote_knob (8.0)."""
    return build(Tiresias, options)
