"""`deadline` as it was before it was made fast (issue 9): every pending job planned from its
view at every call, every running job's end estimated at every call, reasons formatted at once.
The reference the fast policy must agree with, decision for decision
(tests/policies/test_deadline_fast.py)."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, ServiceClass
from slurm_rl.policies.capacity import Capacity, job_layout
from slurm_rl.policies.estimates import Estimate, Source, estimate_remaining, remaining_at
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key

NAME = "deadline"  # the same name: decisions compare equal


@dataclass(frozen=True, kw_only=True)
class _Plan:
    job: JobView
    counts: tuple[int, ...]
    est: Estimate | None
    sort: tuple[int, int, float] = (0, 0, 0.0)
    """(group, subgroup, key) as in the module docstring."""
    base: int = 0
    why: str = ""

    def rem(self, gpus: int) -> float:
        return remaining_at(self.job, self.est, gpus) if self.est else math.inf


class _Starts:
    """When a pending job could start at g GPUs: now if they fit on the nodes now, else when
    enough running jobs are expected to end (their estimates; GPUs counted cluster-wide). When
    running jobs of unknown duration hold the GPUs it cannot tell, and says now (optimistic)."""

    def __init__(self, snapshot: ClusterSnapshot, cap: Capacity) -> None:
        self.now, self.cap, self.free = snapshot.time, cap, cap.total_free
        ends = []
        for j in snapshot.running:
            est = estimate_remaining(j, snapshot.time)
            if est is not None:
                ends.append((snapshot.time + est.seconds, j.gpus))
        ends.sort()
        self.times = [t for t, _ in ends]
        self.freed = list(itertools.accumulate(g for _, g in ends))

    def at(self, job: JobView, gpus: int) -> float:
        if self.cap.fits(job_layout(job, gpus, self.cap.node_cap)):
            return self.now
        i = bisect.bisect_left(self.freed, gpus - self.free)
        return max(self.now, self.times[i]) if i < len(self.times) else self.now


@dataclass(frozen=True, kw_only=True)
class DeadlinePolicy:
    name: str = field(default=NAME, init=False)
    # Declares no capability (capabilities.py): it only orders jobs and sets GPU counts, so
    # the simulator may skip decide() calls that could not change anything.
    min_gain: float = 0.2
    """An extra GPU step must shorten the predicted remaining time by at least this fraction."""
    urgent_share: float = 0.25
    """A user's deadline jobs (not besteffort) hold and ask for at most this share of the
    cluster's GPUs ahead of others (issue 11 item 7)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        if not (isinstance(self.urgent_share, (int, float)) and 0 < self.urgent_share <= 1):
            raise ValueError(f"urgent_share must be a number in (0, 1], got {self.urgent_share!r}")

    def _plan(self, job: JobView, now: float, starts: _Starts, total: int) -> _Plan:
        rng = gpu_range(job)
        p = _Plan(job=job, counts=tuple(allowed_counts(*rng, starts.cap.node_cap, total) if rng
                                        else [job.gpus]),
                  est=estimate_remaining(job, now))
        lo = p.counts[0]
        src = f" ({p.est.source.value})" if p.est else ""
        it = job.intent
        cls = it.service_class if it else ServiceClass.STANDARD
        be = cls is ServiceClass.BESTEFFORT
        in_time = 4 if be else (0 if cls is ServiceClass.CRITICAL else 1)
        d = it.deadline if it else None
        if d is None:
            why = f"no deadline: by age, submitted {fmt_time(job.submit_time)}"
            return replace(p, sort=(4, 1, 0.0) if be else (3, 0, 0.0), base=lo,
                           why=f"besteffort, {why}" if be else why)
        if p.est is None:
            return replace(p, sort=(in_time, 0, d - now), base=lo,
                           why=f"{cls.value}, deadline {fmt_time(d)}, duration unknown: "
                               f"slack <= {fmt_dur(d - now)}")
        start = {g: starts.at(job, g) for g in p.counts}
        end = {g: start[g] + p.rem(g) for g in p.counts}
        ok = [g for g in p.counts if end[g] <= d]
        if ok:
            g = ok[0]
            slack = d - end[g]
            when = "" if start[g] <= now else f", starts in ~{fmt_dur(start[g] - now)}"
            return replace(p, sort=(in_time, 0, slack), base=g,
                           why=f"{cls.value}, slack {fmt_dur(slack)}, deadline {fmt_time(d)}, "
                               f"needs {g} GPUs (est {fmt_dur(p.rem(g))}{src}{when})")
        if_now = [g for g in p.counts if now + p.rem(g) <= d]
        if not if_now and p.est.source is Source.TIME_LIMIT:
            return replace(p, sort=(in_time, 0, d - now), base=lo,
                           why=f"{cls.value}, deadline {fmt_time(d)}, time limit "
                               f"{fmt_dur(p.rem(lo))} is longer than the {fmt_dur(d - now)} left "
                               f"(an upper bound only): slack <= {fmt_dur(d - now)}")
        best = min(p.counts, key=lambda g: (end[g], g))
        late = end[best] - d
        if not if_now and it is not None and it.hard:
            best = min(p.counts, key=lambda g: (p.rem(g), g))
            return replace(p, sort=(5, 0, 0.0), base=lo,
                           why=f"demoted: hard deadline {fmt_time(d)} unreachable "
                               f"(est {fmt_dur(p.rem(best))} at {best} GPUs{src}, "
                               f"{fmt_dur(d - now)} left)")
        sort = (4, 1, 0.0) if be else (2, 0 if cls is ServiceClass.CRITICAL else 1, late)
        kind = "hard" if it is not None and it.hard else "soft"
        what = (f"at risk: would make it only if started now; expected {fmt_dur(late)} late"
                if if_now else f"missed by {fmt_dur(late)}")
        return replace(p, sort=sort, base=best,
                       why=f"{cls.value}, {kind} deadline {fmt_time(d)} {what} at {best} "
                           f"GPUs (est {fmt_dur(p.rem(best))}{src}): by lateness")

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now = snapshot.time
        cap = Capacity.of(snapshot)
        starts = _Starts(snapshot, cap)
        total = snapshot.gpus_total
        plans = [self._plan(j, now, starts, total) for j in managed_pending(snapshot)]
        plans.sort(key=lambda p: (p.sort, submit_key(p.job)))
        plans = self._cap(plans, snapshot)
        counts = self._counts(plans, cap)
        ranked = []
        for p in plans:
            g = counts.get(p.job.id, p.base)
            why = p.why
            if g != p.base:
                why += (f"; given {g} GPUs (free, est {fmt_dur(p.rem(p.base))} -> "
                        f"{fmt_dur(p.rem(g))})")
            ranked.append((p.job, why, g if gpu_range(p.job) else None))
        return Decision(policy=self.name, order=orders(ranked))

    def _cap(self, plans: list[_Plan], snapshot: ClusterSnapshot) -> list[_Plan]:
        """A user's deadline jobs (not besteffort) ordered ahead of jobs without a deadline
        (groups 0-2) take, in this order, what their running deadline jobs leave of
        urgent_share x the cluster's GPUs; those that do not fit are ordered as jobs without a
        deadline (group 3). Jobs without a user are never capped; running jobs count only when
        managed."""
        def urgent(it):
            return (it is not None and it.deadline is not None
                    and it.service_class is not ServiceClass.BESTEFFORT)

        if len({p.job.user for p in plans}) < 2:  # a user alone in the queue passes nobody
            return plans
        used = {}
        for j in snapshot.running:
            if j.user and j.managed and urgent(j.intent):
                used[j.user] = used.get(j.user, 0) + j.gpus
        limit = self.urgent_share * snapshot.gpus_total
        out = []
        for p in plans:
            user = p.job.user
            if user and urgent(p.job.intent) and p.sort[0] <= 2:
                if used.get(user, 0) + p.base > limit:
                    p = replace(p, sort=(3, 0, 0.0), base=p.counts[0],
                                why=f"urgent share of user {user} over "
                                    f"{self.urgent_share * 100:.4g} %: ordered as standard, "
                                    f"no deadline (uncapped: {p.why})")
                else:
                    used[user] = used.get(user, 0) + p.base
            out.append(p)
        out.sort(key=lambda p: (p.sort, submit_key(p.job)))
        return out

    def _counts(self, plans: list[_Plan], cap: Capacity) -> dict[JobId, int]:
        """GPU counts for jobs that can start now: base, or more while it pays (see module)."""
        probe = cap.copy()
        starters = [p for p in plans if not p.job.held
                    and probe.take(job_layout(p.job, p.base, cap.node_cap))]
        layouts = [job_layout(p.job, p.base, cap.node_cap) for p in starters]
        free = cap.copy()
        out: dict[JobId, int] = {}
        for i, p in enumerate(starters):
            g = p.base
            for c in (c for c in p.counts if c > p.base):
                if p.rem(c) > p.rem(g) * (1 - self.min_gain):
                    break
                trial = free.copy()
                if not trial.take(job_layout(p.job, c, cap.node_cap)):
                    break
                if not all(trial.take(parts) for parts in layouts[i + 1:]):
                    break
                g = c
            free.take(job_layout(p.job, g, cap.node_cap))
            out[p.job.id] = g
        return out


def new(**options: Any) -> DeadlinePolicy:
    """Options: min_gain (0.2), urgent_share (0.25)."""
    return build(DeadlinePolicy, options)
