"""The reference for tests/policies/test_elasticflow_fast.py: `elasticflow` as it was before
it was made fast (slurm_rl/policies/elasticflow.py), decision for decision.

`elasticflow`: EDF with admission control, minimum satisfactory share and elastic scaling.

After ElasticFlow (Gu et al., ASPLOS'23), on the snapshot alone:
1. Plan. GPUs in use over time form a profile (cluster-wide GPU counts; per-node placement is
   left to Slurm): running jobs hold their GPUs until their estimated end (`estimates.
   estimate_remaining`; unknown: for ever), running elastic jobs without a deadline only their
   minimum (the rest can be reclaimed). Deadline jobs (pending, and running elastic ones) are then
   taken earliest deadline first. Each gets its *minimum satisfactory share*: the fewest GPUs of
   its range (a running elastic job pays `resize_cost_s` for a count other than its own) whose
   remaining time, moved along the model's speed-up curve, ends by the deadline when started at
   the earliest time the profile has room (now, for a running job); that reservation joins the
   profile. A pending job with no such count is *not admitted*: demoted to the back. A deadline
   job whose duration cannot be estimated is admitted unchecked, holding its share until its
   deadline.
2. Order: admitted pending jobs EDF, then jobs without a deadline (best-effort) in submit
   order, then the jobs not admitted, by deadline.
3. Now. Walking that order over the free GPUs: admitted jobs planned to start now start (a
   running elastic job whose share exceeds its count grows); if an admitted job does not fit,
   GPUs are reclaimed by shrinking running elastic jobs down to their floor (best-effort ones
   first, latest submitted first; then deadline ones above their share, latest deadline first).
   Other pending jobs start if they fit. GPUs still free go, one allowed step at a time, to the
   running elastic jobs and starting range jobs whose remaining time drops the most per extra GPU,
   while a step cuts it by at least `min_gain` and (for a running job) saves more than
   `resize_cost_s`.
Reads: intent (deadline, GPU range, elastic, model, batch size, total steps), progress,
predicted_remaining_s, time_limit_s, gpus, node capacities. Reads no true durations.
"""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, JobView, Resize, id_key
from slurm_rl.policies.estimates import estimate_remaining, remaining_at
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key

NAME = "elasticflow"


class _ReservedGpus:
    """GPUs reserved over time, piecewise constant: used[i] GPUs from times[i] to times[i+1]."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity, self.now = capacity, now
        self.times: list[float] = [now]
        self.used: list[int] = [0]

    def _cut(self, t: float) -> int:
        i = bisect.bisect_left(self.times, t)
        if i == len(self.times) or self.times[i] != t:
            self.times.insert(i, t)
            self.used.insert(i, self.used[i - 1])
        return i

    def add(self, start: float, end: float, gpus: int) -> None:
        start, end = max(start, self.now), max(end, self.now)
        if end <= start:
            return
        i = self._cut(start)
        j = self._cut(end) if end < math.inf else len(self.times)
        for k in range(i, j):
            self.used[k] += gpus

    def earliest(self, gpus: int, dur: float, deadline: float, now_only: bool) -> float | None:
        """Earliest start with `gpus` free for `dur` that ends by `deadline`."""
        start: float | None = None
        times, n = self.times, len(self.times)
        for i, used in enumerate(self.used):
            if used + gpus > self.capacity:
                if now_only:
                    return None
                start = None
                continue
            start = times[i] if start is None else start
            if start + dur > deadline:
                return None
            if (times[i + 1] if i + 1 < n else math.inf) - start >= dur:
                return start
        return None


@dataclass(frozen=True, kw_only=True)
class _Share:
    gpus: int
    start: float
    why: str


class _Round:
    """One decision: the snapshot's views and what has been decided so far."""

    def __init__(self, snapshot: ClusterSnapshot, resize_cost_s: float, min_gain: float) -> None:
        self.now, self.total = snapshot.time, snapshot.gpus_total
        self.node_cap = max((n.gpus_total for n in snapshot.nodes if n.state.usable), default=0)
        self.snapshot, self.resize_cost_s, self.min_gain = snapshot, resize_cost_s, min_gain
        self.pending = managed_pending(snapshot)
        self.elastic = {j.id: j for j in snapshot.running if resizable(j)}
        self.floor: dict[JobId, int] = {}  # planned count of running jobs outside the EDF pass
        self.shares: dict[JobId, _Share] = {}
        self.refused: dict[JobId, str] = {}
        self.size = {j.id: j.gpus for j in self.elastic.values()}  # running elastic, decided
        self.start: dict[JobId, int] = {}  # pending jobs expected to start now, at this count
        self.notes: dict[JobId, str] = {}
        self.grown: set[JobId] = set()
        self.free = snapshot.gpus_free

    def counts(self, j: JobView) -> list[int]:
        rng = gpu_range(j)
        return allowed_counts(*rng, self.node_cap, self.total) if rng else [j.gpus]

    def rem(self, j: JobView, g: int) -> float:
        est = estimate_remaining(j, self.now)
        return remaining_at(j, est, g) if est else math.inf

    # 1. Plan: admission control and minimum satisfactory shares -------------------------------

    def plan(self) -> list[JobView]:
        now, prof = self.now, _ReservedGpus(self.total, self.now)
        alloc = sum(n.gpus_alloc for n in self.snapshot.nodes if n.state.usable)
        prof.add(now, math.inf, max(0, alloc - sum(j.gpus for j in self.snapshot.running)))
        for j in self.snapshot.running:
            if j.id in self.elastic and _deadline(j) is not None:
                continue
            g = self.counts(j)[0] if j.id in self.elastic else j.gpus
            self.floor[j.id] = g
            prof.add(now, now + self.rem(j, g), g)
        # Running jobs were admitted before: their commitments come first.
        edf = sorted((j for j in self.elastic.values() if _deadline(j) is not None), key=_edf)
        edf += sorted((j for j in self.pending if _deadline(j) is not None and not j.held),
                      key=_edf)
        for j in edf:
            d = _deadline(j)
            assert d is not None
            running = j.id in self.elastic
            if estimate_remaining(j, now) is None:
                g = j.gpus if running else self.counts(j)[0]
                self.shares[j.id] = _Share(gpus=g, start=now,
                                           why="duration unknown: admitted unchecked")
                prof.add(now, max(d, now), g)
                continue
            for g in self.counts(j):
                dur = self.rem(j, g) + (self.resize_cost_s if running and g != j.gpus else 0.0)
                s = prof.earliest(g, dur, d, now_only=running)
                if s is not None:
                    when = "start now" if s <= now else f"planned start in {fmt_dur(s - now)}"
                    self.shares[j.id] = _Share(
                        gpus=g, start=s, why=f"min share {g} GPUs (est {fmt_dur(dur)}), {when}")
                    prof.add(s, s + dur, g)
                    break
            else:
                g = self.counts(j)[-1]
                self.refused[j.id] = (
                    f"not admitted: deadline {fmt_time(d)} unreachable even at {g} GPUs "
                    f"(est {fmt_dur(self.rem(j, g))}) given commitments")
                if running:
                    prof.add(now, now + self.rem(j, j.gpus), j.gpus)
        return edf

    # 2. Now: starts, grow to share, reclaim ---------------------------------------------------

    def ranked(self) -> list[JobView]:
        """Admitted (and held) deadline jobs EDF, best-effort by submit, then not admitted."""
        p = self.pending
        return (sorted((j for j in p if _deadline(j) is not None and j.id not in self.refused),
                       key=_edf)
                + [j for j in p if _deadline(j) is None]
                + sorted((j for j in p if j.id in self.refused), key=_edf))

    def reclaim(self, need: int, job: JobView) -> int:
        """Shrink running elastic jobs to their floor to free `need` GPUs; returns GPUs freed."""
        order = sorted((j for j in self.elastic.values() if _deadline(j) is None),
                       key=submit_key, reverse=True)
        order += sorted((j for j in self.elastic.values() if j.id in self.shares),
                        key=_edf, reverse=True)
        def low(v: JobView) -> int:
            return self.floor[v.id] if v.id in self.floor else self.shares[v.id].gpus

        if sum(max(0, self.size[v.id] - low(v)) for v in order) < need:
            return 0  # shrinking cannot make room: shrink nobody
        got = 0
        for v in order:
            if got >= need or self.size[v.id] <= low(v):
                continue
            opts = [c for c in self.counts(v) if low(v) <= c < self.size[v.id]]
            fit = [c for c in opts if self.size[v.id] - c >= need - got]
            new = max(fit) if fit else min(opts, default=self.size[v.id])
            got += self.size[v.id] - new
            self.size[v.id] = new
            self.notes[v.id] = f"shrink to {new} GPUs to start job {job.id} (deadline first)"
        return got

    def allocate_now(self, edf: list[JobView]) -> None:
        for j in edf:
            if j.id in self.elastic and j.id in self.shares:
                extra = self.shares[j.id].gpus - j.gpus
                if 0 < extra <= self.free:
                    self.free -= extra
                    self.size[j.id] = self.shares[j.id].gpus
                    self.notes[j.id] = (f"grow to {self.size[j.id]} GPUs to meet deadline "
                                        f"{fmt_time(_deadline(j) or 0.0)}")
        for j in self.ranked():
            if j.held:
                continue
            share = self.shares.get(j.id)
            g = share.gpus if share else self.counts(j)[0]
            if g > self.free and share is not None and share.start <= self.now:
                self.free += self.reclaim(g - self.free, j)
            if g <= self.free:
                self.free -= g
                self.start[j.id] = g

    # 3. Leftover GPUs: elastic scaling --------------------------------------------------------

    def grow(self) -> None:
        by_id = {j.id: j for j in self.pending} | self.elastic
        while self.free > 0:
            best: tuple[float, JobId, int] | None = None
            for jid, x in [*self.start.items(), *self.size.items()]:
                job = by_id[jid]
                running = jid in self.elastic
                if (running and x < job.gpus) or math.isinf(self.rem(job, x)):
                    continue  # being shrunk for someone else, or nothing known
                y = next((c for c in self.counts(job) if c > x), None)
                if y is None or y - x > self.free:
                    continue
                cost = self.resize_cost_s if running and x == job.gpus else 0.0
                saved = self.rem(job, x) - self.rem(job, y) - cost
                if self.rem(job, y) > self.rem(job, x) * (1 - self.min_gain) or saved <= 0:
                    continue
                if best is None or (saved / (y - x), jid) > best[:2]:
                    best = (saved / (y - x), jid, y)
            if best is None:
                return
            _, jid, y = best
            target = self.size if jid in self.elastic else self.start
            self.free -= y - target[jid]
            target[jid] = y
            self.grown.add(jid)

    # Decision ---------------------------------------------------------------------------------

    def decision(self, policy: str) -> Decision:
        ranked = []
        for j in self.ranked():
            d = _deadline(j)
            if j.id in self.refused:
                why = self.refused[j.id]
            elif d is None:
                why = "best-effort (no deadline), submit order"
            elif j.held:
                why = f"EDF, deadline {fmt_time(d)}, held: not planned"
            else:
                why = f"EDF, deadline {fmt_time(d)}, {self.shares[j.id].why}"
            if j.id in self.grown:
                why += f"; given {self.start[j.id]} GPUs from leftover"
            share = self.shares.get(j.id)
            g = self.start.get(j.id, share.gpus if share else self.counts(j)[0])
            ranked.append((j, why, g if gpu_range(j) else None))
        resizes = []
        for jid, g in sorted(self.size.items(), key=lambda e: id_key(e[0])):
            j = self.elastic[jid]
            if g == j.gpus:
                continue
            parts = [self.notes[jid]] if jid in self.notes else []
            if jid in self.grown:
                parts.append(f"leftover GPUs: est {fmt_dur(self.rem(j, j.gpus))} -> "
                           f"{fmt_dur(self.rem(j, g))}")
            if jid in self.refused:
                parts.append(self.refused[jid])
            resizes.append(Resize(job_id=jid, gpus=g, reason="; ".join(parts)))
        return Decision(policy=policy, order=orders(ranked), resizes=tuple(resizes))


def resizable(j: JobView) -> bool:
    """A running job this policy may resize: managed, plainly RUNNING, elastic, with a range."""
    return (j.managed and j.state is JobState.RUNNING and j.intent is not None
            and j.intent.elastic and gpu_range(j) is not None)


def _deadline(j: JobView) -> float | None:
    return j.intent.deadline if j.intent else None


def _edf(j: JobView) -> tuple[float, float, tuple[tuple[int, str], ...]]:
    d = _deadline(j)
    return (d if d is not None else math.inf, *submit_key(j))


@dataclass(frozen=True, kw_only=True)
class ElasticFlow:
    name: str = field(default=NAME, init=False)
    resize_cost_s: float = 30.0
    """Restart time assumed for resizing a running elastic job (checkpoint, requeue, reload)."""
    min_gain: float = 0.1
    """Leftover GPUs: a step must cut the job's remaining time by at least this fraction."""

    def __post_init__(self) -> None:
        if self.resize_cost_s < 0 or not 0 <= self.min_gain < 1:
            raise ValueError("resize_cost_s must be >= 0 and min_gain in [0, 1)")

    def may_resize(self, job: JobView) -> bool:
        """Resizing (capabilities.py): running elastic managed jobs with a GPU range."""
        return resizable(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        r = _Round(snapshot, self.resize_cost_s, self.min_gain)
        edf = r.plan()
        r.allocate_now(edf)
        r.grow()
        return r.decision(self.name)


def new(**options: Any) -> ElasticFlow:
    """Options: resize_cost_s (30.0), min_gain (0.1)."""
    return build(ElasticFlow, options)
