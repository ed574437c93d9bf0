"""`gittins`: the Gittins index of each job's attained service, per GPU, PREEMPTIVE.

Non-clairvoyant, after the Gittins-index policy Tiresias (Gu et al., NSDI'19) builds on, here
per job rather than in discretised queues: a job's priority is G(a) / GPUs, with G the Gittins
index (1/s) of the duration distribution of the training traces' jobs in the job's GPU-count
bucket (`slurm_rl.policies.gittins_table`, shipped, and rebuilt by `slurm-rl gittins-table
build`), and a its attained run time at its current count. Higher priority first; ties by
submit time.

Attained run time is what a live cluster shows: attained_gpu_s / gpus (GPU-seconds held, across
restarts) minus `restart_cost_s` per restart (time held without progress); never a true
duration.

Preemption as `srtf-oracle` plans it (`plan_preemptions`): a pending job that does not fit
requeues running jobs of lower priority, lowest first, until it fits. Against thrashing (an
index falls as a job runs, so two jobs could swap at every call, each swap paying a restart),
a pending job displaces a running one only if its priority is more than (1 + `margin`) times
the running job's, as Tiresias keeps a running job from being preempted by one of its own queue.

Keeps no state but caches of what it worked out (the same decisions, sooner; not `Stateful`):
each pending view's priority, and the running jobs in victim order, followed through
`ClusterSnapshot.running_changes` (see `_ByPriority`). Never changes GPU counts; reads `gpus`,
`attained_gpu_s`, `restarts`, `submit_time`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from operator import attrgetter
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobOrder, JobView, id_key
from slurm_rl.policies import gittins_table
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.gittins_table import GittinsTable
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, managed_pending, orders
from slurm_rl.policies.preemption import may_preempt as requeueable
from slurm_rl.policies.preemption import plan_preemptions_by_prefix

NAME = "gittins"


@dataclass(frozen=True, kw_only=True)
class Gittins:
    name: str = field(default=NAME, init=False)
    table: str | None = None
    """Path of a table CSV (`slurm-rl gittins-table build --out`); None: the shipped one, built
    from the training clusters."""
    margin: float = 1.0
    """Preempt a running job only if the pending job's priority exceeds (1 + margin) times its
    own (0: whenever higher)."""
    restart_cost_s: float = 30.0
    """Seconds per restart held without progress (the simulator's default restart delay), taken
    off the attained run time."""
    _table: GittinsTable = field(init=False, repr=False, compare=False)
    _mem: _Memory = field(default_factory=lambda: _Memory(), init=False, repr=False,
                          compare=False)

    def __post_init__(self) -> None:
        if self.margin < 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if self.restart_cost_s < 0:
            raise ValueError(f"restart_cost_s must be >= 0, got {self.restart_cost_s}")
        t = gittins_table.shipped() if self.table is None else gittins_table.read(self.table)
        object.__setattr__(self, "_table", t)

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs (not completing,
        resizing or suspended) whose requeue would be carried out (`restartable`)."""
        return requeueable(job)

    def attained_s(self, job: JobView) -> float:
        """Run time so far at the job's count, restarts' lost time taken off."""
        ran = job.attained_gpu_s / max(job.gpus, 1) - job.restarts * self.restart_cost_s
        return ran if ran > 0.0 else 0.0

    def priority(self, job: JobView) -> tuple[float, float, str]:
        """(index / GPUs, attained s, bucket)."""
        a = self.attained_s(job)
        index, bucket = self._table.lookup(job.gpus, a)
        return index / max(job.gpus, 1), a, bucket

    def index_of(self, job: JobView) -> float:
        """`priority(job)[0]`, the same float, found without the rest (the guard ranks every
        running and waiting job by it)."""
        return self._running_prio(job)[0]

    def _curve(self, gpus: int) -> tuple[tuple[float, ...], tuple[float, ...], str]:
        """The table's curve for `gpus` as (attained grid, index, bucket label), cached."""
        c = self._mem.curves.get(gpus)
        if c is None:
            curve = self._table.curve_for(gpus)
            c = self._mem.curves[gpus] = (curve.attained, curve.index, curve.label)
        return c

    def _running_prio(self, job: JobView) -> tuple[float, float, int]:
        """priority(job)[0] (the same float, the lookup inlined), the attained run time before
        clipping at 0, and the number of the curve's points at or below the clipped one (any
        job, though for a pending one its attained run time does not move)."""
        g = job.gpus
        per = g if g > 1 else 1
        a = job.attained_gpu_s / per - job.restarts * self.restart_cost_s
        curves = self._mem.curves
        grid, index, _ = curves[g] if g in curves else self._curve(g)
        n = bisect_right(grid, a if a > 0.0 else 0.0)
        return index[n - 1 if n > 1 else 0] / per, a, n

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        mem = self._mem
        old, scored = mem.scored, {}
        jobs = managed_pending(snapshot)
        for j in jobs:
            e = old.get(j.id)
            if e is None or e.view is not j:  # (a pending job's view is immutable)
                p, a, n = self._running_prio(j)  # (priority(j), the lookup inlined)
                a = a if a > 0.0 else 0.0
                b = self._curve(j.gpus)[2]
                e = _Scored(view=j, prio=p, neg=-p, entry=(j, _Why(p, a, b, j.gpus), None))
            scored[j.id] = e
        # (sorted is stable and jobs come in submit order: ties stay in it)
        ranking = sorted([scored[j.id] for j in jobs], key=_neg)
        ranked: list[Ranked] = [e.entry for e in ranking]
        made = orders(ranked, reuse=(mem.ranked, mem.orders))
        mem.scored, mem.ranked, mem.orders = scored, ranked, made
        byprio = mem.running
        byprio.follow(self, snapshot)
        runs = byprio.runs

        k = 1.0 + self.margin
        movers = [e.view for e in ranking if not e.view.held]
        pmax = scored[movers[0].id].prio if movers else 0.0  # (ranking: highest first)
        bounds: list[float] = []  # k x priority of each victim, ascending

        def victims() -> list[JobView]:
            out = byprio.victims(self, snapshot, k, pmax)
            bounds[:] = [k * runs[v.id].prio for v in out]
            return out

        preempts, _ = plan_preemptions_by_prefix(
            Capacity.of(snapshot),
            movers,
            victims,
            # the victims p outranks (scored[p.id].prio > k * their priority) are a prefix
            prefix=lambda p, vs: bisect_left(bounds, scored[p.id].prio),
            reason=lambda v, p: (f"gittins: priority {runs[v.id].prio:.3g} < "
                                 f"{scored[p.id].prio:.3g} / {k:g} of job {p.id} ({p.gpus} "
                                 f"GPUs); {scored[p.id].entry[1]()}"),
        )
        return Decision(policy=self.name, order=made, preemptions=preempts)

@dataclass(frozen=True, slots=True)
class _Why:
    """A pending job's reason, formatted only when read (`core.JobOrder.reason`)."""

    prio: float
    attained: float
    bucket: str
    gpus: int

    def __call__(self) -> str:
        return (f"gittins index {self.prio * max(self.gpus, 1):.3g}/s at attained "
                f"{self.attained:.0f} s (bucket {self.bucket}), /{self.gpus} GPUs")


@dataclass(slots=True)
class _Scored:
    view: JobView
    prio: float
    neg: float
    """-prio: the ranking's key."""
    entry: tuple[JobView, _Why, None]


_neg = attrgetter("neg")


class _Desc:
    """A job id that sorts in descending id_key order (ties of priority and submit time)."""

    __slots__ = ("key",)

    def __init__(self, job_id: str) -> None:
        self.key = id_key(job_id)

    def __lt__(self, other: _Desc) -> bool:
        return other.key < self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and other.key == self.key

    __hash__ = None  # type: ignore[assignment]


_Key = tuple[float, float, _Desc, int]


@dataclass(slots=True)
class _Run:
    prio: float
    key: _Key
    """(priority, -submit time, id descending, seq): victim order, lowest first."""
    view: JobView
    """The job's view when the priority was worked out (same run: same id, GPUs, ...)."""
    time: float
    attained: float
    """When, and its attained run time then (before clipping at 0)."""
    points: int
    """The curve's points at or below that (clipped) attained run time."""
    next: float = math.inf
    """When to look at it again: when its priority may have moved, or (stale) its bound."""
    lb: float = math.inf
    lb_hi: int = -1
    """The least index of points[from the run's own to lb_hi] (stale runs: each look extends
    it to the points newly reached instead of taking the min of the whole span again)."""


_key = attrgetter("key")
_SLACK = 1e-3
"""Seconds of rounding slack on the time a run reaches a curve's point."""


class _ByPriority:
    """The stoppable running jobs in victim order (lowest priority first; ties: latest
    submitted first), kept from call to call: starts and stops followed through
    `ClusterSnapshot.running_changes`, and a job's priority worked out again only once it may
    have moved and it may matter.

    Why that is exact: between snapshots that share `running_ids` (or across their
    `running_changes`) a job not started anew is in the same run and holds its GPUs, so its
    attained run time only grows, by at most the time between: it keeps its priority until it
    may reach the curve's next point, and after that its priority is at least the least index
    of the points it may have reached (a bound). When even the least priority, bounds
    included, times k is at least the highest pending priority (pmax), the job can not be
    outranked, and neither can any after it in victim order: the victims end before it (the
    same plan). Only runs past their time whose bound is below that are worked out again from
    the snapshot's views. A plain snapshot (no shared ids, no changes): all worked out again
    from all running jobs."""

    __slots__ = ("heap", "ids", "order", "runs", "seq", "stale", "time")

    def __init__(self) -> None:
        self.ids: frozenset[JobId] | None = None
        """The running_ids object `runs` are of (None: to be rebuilt)."""
        self.time = -math.inf
        self.runs: dict[JobId, _Run] = {}
        self.order: list[_Run] = []
        """runs, in key order."""
        self.heap: list[tuple[float, int, JobId]] = []
        """(next, seq, id) of runs (entries of runs replaced or moved since: stale)."""
        self.stale: dict[JobId, float] = {}
        """Runs whose priority may have moved, and a lower bound of it."""
        self.seq = 0

    def follow(self, policy: Gittins, snapshot: ClusterSnapshot) -> None:
        """Take in the starts and stops since the last call (each call: only what changed)."""
        ids, now = snapshot.running_ids, snapshot.time
        if ids is self.ids or self.ids is None:
            return
        changes = snapshot.running_changes
        if changes is None or changes.since is not self.ids or now < self.time:
            self.ids = None
            return
        for jid, _ in changes.stopped:
            self._drop(jid)
        for v in changes.started:
            self._drop(v.id)
            if requeueable(v):
                self._add(policy, v, now)
        self.ids, self.time = ids, now

    def victims(self, policy: Gittins, snapshot: ClusterSnapshot, k: float,
                pmax: float) -> list[JobView]:
        """In victim order; none when none can be outranked (k x priority >= pmax)."""
        ids, now = snapshot.running_ids, snapshot.time
        if ids is not self.ids or now < self.time:
            self._rebuild(policy, snapshot)
        heap, runs, stale, curves = self.heap, self.runs, self.stale, policy._mem.curves
        while heap and heap[0][0] <= now:
            t, seq, jid = heappop(heap)
            r = runs.get(jid)
            if r is None or r.key[3] != seq or r.next != t:
                continue
            # reached by now: at most this (rounding slack included)
            top = r.attained + (now - r.time) + _SLACK + 1e-9 * (abs(now) + abs(r.attained))
            grid, index, _ = curves[r.view.gpus]
            m = bisect_right(grid, top if top > 0.0 else 0.0)
            n, hi = r.points, (m - 1 if m > 1 else 0)
            lo = r.lb_hi + 1 if r.lb_hi >= 0 else (n - 1 if n > 1 else 0)
            lb = min(r.lb, *index[lo:hi + 1]) if lo <= hi else r.lb
            r.lb, r.lb_hi = lb, max(hi, r.lb_hi)
            g = r.view.gpus
            stale[jid] = lb / (g if g > 1 else 1)
            # Stale now: only a point of lower index can move the bound again; look again
            # when the first such is reached (points in between leave it as it is).
            last = len(grid)
            while m < last and index[m] >= lb:
                m += 1
            if m < last:
                r.next = now + (grid[m] - top)
                heappush(heap, (r.next, seq, jid))
            else:
                r.next = math.inf
        self.time = now
        # Runs that may be outranked (k x priority or bound < pmax): stale ones worked out
        # again; a run that can not be is never a victim, and neither is any run after it
        # in victim order: the list ends before them.
        due = {jid for jid, lb in stale.items() if k * lb < pmax}
        if due:
            for v in snapshot.running:
                if v.id in due:
                    due.discard(v.id)
                    self._drop(v.id)
                    self._add(policy, v, now)
            if due:  # (not running: the snapshot breaks running_ids' rule)
                self._rebuild(policy, snapshot)
                return self.victims(policy, snapshot, k, pmax)
        if len(heap) > 4 * len(runs) + 64:
            self.heap = [(r.next, r.key[3], jid) for jid, r in runs.items()]
            heapify(self.heap)
        out = []
        for r in self.order:
            if r.view.id in stale:
                continue
            if k * r.prio >= pmax:
                break
            out.append(r.view)
        return out

    def _rebuild(self, policy: Gittins, snapshot: ClusterSnapshot) -> None:
        self.runs.clear()  # (in place: decide holds it)
        self.stale.clear()
        self.order, self.heap = [], []
        now = snapshot.time
        for v in snapshot.running:
            if requeueable(v):
                self._add(policy, v, now, sort=False)
        self.order.sort(key=_key)
        heapify(self.heap)
        self.ids, self.time = snapshot.running_ids, now

    def _add(self, policy: Gittins, v: JobView, now: float, sort: bool = True) -> None:
        prio, a, n = policy._running_prio(v)
        grid = policy._mem.curves[v.gpus][0]
        self.seq += 1
        r = _Run(prio=prio, key=(prio, -v.submit_time, _Desc(v.id), self.seq), view=v,
                 time=now, attained=a, points=n)
        if n < len(grid):  # (it keeps its priority until it may reach the next point)
            hi = grid[n]
            r.next = now + (hi - a) - (_SLACK + 1e-9 * (abs(now) + abs(hi)))
        self.runs[v.id] = r
        if sort:
            insort(self.order, r, key=_key)
            heappush(self.heap, (r.next, self.seq, v.id))
        else:
            self.order.append(r)
            self.heap.append((r.next, self.seq, v.id))

    def _drop(self, job_id: JobId) -> None:
        r = self.runs.pop(job_id, None)
        if r is not None:
            self.stale.pop(job_id, None)
            order = self.order
            i = bisect_left(order, r.key, key=_key)
            assert order[i] is r
            del order[i]


@dataclass
class _Memory:
    """Caches of one call for the next: each pending view's priority, the last order and
    what it was made from, the running jobs by priority. Only ever the same results sooner
    (so `gittins` is not `Stateful`)."""

    curves: dict[int, tuple[tuple[float, ...], tuple[float, ...], str]] = field(
        default_factory=dict)
    scored: dict[JobId, _Scored] = field(default_factory=dict)
    ranked: list[Ranked] = field(default_factory=list)
    orders: tuple[JobOrder, ...] = ()
    running: _ByPriority = field(default_factory=lambda: _ByPriority())


def new(**options: Any) -> Gittins:
    """Options: table (shipped), margin (1.0), restart_cost_s (30.0)."""
    return build(Gittins, options)
