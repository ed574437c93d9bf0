"""The policy code as it was before it was made fast (per-node capacity lists, victims sorted
up front, every job looked at on every call): the reference the fast code must agree with,
decision for decision (tests/policies/test_fast_paths.py)."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobOrder, JobState, JobView, Preempt
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.ordering import submit_key


def orders(ranked):
    return tuple(JobOrder(job_id=job.id, rank=rank, gpus=gpus, reason=reason)
                 for rank, (job, reason, gpus) in enumerate(ranked))


def managed_pending(snapshot: ClusterSnapshot) -> list[JobView]:
    return sorted((j for j in snapshot.pending if j.managed), key=submit_key)


def layout(gpus: int, nodes: int, node_cap: int) -> list[int]:
    """GPUs per node for a gang of `gpus` over at least `nodes` nodes (even split)."""
    if gpus <= 0:
        return []
    n = min(gpus, max(nodes, 1, math.ceil(gpus / max(node_cap, 1))))
    return [gpus // n + (1 if i < gpus % n else 0) for i in range(n)]


def job_layout(job: JobView, gpus: int | None, node_cap: int) -> list[int]:
    """A job's per-node GPUs at `gpus` (its own count and node count if None)."""
    if gpus is None or gpus == job.gpus:
        return layout(job.gpus, job.nodes, node_cap)
    return layout(gpus, 1, node_cap)


@dataclass
class Capacity:
    """Free GPUs per usable node. GPUs released by stopping a job go into separate chunks,
    because the snapshot does not say which node a job runs on: conservative for placing
    one-node jobs."""

    free: list[int]
    node_cap: int

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Capacity:
        usable = [n for n in snapshot.nodes if n.state.usable]
        cap = max((n.gpus_total for n in usable), default=0)
        return cls(free=[n.gpus_free for n in sorted(usable, key=lambda n: n.name)], node_cap=cap)

    def copy(self) -> Capacity:
        return Capacity(free=list(self.free), node_cap=self.node_cap)

    @property
    def total_free(self) -> int:
        return sum(self.free)

    def _pick(self, parts: list[int]) -> list[int] | None:
        """Distinct node indexes for each part, best fit (tightest node first), or None."""
        if parts and (len(parts) > len(self.free) or max(parts) > max(self.free)):
            return None
        taken: set[int] = set()
        picks = []
        for need in sorted(parts, reverse=True):
            best = None
            for i, f in enumerate(self.free):
                if i not in taken and f >= need and (best is None or f < self.free[best]):
                    best = i
            if best is None:
                return None
            taken.add(best)
            picks.append(best)
        return picks

    def fits(self, parts: list[int]) -> bool:
        return self._pick(parts) is not None

    def take(self, parts: list[int]) -> bool:
        picks = self._pick(parts)
        if picks is None:
            return False
        for i, need in zip(picks, sorted(parts, reverse=True), strict=True):
            self.free[i] -= need
        return True

    def release(self, parts: list[int]) -> None:
        self.free.extend(parts)


# --- preemption planning ---------------------------------------------------------------------

def plan_preemptions(
    cap: Capacity,
    pending: Sequence[JobView],
    victims: Sequence[JobView],
    outranks: Callable[[JobView, JobView], bool],
    reason: Callable[[JobView, JobView], str],
) -> tuple[tuple[Preempt, ...], set[JobId]]:
    """Which running jobs to requeue so that higher-priority pending jobs start.

    `pending` in priority order (best first); `victims` the running jobs that may be stopped,
    lowest priority first; `outranks(p, v)`: whether pending p may displace running v, true for
    a prefix of `victims` (the scan stops at the first v that p does not outrank). Each pending
    job takes free GPUs if it fits; otherwise victims it outranks are stopped, lowest first,
    until it fits (then victims it turned out not to need are kept). A job that cannot fit even
    so stops nobody. Returns the preemptions and the ids expected to start.
    """
    cap = cap.copy()
    lay = {v.id: job_layout(v, None, cap.node_cap) for v in victims}
    stopped: set[JobId] = set()
    out: list[Preempt] = []
    starts: set[JobId] = set()
    for p in pending:
        parts = job_layout(p, None, cap.node_cap)
        if cap.take(parts):
            starts.add(p.id)
            continue
        eligible: list[JobView] = []
        for v in victims:
            if not outranks(p, v):
                break
            if v.id not in stopped:
                eligible.append(v)
        if not eligible or not _fits_after(cap, [lay[v.id] for v in eligible], parts):
            continue
        chosen: list[JobView] = []
        for v in eligible:
            chosen.append(v)
            if _fits_after(cap, [lay[c.id] for c in chosen], parts):
                break
        # Keep victims that were not needed (the last one added made it fit).
        for v in reversed(chosen[:-1]):
            rest = [c for c in chosen if c.id != v.id]
            if _fits_after(cap, [lay[c.id] for c in rest], parts):
                chosen = rest
        for c in chosen:
            cap.release(lay[c.id])
            stopped.add(c.id)
            out.append(Preempt(job_id=c.id, reason=reason(c, p)))
        cap.take(parts)
        starts.add(p.id)
    return tuple(out), starts


def _fits_after(cap: Capacity, released: list[list[int]], parts: list[int]) -> bool:
    trial = cap.copy()
    for r in released:
        trial.release(r)
    return trial.fits(parts)


def preemptable(snapshot: ClusterSnapshot) -> list[JobView]:
    return [j for j in snapshot.running if j.managed and j.state is JobState.RUNNING]


@dataclass(frozen=True, kw_only=True)
class Tiresias:
    name: str = field(default="tiresias", init=False)
    thresholds: tuple[float, ...] = (3600.0,)
    """Queue limits on attained GPU-seconds, ascending; len(thresholds) + 1 queues."""
    promote_knob: float = 8.0
    """Promote to Q0 after waiting promote_knob × run time since the last promotion (0: never)."""
    _last_run: dict[JobId, float] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)
    """Per job: last seen running (or first seen waiting): when its wait started."""
    _base: dict[JobId, float] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)

    def may_preempt(self, job: JobView) -> bool:  # capabilities.Preempting
        return job.managed and job.state is JobState.RUNNING

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


