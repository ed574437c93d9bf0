"""Helpers shared by the policy modules: ordering keys, duration estimates, GPU ranges, a
node-level capacity model, a preemption planner and reason formatting.

Everything here is pure: snapshot values in, values out. Nothing reads a clock.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from slurm_rl import perfmodel
from slurm_rl.core import ClusterSnapshot, JobId, JobOrder, JobState, JobView, Preempt, id_key

# --- options ---------------------------------------------------------------------------------

T = TypeVar("T")


def build(cls: type[T], options: dict[str, Any]) -> T:
    """Construct a policy dataclass from `new(**options)`, rejecting unknown keys by name."""
    valid = sorted(f.name for f in dataclasses.fields(cls) if f.init)  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(valid) or 'none'})")
    return cls(**options)


# --- ordering --------------------------------------------------------------------------------

def submit_key(job: JobView) -> tuple[float, tuple[tuple[int, str], ...]]:
    """Slurm's default order: submit time, ties by job id."""
    return (job.submit_time, id_key(job.id))


def managed_pending(snapshot: ClusterSnapshot) -> list[JobView]:
    """Pending jobs the daemon may act on, in submit order."""
    return sorted((j for j in snapshot.pending if j.managed), key=submit_key)


def orders(ranked: Iterable[tuple[JobView, str, int | None]]) -> tuple[JobOrder, ...]:
    """JobOrders with consecutive ranks from (job, reason, gpus or None) in rank order."""
    return tuple(JobOrder(job_id=job.id, rank=rank, gpus=gpus, reason=reason)
                 for rank, (job, reason, gpus) in enumerate(ranked))


# --- formatting ------------------------------------------------------------------------------

def fmt_dur(seconds: float) -> str:
    """A short duration: 45s, 12m, 3.5h, 2.0d."""
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 120:
        return f"{sign}{s:.0f}s"
    if s < 7200:
        return f"{sign}{s / 60:.0f}m"
    if s < 172800:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def fmt_time(t: float) -> str:
    """Epoch seconds as UTC wall time (no local zone: policies must not read the environment);
    trace seconds (small numbers) as t=…s."""
    if t >= 1e9:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%MZ")
    return f"t={t:.0f}s"


# --- duration estimates (never the oracle) ---------------------------------------------------

class Source(enum.Enum):
    """Where a remaining-time estimate came from (named in reasons)."""

    PREDICTED = "predicted"
    PROGRESS = "progress"
    PROFILE = "steps at profiled throughput"
    TIME_LIMIT = "time limit"
    HISTORY = "history"
    DEFAULT = "default"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    seconds: float
    """Remaining run time at `gpus`."""
    gpus: int
    source: Source


def estimate_remaining(job: JobView, now: float, *, time_limit: bool = True) -> Estimate | None:
    """What a policy can know about a job's remaining run time at its current GPU count.

    In order: the daemon's/simulator's prediction; the job's own progress (steps left / rate);
    intent.total_steps at the profiled throughput for its model; the Slurm time limit as an upper
    bound (remaining limit if running). Never `oracle_remaining_s`.
    """
    g = max(job.gpus, 1)
    if job.predicted_remaining_s is not None:
        return Estimate(seconds=max(0.0, job.predicted_remaining_s), gpus=g,
                        source=Source.PREDICTED)
    intent, prog = job.intent, job.progress
    total = (prog.steps_total if prog and prog.steps_total is not None
             else intent.total_steps if intent else None)
    done = prog.steps_done if prog else 0
    if total is not None and prog is not None and prog.rate and prog.rate > 0:
        return Estimate(seconds=max(0, total - done) / prog.rate, gpus=g, source=Source.PROGRESS)
    model = intent.model if intent else None
    if total is not None and model and model.lower() in perfmodel.curves():
        rate = perfmodel.curve_for(model, intent.batch_size if intent else None).throughput(g)
        if rate > 0:
            return Estimate(seconds=max(0, total - done) / rate, gpus=g, source=Source.PROFILE)
    if time_limit and job.time_limit_s is not None:
        elapsed = (now - job.start_time if job.state.is_running and job.start_time is not None
                   else 0.0)
        return Estimate(seconds=max(0.0, job.time_limit_s - elapsed), gpus=g,
                        source=Source.TIME_LIMIT)
    return None


def remaining_at(job: JobView, est: Estimate, gpus: int) -> float:
    """The estimate moved to another GPU count along the job's speed-up curve."""
    if gpus == est.gpus or est.seconds == 0:
        return est.seconds
    model = job.intent.model if job.intent else None
    batch = job.intent.batch_size if job.intent else None
    factor = perfmodel.scaled_rate(1.0, est.gpus, gpus, model, batch)
    return est.seconds / factor if factor > 0 else math.inf


# --- GPU ranges ------------------------------------------------------------------------------

def gpu_range(job: JobView) -> tuple[int, int] | None:
    """(min, max) GPUs when the intent gives a range wider than one count, else None."""
    it = job.intent
    if it is None or (it.gpus_min is None and it.gpus_max is None):
        return None
    lo = it.gpus_min if it.gpus_min is not None else min(job.gpus, it.gpus_max or job.gpus)
    hi = it.gpus_max if it.gpus_max is not None else max(lo, job.gpus)
    lo, hi = max(lo, 1), max(hi, 1)
    return (lo, hi) if hi > lo else None


def allowed_counts(lo: int, hi: int, node_cap: int, total: int) -> list[int]:
    """GPU counts a policy may pick in [lo, hi]: the range ends and the powers of two between
    them (as ElasticFlow, DL jobs scale in powers of two), that place as cons_tres would (within
    one node, or whole nodes) and fit the cluster; at least [lo], so a job always has a count."""
    hi = min(hi, total)
    steps = {lo, hi} | {1 << k for k in range(hi.bit_length()) if lo < 1 << k < hi}
    out = [g for g in sorted(steps) if lo <= g <= hi
           and (g <= node_cap or g % max(node_cap, 1) == 0)]
    return out or [lo]


# --- node-level capacity ---------------------------------------------------------------------

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
    """Running jobs a policy may requeue: managed and plainly RUNNING (not completing,
    resizing or suspended)."""
    return [j for j in snapshot.running if j.managed and j.state is JobState.RUNNING]
