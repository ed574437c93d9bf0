"""`deadline`: the daemon's deadline-aware heuristic: reserve each deadline
job's minimum share, run the rest best-effort shortest first, give spare GPUs where they
shorten a job the most.

Estimates. A job's predicted remaining time at g GPUs is the first known of
`JobView.predicted_remaining_s`, progress ((steps_total − steps_done) / rate), intent.total_steps
at the profiled throughput of its model, or the time limit (an upper bound), moved to g along the
model's speed-up curve (`estimates.remaining_at`); never a true duration. Candidate counts: the
job's count, or, with an intent GPU range, its ends and the powers of two between them that
place within one node or on whole nodes (`gpu_counts.allowed_counts`).

1. Plan (allocation.py; one job's records: jobs.py; the profile: profile.py). GPUs in use over
   time form a cluster-wide profile: running jobs hold theirs until their estimated ends
   (unknown: for ever), running elastic jobs only their first count (with `suspend`, those
   without a reservation nothing). Deadline jobs then reserve (besteffort-class ones never),
   running elastic ones first (critical first, then by deadline), then the pending ones in
   submit order (an older reservation is not pushed out by a newcomer in this plan): the
   *minimum share*, the fewest GPUs whose predicted time, started at the earliest time the
   profile has room (now, for a running job, which pays `resize_cost_s` for a count other than
   its own), ends by the deadline. When some job finds no room, the plan is made again with
   running and pending jobs together cheapest first (GPU-seconds of the fewest GPUs that make
   the deadline started now: a running job that needs many more GPUs may give way to several
   that need few), and the plan that reserves more jobs is kept (ties: the first). A job with
   no such count is *late*: run best-effort (a hard one that misses even started now at its
   fastest count is *demoted*, last). A job whose duration is unknown, or bounded only by a
   time limit longer than the time left, holds its first count until its deadline, unchecked (a
   bound proves no miss).
2. No buying priority (urgency.py): a user's reserved pending jobs may ask for at most
   `urgent_share` of the GPUs at their shares (running deadline jobs counted first, then by
   class and deadline); those beyond it are planned again as best-effort jobs without a
   deadline. Late jobs get no boost, so they use no share. Only while jobs of two or more users
   wait; jobs without a user are never capped.
3. Now. A running elastic job whose share exceeds its count grows to it. Reserved pending jobs
   whose planned start is now start at their share; when one does not fit, running elastic jobs
   give back GPUs above their floors (their share, or first count), those without a reservation
   first, widest first; every start and resize must place with all of the decision's,
   applied in turn as the simulator does (shrinks, then grows, then starts). Then the
   best-effort jobs (late, capped, without a deadline), by submit time + predicted remaining
   time at their first count (shortest first among jobs of one age; a job that has waited its
   own length passes every later one, so nothing starves), each at its first count, where it
   fits and delays no reservation of the profile; they may take back GPUs that running jobs
   without a reservation hold above their floors.
4. Spare GPUs, one allowed step at a time, to the starting and running elastic jobs whose
   predicted remaining time drops the most per extra GPU (a running job pays the restart once),
   while a step cuts it by at least `min_gain`.
Rank order: reserved jobs (critical first, then by deadline), best-effort jobs (their order),
demoted jobs.

Cost (docs/policies.md): what a pending job's view alone decides (estimate, counts, remaining
times, order keys, past hope) is kept while the view is the same object (state.py: the one
object the policy keeps, `Stateful`); the running jobs' profile is built only once a job does
not fit now. tests/policies/test_deadline_fast.py
checks it against the same rules written plainly (reference_deadline.py). A reason, once read
(the daemon reads all of them every cycle), is kept with what of the plan it was made from
(`_why_key`), and an entry whose rank, count and reason are unchanged is the last decision's
JobOrder again; tests/policies/test_deadline_kept.py checks both against a fresh policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobView,
    Preempt,
    Resize,
    ServiceClass,
    id_key,
)
from slurm_rl.policies import urgency
from slurm_rl.policies.capabilities import CycleState
from slurm_rl.policies.deadline.allocation import Allocation, Shape
from slurm_rl.policies.deadline.jobs import Fate, Job, Share, resizable
from slurm_rl.policies.deadline.state import DeadlineState
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.gpu_counts import gpu_range
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, orders
from slurm_rl.policies.urgency import DEFAULT_SHARE, check_share, deadline_not_besteffort

NAME = "deadline"


@dataclass(frozen=True, kw_only=True)
class DeadlinePolicy:
    """Resizing, Preempting, Gated and Stateful (capabilities.py; declared in __init__.py)."""

    name: str = field(default=NAME, init=False)
    min_gain: float = 0.1
    """A spare GPU step must shorten the predicted remaining time by at least this fraction."""
    resize_cost_s: float = 30.0
    """Restart time assumed for resizing a running elastic job (checkpoint, requeue, reload)."""
    suspend: bool = True
    """Running elastic jobs without a reservation may be suspended (requeued) so that a
    reserved share starts on time."""
    urgent_share: float = DEFAULT_SHARE
    """A user's urgent jobs (urgency.py) hold and ask for at most this share of the GPUs; the
    rest are ordered as jobs without a deadline."""
    _state: DeadlineState = field(default_factory=DeadlineState, init=False, repr=False,
                                  compare=False)
    """What it keeps between calls to save work (state.py; never changes a decision)."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1), got {self.min_gain}")
        if not self.resize_cost_s >= 0:
            raise ValueError(f"resize_cost_s must be >= 0, got {self.resize_cost_s}")
        check_share(self.urgent_share)

    def may_resize(self, job: JobView) -> bool:
        """Resizing (capabilities.py): running elastic managed jobs with a GPU range."""
        return resizable(job)

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): the jobs it may resize, when `suspend` is on."""
        return self.suspend and resizable(job)

    def reset(self) -> None:
        """Stateful (capabilities.py): forget the records kept between calls (state.py)."""
        self._state.reset()

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> bool:
        """Gated (capabilities.py): True where the Decision could change nothing: no running
        job it may resize or suspend, and either no pending job fits the free GPUs (nothing
        starts whatever the order says) or one job without a GPU range is all that is pending.
        As a Preempting policy it is otherwise asked at every event in the simulator; with
        this, on a trace without elastic jobs, about as often as an order-only policy.
        (`decide` answers in full whenever asked.)"""
        if self._state.elastic_ids(snapshot):
            return False
        pending = snapshot.pending
        if len(pending) == 1 and gpu_range(pending[0]) is None:
            return True  # (one job and no count to give: its rank alone changes nothing)
        return not self._state.may_place(snapshot)

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        """Plan, now, spare GPUs (allocation.py), then the Decision: ranks with their counts
        and reasons, resizes and suspensions."""
        shape = Shape.of(snapshot)
        state = self._state
        r = Allocation(snapshot, state.pending_jobs(snapshot, shape.node_cap, shape.total),
                       min_gain=self.min_gain, resize_cost_s=self.resize_cost_s,
                       capped=partial(self._capped, snapshot), shape=shape,
                       elastic=state.elastic(snapshot), suspend=self.suspend,
                       stands=state.claims)
        ranked_jobs = r.allocate()
        r.spare()
        resizes, preempts = _changes(r)
        ranked, known = self._ranked(r, ranked_jobs)
        made = orders(ranked, kept={o.job_id: o for o in state.orders} if known else None)
        state.orders = made
        return Decision(policy=self.name, order=made, resizes=resizes, preemptions=preempts)

    def _ranked(self, r: Allocation, ranked_jobs: list[Job]) -> tuple[list[Ranked], int]:
        """Each pending job in rank order with its reason and, for a job with a GPU range,
        its count: where it starts now, else its share, else its first count; and how many
        reasons were known already (the same as when last read: `_why_key`)."""
        ranked: list[Ranked] = []
        known = 0
        start, share, reason = r.start, r.share, partial(_why, r, self.urgent_share)
        for j in ranked_jobs:
            if not j.ranged:  # most jobs: no count to give
                g, given = j.counts[0], None
            else:
                jid = j.view.id
                sh = share.get(jid)
                g = given = start.get(jid, sh.gpus if sh is not None else j.counts[0])
            w = j.why
            if w is not None and w[0] == _why_key(r, j, g):
                ranked.append((j.view, w[1], given))
                known += 1
            else:
                ranked.append((j.view, _Remembered(j, r, partial(reason, j, g), g), given))
        return ranked, known

    def _capped(self, snapshot: ClusterSnapshot, urgent: list[tuple[Job, int]]) -> set[JobId]:
        """Reserved pending jobs (job, share) over their user's urgent share (urgency.py),
        taken in plan order."""
        if not urgent:
            return set()
        urgent.sort(key=lambda e: e[0].plan_key)
        waiting = {v.user for v in snapshot.pending if v.managed}
        over = urgency.capped_in(snapshot, [(j.user, g) for j, g in urgent],
                                 deadline_not_besteffort, self.urgent_share, waiting)
        return {urgent[k][0].view.id for k in over}


def _changes(r: Allocation) -> tuple[tuple[Resize, ...], tuple[Preempt, ...]]:
    """The running elastic jobs' new counts as resizes, and those at 0 as suspensions, by id."""
    resizes, preempts = [], []
    for jid, g in sorted(r.size.items(), key=lambda e: id_key(e[0])):
        rj = r.run_jobs[jid]
        if g == 0:
            preempts.append(Preempt(job_id=jid, reason=r.notes.get(jid, "suspended")))
        elif g != rj.view.gpus:
            resizes.append(Resize(job_id=jid, gpus=g, reason=_why_resize(r, rj, g)))
    return tuple(resizes), tuple(preempts)


# -- reasons, formatted only when read (each rank holds a `partial` of `_why`) ----------------

class _Remembered:
    """A job's reason, formatted when first read and then kept in its `Job` record with what
    of the plan it was made from (`_why_key`), unless that names a time relative to now."""

    __slots__ = ("g", "job", "make", "plan")

    def __init__(self, job: Job, plan: Allocation, make: Callable[[], str], g: int) -> None:
        self.job, self.plan, self.make, self.g = job, plan, make, g

    def __call__(self) -> str:
        text = self.make()
        key = _why_key(self.plan, self.job, self.g)
        if key is not None:
            self.job.why = (key, text)
        return text


def _why_key(r: Allocation, j: Job, g: int) -> tuple[object, ...] | None:
    """Everything of the plan `_why(r, share, j, g)` reads besides the job's own record (which
    is fixed for its view), or None where its text depends on the time (a planned start in some
    time, a deadline some time away)."""
    jid = j.view.id
    fate = r.fate[jid]
    if fate is Fate.DEMOTED:
        return None
    grown = jid in r.grown
    if fate is Fate.RESERVED:
        sh = r.share[jid]
        if sh.start > r.now:
            return None
        return (fate, g, grown, sh.gpus, sh.dur)
    if fate is Fate.UNKNOWN:
        return (fate, g, grown, r.share[jid].gpus)
    return (fate, g, grown, jid in r.start)


def _why(r: Allocation, share: float, j: Job, g: int) -> str:
    jid = j.view.id
    fate = r.fate[jid]
    src = f" ({j.est.label})" if j.est is not None else ""
    d = j.deadline
    grown = (f"; given {g} GPUs (spare, est {fmt_dur(j.rem(j.counts[0]))} -> "
             f"{fmt_dur(j.rem(g))})" if jid in r.grown else "")
    if fate is Fate.RESERVED:
        assert d is not None
        sh = r.share[jid]
        return f"{j.cls.value}, deadline {fmt_time(d)}, {_share(r, sh, src)}{grown}"
    if fate is Fate.UNKNOWN:
        assert d is not None
        return (f"{j.cls.value}, deadline {fmt_time(d)}, duration unknown or only bounded: "
                f"holds {r.share[jid].gpus} GPUs until it, unchecked")
    if fate is Fate.DEMOTED:
        assert d is not None
        best = min(j.counts, key=lambda c: (j.rem(c), c))
        return (f"demoted: hard deadline {fmt_time(d)} unreachable (est {fmt_dur(j.rem(best))} "
                f"at {best} GPUs{src}, {fmt_dur(d - r.now)} left)")
    first = j.counts[0]
    be = (f"best-effort, shortest first by age: submitted {fmt_time(j.view.submit_time)}, "
          f"est {fmt_dur(j.rem(first))} at {first} GPUs{src}")
    start = "; starts now" if jid in r.start else ""
    if fate is Fate.LATE:
        assert d is not None
        kind = "hard" if j.hard else "soft"
        text = (f"{j.cls.value}, {kind} deadline {fmt_time(d)} cannot be met given the "
                f"reservations ahead: {be}")
    elif fate is Fate.CAPPED:
        assert d is not None
        text = urgency.capped_reason(j.user, share, f"{j.cls.value}, deadline {fmt_time(d)}")
        text = f"{text}: {be}"
    elif j.view.held:
        text = f"held: {be}"
    elif j.cls is ServiceClass.BESTEFFORT:
        dtext = "" if d is None else f", deadline {fmt_time(d)} reserves nothing"
        text = f"besteffort class{dtext}, after the other classes: {be}"
    else:
        text = f"no deadline: {be}"
    return f"{text}{start}{grown}"


def _share(r: Allocation, sh: Share, src: str) -> str:
    when = ("starts now" if sh.start <= r.now else f"planned start in {fmt_dur(sh.start - r.now)}")
    dur = "" if sh.dur is None else f" (est {fmt_dur(sh.dur)}{src})"
    return f"min share {sh.gpus} GPUs{dur}, {when}"


def _why_resize(r: Allocation, rj: Job, g: int) -> str:
    jid = rj.view.id
    parts = [r.notes[jid]] if jid in r.notes else []
    if jid in r.grown:
        parts.append(f"spare GPUs: est {fmt_dur(rj.rem(rj.view.gpus))} -> {fmt_dur(rj.rem(g))}")
    return "; ".join(parts) or f"to {g} GPUs"


def new(**options: Any) -> DeadlinePolicy:
    """Options: min_gain (0.1), resize_cost_s (30.0), suspend (true), urgent_share (0.25)."""
    return build(DeadlinePolicy, options)
