"""`deadline`: the daemon's deadline-aware heuristic (issue 3). Non-preemptive.

For each managed pending job, the predicted remaining time at a GPU count g is the first known of
`JobView.predicted_remaining_s`, progress ((steps_total − steps_done) / rate), intent.total_steps
at the profiled throughput of its model, or the time limit (an upper bound), moved to g along the
model's speed-up curve (`perfmodel.scaled_rate`). Candidate counts: the job's count, or, with an
intent GPU range, its ends and the powers of two between them that place within one node or on
whole nodes (`gpu_counts.allowed_counts`). Its expected start at g is now if g GPUs are free on the
nodes now, else when enough running jobs are expected to end (their own estimates; now if they
cannot tell). Expected end = start + remaining; slack = deadline − expected end.

Order (ties by submit time, then id):
  1. deadline jobs that can make it, critical class first, then standard, each by slack at the
     fewest GPUs that make it;
  2. soft-deadline jobs that will miss, and hard ones at risk (they would make it only if
     started now), critical first, least late first: a job that is only a little late finishes
     first and a hopeless wide one does not hold the whole queue behind its reservation;
  3. jobs without a deadline, by age;
  4. besteffort jobs (never delay the other classes): those that can make a deadline by slack,
     then the rest by age;
  5. hard-deadline jobs that could not make it even if started now at their most GPUs: demoted
     to the back rather than allowed to block others.
A deadline job whose duration is unknown counts as able to make it, with slack deadline − now;
so does one known only by a time limit longer than the time left (a bound proves no miss).

No buying priority (urgency.py): a user's jobs in groups 1-2 may hold and ask for at most
`urgent_share` of the cluster's GPUs (running deadline jobs counted first, then the pending ones
in this order); those beyond it are ordered in group 3, by age. Only while jobs of two or more
users wait; jobs without a user are never capped.

GPU counts (jobs with a range only): the base is the fewest GPUs that make the deadline; for a
late job the count with the earliest expected end; else the range minimum. Walking the order over
the free GPUs per node, a job that can start now may get a larger count, one step at a time,
while each step cuts its predicted remaining time by at least `min_gain` and every job after it
that could start now at its base still can. A job that cannot start now keeps its base.

Cost (docs/simulator.md, benchmarks): what a pending job's view alone decides (estimate, counts,
layouts, remaining times) is kept while the view is the same object (views are immutable, and a
pending job's estimate does not move with the clock); the running jobs' expected ends are worked
out only when some job does not fit now; start times are shared by jobs of one shape; reasons
are formatted when read. tests/policies/test_deadline_fast.py checks it against the plain
version (reference_deadline.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, ServiceClass
from slurm_rl.policies import urgency
from slurm_rl.policies.capacity import Capacity, job_layout, job_parts
from slurm_rl.policies.estimates import Estimate, Source, estimate_remaining, remaining_at
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, Reason, managed_pending, orders, submit_key
from slurm_rl.policies.start_times import Starts
from slurm_rl.policies.urgency import DEFAULT_SHARE, check_share, deadline_not_besteffort

NAME = "deadline"

_CRIT, _BE = ServiceClass.CRITICAL, ServiceClass.BESTEFFORT
_BE_LATE = (4, 1, 0.0)
"""A late besteffort job's place: with the besteffort jobs that have no deadline."""


@dataclass(slots=True, kw_only=True)
class _Job:
    """What a pending job's view alone decides, for the node size (and, with a GPU range, the
    cluster size) it was made for."""

    view: JobView
    node_cap: int
    total: int | None
    """The cluster's usable GPUs the counts were capped at (None: no range, not needed)."""
    counts: tuple[int, ...]
    shapes: tuple[tuple[tuple[int, ...], int], ...]
    """(layout, GPUs) at each count: what its start time depends on."""
    rem: dict[int, float]
    """Predicted remaining time at each count (inf: unknown)."""
    est: Estimate | None
    src: str
    cls: ServiceClass
    deadline: float | None
    hard: bool
    in_time: int
    """Its group when it can make its deadline (critical 0, standard 1, besteffort 4)."""
    late_group: int
    """Its subgroup of group 2 when late (critical 0, standard 1; besteffort -1: _BE_LATE)."""
    special: bool
    """A GPU range, or a submit time that is NaN (see decide)."""
    user: str
    """Its user where the urgent share may cap it (a user, a deadline, not besteffort), else ""."""
    fixed: _Plan | None = None
    """The plan when it does not depend on the clock (no deadline)."""


@dataclass(slots=True)
class _Plan:
    job: _Job
    sort: tuple[int, int, float]
    """(group, subgroup, key) as in the module docstring."""
    base: int
    why: Reason


@dataclass(frozen=True, kw_only=True)
class DeadlinePolicy:
    name: str = field(default=NAME, init=False)
    # Declares no capability (capabilities.py): it only orders jobs and sets GPU counts, so
    # the simulator may skip decide() calls that could not change anything. The memo below
    # changes no decision (tests/policies/test_deadline_fast.py).
    min_gain: float = 0.2
    """An extra GPU step must shorten the predicted remaining time by at least this fraction."""
    urgent_share: float = DEFAULT_SHARE
    """A user's urgent jobs (urgency.py) hold and ask for at most this share of the GPUs; the
    rest are ordered as standard jobs without a deadline."""
    _jobs: dict[JobId, _Job] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)
    """The last call's pending jobs (see _Job)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        check_share(self.urgent_share)

    def _job(self, view: JobView, now: float, node_cap: int, total: int | None) -> _Job:
        rng = gpu_range(view)
        counts = tuple(allowed_counts(*rng, node_cap, total) if rng and total is not None
                       else [view.gpus])
        est = estimate_remaining(view, now)  # pending: the clock plays no part
        it = view.intent
        cls = it.service_class if it else ServiceClass.STANDARD
        j = _Job(view=view, node_cap=node_cap, total=total if rng else None, counts=counts,
                 shapes=tuple((job_parts(view, g, node_cap), g) for g in counts),
                 rem={g: remaining_at(view, est, g) if est else math.inf for g in counts},
                 est=est, src=f" ({est.source.value})" if est else "", cls=cls,
                 deadline=it.deadline if it else None, hard=it is not None and it.hard,
                 in_time=4 if cls is _BE else (0 if cls is _CRIT else 1),
                 late_group=-1 if cls is _BE else (0 if cls is _CRIT else 1),
                 special=bool(rng) or math.isnan(view.submit_time),
                 user=view.user if view.user and deadline_not_besteffort(it) else "")
        if j.deadline is None:
            be = cls is _BE
            j.fixed = _Plan(j, (4, 1, 0.0) if be else (3, 0, 0.0), counts[0],
                            partial(_why_no_deadline, be, view.submit_time))
        return j

    def _plan(self, j: _Job, now: float, starts: Starts) -> _Plan:
        if j.fixed is not None:
            return j.fixed
        d = j.deadline
        assert d is not None
        if j.est is None:
            return _Plan(j, (j.in_time, 0, d - now), j.counts[0],
                         partial(_why_unknown, j.cls, d, now))
        counts, rem = j.counts, j.rem
        if len(counts) == 1:  # most jobs: no GPU range
            g = counts[0]
            start = starts.at(j.shapes[0])
            end = start + rem[g]
            if end <= d:
                slack = d - end
                return _Plan(j, (j.in_time, 0, slack), g,
                             partial(_why_ok, j, g, slack, start - now))
            at_risk = now + rem[g] <= d
            if at_risk or not (j.hard or j.est.source is Source.TIME_LIMIT):
                late = end - d  # late, as in _late (the usual case, inline)
                return _Plan(j, (2, j.late_group, late) if j.late_group >= 0 else _BE_LATE, g,
                             partial(_why_late, j, g, late, at_risk))
            return _late(j, now, g, end, at_risk)
        start_at = {g: starts.at(shape) for g, shape in zip(counts, j.shapes, strict=True)}
        end_at = {g: start_at[g] + rem[g] for g in counts}
        for g in counts:
            if end_at[g] <= d:
                slack = d - end_at[g]
                return _Plan(j, (j.in_time, 0, slack), g,
                             partial(_why_ok, j, g, slack, start_at[g] - now))
        best = min(counts, key=lambda g: (end_at[g], g))
        return _late(j, now, best, end_at[best], any(now + rem[g] <= d for g in counts))

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now = snapshot.time
        cap = Capacity.of(snapshot)
        node_cap = cap.node_cap
        starts = Starts(snapshot, cap)
        total: int | None = None  # the cluster's usable GPUs, once a job with a range needs it
        old, jobs, plans, special, named = self._jobs, {}, [], [], False
        for v in managed_pending(snapshot):
            j = old.get(v.id)
            if j is not None and (j.view is not v or j.node_cap != node_cap):
                j = None
            elif j is not None and j.total is not None:  # a range: counts capped at total
                total = snapshot.gpus_total if total is None else total
                j = j if j.total == total else None
            if j is None:
                if total is None and gpu_range(v):
                    total = snapshot.gpus_total
                j = self._job(v, now, node_cap, total)
            jobs[v.id] = j
            plans.append(self._plan(j, now, starts))
            if j.special:
                special.append(j)
            if j.user:
                named = True
        self._jobs.clear()
        self._jobs.update(jobs)
        # Stable: ties keep managed_pending's submit order, as sorting by (sort, submit_key)
        # would (unless a submit time is NaN, which orders nothing).
        if any(j.view.submit_time != j.view.submit_time for j in special):
            plans.sort(key=lambda p: (p.sort, submit_key(p.job.view)))
        else:
            plans.sort(key=_sort_key)
        if named:
            self._cap(plans, snapshot)
        counts = (self._counts(plans, cap) if any(len(j.counts) > 1 for j in special)
                  else {})
        ranked: list[Ranked] = []
        for p in plans:
            j = p.job
            if j.total is None:  # no range: no count to give
                ranked.append((j.view, p.why, None))
                continue
            g = counts.get(j.view.id, p.base)
            why = p.why if g == p.base else partial(_given, p.why, g, j.rem[p.base], j.rem[g])
            ranked.append((j.view, why, g))
        return Decision(policy=self.name, order=orders(ranked))

    def _cap(self, plans: list[_Plan], snapshot: ClusterSnapshot) -> None:
        """Orders as standard, without a deadline, the urgent jobs (sort groups 0-2: the module
        docstring's 1 and 2) that would take their user over the urgent share (urgency.py), and
        re-sorts `plans` if any."""
        urgent = [i for i, p in enumerate(plans) if p.job.user and p.sort[0] <= 2]
        if not urgent:
            return
        over = urgency.capped_in(snapshot, [(plans[i].job.user, plans[i].base) for i in urgent],
                                 deadline_not_besteffort, self.urgent_share,
                                 {p.job.view.user for p in plans})
        if not over:
            return
        for k in over:
            p = plans[urgent[k]]
            j = p.job
            plans[urgent[k]] = _Plan(j, (3, 0, 0.0), j.counts[0],
                                     partial(_why_capped, j.user, self.urgent_share, p.why))
        plans.sort(key=lambda p: (p.sort, submit_key(p.job.view)))

    def _counts(self, plans: list[_Plan], cap: Capacity) -> dict[JobId, int]:
        """GPU counts for jobs that can start now: base, or more while it pays (see module)."""
        probe = cap.copy()
        starters = []
        for p in plans:
            # With no GPU left only a job of no GPUs could start (it needs no node).
            if not p.job.view.held and (probe.total_free > 0 or p.base <= 0) and probe.take(
                    job_layout(p.job.view, p.base, cap.node_cap)):
                starters.append(p)
        layouts = [job_layout(p.job.view, p.base, cap.node_cap) for p in starters]
        free = cap.copy()
        out: dict[JobId, int] = {}
        for i, p in enumerate(starters):
            j = p.job
            g = p.base
            for c in (c for c in j.counts if c > p.base):
                if j.rem[c] > j.rem[g] * (1 - self.min_gain):
                    break
                trial = free.copy()
                if not trial.take(job_layout(j.view, c, cap.node_cap)):
                    break
                if not all(trial.take(parts) for parts in layouts[i + 1:]):
                    break
                g = c
            free.take(job_layout(j.view, g, cap.node_cap))
            out[j.view.id] = g
        return out


def _late(j: _Job, now: float, best: int, end: float, at_risk: bool) -> _Plan:
    """The plan of a deadline job with an estimate that ends too late at every count: `best`,
    the count with the earliest expected end, `end`; `at_risk`: it would make it if started
    now at some count."""
    d = j.deadline
    assert d is not None and j.est is not None
    if not at_risk and j.est.source is Source.TIME_LIMIT:
        return _Plan(j, (j.in_time, 0, d - now), j.counts[0], partial(_why_bound, j, now))
    if not at_risk and j.hard:
        return _Plan(j, (5, 0, 0.0), j.counts[0], partial(_why_demoted, j, now))
    late = end - d
    sort = (2, j.late_group, late) if j.late_group >= 0 else _BE_LATE
    return _Plan(j, sort, best, partial(_why_late, j, best, late, at_risk))


def _sort_key(p: _Plan) -> tuple[int, int, float]:
    return p.sort


# -- reasons, formatted when read -------------------------------------------------------------

def _why_no_deadline(be: bool, submitted: float) -> str:
    why = f"no deadline: by age, submitted {fmt_time(submitted)}"
    return f"besteffort, {why}" if be else why


def _why_unknown(cls: ServiceClass, d: float, now: float) -> str:
    return (f"{cls.value}, deadline {fmt_time(d)}, duration unknown: "
            f"slack <= {fmt_dur(d - now)}")


def _why_ok(j: _Job, g: int, slack: float, wait: float) -> str:
    when = "" if wait <= 0 else f", starts in ~{fmt_dur(wait)}"
    assert j.deadline is not None
    return (f"{j.cls.value}, slack {fmt_dur(slack)}, deadline {fmt_time(j.deadline)}, "
            f"needs {g} GPUs (est {fmt_dur(j.rem[g])}{j.src}{when})")


def _why_bound(j: _Job, now: float) -> str:
    d, lo = j.deadline, j.counts[0]
    assert d is not None
    return (f"{j.cls.value}, deadline {fmt_time(d)}, time limit "
            f"{fmt_dur(j.rem[lo])} is longer than the {fmt_dur(d - now)} left "
            f"(an upper bound only): slack <= {fmt_dur(d - now)}")


def _why_demoted(j: _Job, now: float) -> str:
    d = j.deadline
    assert d is not None
    best = min(j.counts, key=lambda g: (j.rem[g], g))
    return (f"demoted: hard deadline {fmt_time(d)} unreachable "
            f"(est {fmt_dur(j.rem[best])} at {best} GPUs{j.src}, {fmt_dur(d - now)} left)")


def _why_late(j: _Job, best: int, late: float, at_risk: bool) -> str:
    assert j.deadline is not None
    kind = "hard" if j.hard else "soft"
    what = (f"at risk: would make it only if started now; expected {fmt_dur(late)} late"
            if at_risk else f"missed by {fmt_dur(late)}")
    return (f"{j.cls.value}, {kind} deadline {fmt_time(j.deadline)} {what} at {best} "
            f"GPUs (est {fmt_dur(j.rem[best])}{j.src}): by lateness")


def _why_capped(user: str, share: float, why: Reason) -> str:
    return urgency.capped_reason(user, share, why if isinstance(why, str) else why())


def _given(why: Reason, g: int, before: float, after: float) -> str:
    text = why if isinstance(why, str) else why()
    return f"{text}; given {g} GPUs (free, est {fmt_dur(before)} -> {fmt_dur(after)})"


def new(**options: Any) -> DeadlinePolicy:
    """Options: min_gain (0.2), urgent_share (0.25)."""
    return build(DeadlinePolicy, options)
