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
waiting) and its attained service at its last promotion (`Stateful`: `reset()` forgets it).
Never changes GPU counts.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobOrder,
    JobState,
    JobView,
    Preempt,
    id_key,
)
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import latest_first, orders, submit_key
from slurm_rl.policies.preemption import may_preempt as requeueable
from slurm_rl.policies.preemption import plan_by_level

NAME = "tiresias"
RUNNING = JobState.RUNNING


class _Since(NamedTuple):
    """When the wait of a job that was not waiting at the previous call started: `ran_until`
    (the previous call) if it was running then, else `seen` (this call: first seen)."""

    ran_until: float
    seen: float
    before: ClusterSnapshot
    """The previous call's snapshot."""


@dataclass(slots=True)
class _Wait:
    """A job not running at the last call: its wait clock, and for a pending job what was
    worked out from its view (reused while the snapshot gives the same view object: views are
    immutable, and the job's base changes only when it is promoted)."""

    since: float | _Since
    """When its wait started: last seen running, or first seen (a _Since: not worked out yet)."""
    view: JobView | None = None
    service: float = 0.0
    queue: int = 0
    why: str = ""
    due: float = -math.inf
    """Promoted at a call with now >= due (math.inf: never; -math.inf: work it out then)."""
    entry: Any = None
    """(view, why, None), as orders() takes it (a pending job's)."""


@dataclass
class _Memory:
    prev: ClusterSnapshot | None = None
    ids: dict[int, tuple[ClusterSnapshot, frozenset[JobId]]] = field(default_factory=dict)
    """Running job ids of a snapshot or two (keyed by id(); the snapshot is kept alive)."""
    ranked: list[tuple[JobView, str, None]] = field(default_factory=list)
    orders: tuple[JobOrder, ...] = ()
    """The last call's order, and what it was made from."""
    pending: tuple[JobView, ...] | None = None
    """The last call's pending jobs (None: it had finished ones too)."""
    due: float = -math.inf
    """The earliest time a promotion of one of them may be due."""
    candidates: list[JobView] = field(default_factory=list)
    """Those that may preempt, in order."""
    queues: dict[JobId, int] = field(default_factory=dict)
    """Their queues."""


def _due(since: float, wait: float) -> float:
    """The first time `now` with now - since >= wait (floating point, as the test is made)."""
    x = since + wait
    if not math.isfinite(x):
        return -math.inf  # test at every call
    if x - since >= wait:
        while (y := math.nextafter(x, -math.inf)) - since >= wait:
            x = y
    else:
        while not x - since >= wait:
            x = math.nextafter(x, math.inf)
    return x


def _in_submit_order(jobs: list[JobView]) -> bool:
    """Whether sorted(jobs, key=submit_key) would keep them as they are."""
    times = list(map(_submit_time, jobs))
    later = times[1:]
    if all(map(operator.lt, times, later)):
        return True
    for a, b in pairwise(jobs):  # submit_key(b) < submit_key(a), as tuples compare
        ta, tb = a.submit_time, b.submit_time
        if (id_key(b.id) < id_key(a.id)) if tb is ta or tb == ta else tb < ta:
            return False
    return True


_submit_time = operator.attrgetter("submit_time")


def _thresholds(value: object) -> tuple[float, ...]:
    """`thresholds` as given: one number (two queues) or a list of numbers, as a config file or
    `--policy-option thresholds=3600` / `thresholds=[3600,36000]` gives it; anything else is a
    ValueError naming the option."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for t in items:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"thresholds must be a number of GPU-seconds or a list of them, "
                             f"got {value!r}")
        out.append(float(t))
    if not out:
        raise ValueError("thresholds must not be empty")
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Tiresias:
    name: str = field(default=NAME, init=False)
    thresholds: tuple[float, ...] = (3600.0,)
    """Queue limits on attained GPU-seconds, ascending; len(thresholds) + 1 queues."""
    promote_knob: float = 8.0
    """Promote to Q0 after waiting promote_knob × run time since the last promotion (0: never)."""
    _last_run: dict[JobId, _Wait] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)
    """Per job not running: when its wait started, last seen running (or first seen). Kept
    only for jobs not running at the last call (a running job's is that call's time); for a job
    that was not waiting at the call before, worked out when first needed (`_Since`), so that a
    call need not look at the running jobs."""
    _base: dict[JobId, float] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)
    """Per promoted job: its attained service at its last promotion."""
    _mem: _Memory = field(default_factory=_Memory, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        th = _thresholds(self.thresholds)
        if any(t <= 0 for t in th) or list(th) != sorted(set(th)):
            raise ValueError(f"thresholds must be positive and strictly ascending, got {th}")
        if self.promote_knob < 0:
            raise ValueError(f"promote_knob must be >= 0, got {self.promote_knob}")
        object.__setattr__(self, "thresholds", th)

    def reset(self) -> None:
        """Stateful (capabilities.py): forget every wait clock and promotion."""
        self._last_run.clear()
        self._base.clear()
        object.__setattr__(self, "_mem", _Memory())

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs (not completing,
        resizing or suspended) whose requeue would be carried out (`restartable`)."""
        return requeueable(job)

    def _service(self, job: JobView) -> float:
        """Attained GPU-seconds since the job's last promotion."""
        return max(0.0, job.attained_gpu_s - self._base.get(job.id, 0.0))

    def queue(self, job: JobView) -> int:
        return bisect_right(self.thresholds, self._service(job))

    def _running_ids(self, snapshot: ClusterSnapshot) -> frozenset[JobId]:
        hit = self._mem.ids.get(id(snapshot))
        if hit is not None and hit[0] is snapshot:
            return hit[1]
        ids = snapshot.running_ids
        self._mem.ids[id(snapshot)] = (snapshot, ids)
        return ids

    def _why(self, job: JobView) -> str:
        s = self._service(job)
        return self._why_at(bisect_right(self.thresholds, s), s)

    def _why_at(self, q: int, s: float) -> str:
        if q == 0:
            return f"Q0 (attained {s:.0f} GPU-s < {self.thresholds[0]:.0f})"
        return f"Q{q} (attained {s:.0f} GPU-s >= {self.thresholds[q - 1]:.0f})"

    def _look(self, j: JobView, w: _Wait, fresh: bool, now: float,
              prev: ClusterSnapshot | None) -> str | None:
        """Work out `w` for pending job j (its view changed, or it is new, or a promotion may be
        due); promote it if due. Returns the promotion note."""
        jid, th, knob, base = j.id, self.thresholds, self.promote_knob, self._base
        a = j.attained_gpu_s
        s = a - base.get(jid, 0.0)
        s = s if s > 0.0 else 0.0  # max(0.0, s)
        note = None
        due = math.inf
        if knob > 0 and s >= th[0]:  # not in Q0: may be promoted
            t = w.since
            first_seen = fresh and prev is None
            if isinstance(t, _Since):
                if jid in self._running_ids(t.before):
                    t = w.since = t.ran_until
                else:
                    t = w.since = t.seen
                    first_seen = fresh
            if first_seen:  # its wait clock starts now: no promotion yet
                due = -math.inf
            else:
                ran = s / max(j.gpus, 1)
                waited = now - t
                if ran > 0 and waited >= knob * ran:
                    base[jid] = a
                    s = a - a
                    s = s if s > 0.0 else 0.0
                    note = (f"promoted: waited {fmt_dur(waited)} >= "
                            f"{knob:g} x {fmt_dur(ran)} run")
                elif ran > 0:
                    due = _due(t, knob * ran)
                elif ran != ran:
                    due = -math.inf
        q = bisect_right(th, s)
        if note is None:
            if w.view is None or w.service != s or w.queue != q:
                w.why = f"{self._why_at(q, s)}, FIFO in queue"
            w.view = j
        else:
            w.why = f"{self._why_at(q, s)}, {note}, FIFO in queue"
            w.view = None  # the note is for this call only
        w.service, w.queue, w.due, w.entry = s, q, due, (j, w.why, None)
        return note

    def _order(self, snapshot: ClusterSnapshot, pend: tuple[JobView, ...],
               finished: tuple[JobView, ...], prev: ClusterSnapshot | None) -> None:
        """Work out the jobs not running, into self._last_run and self._mem: their wait clocks
        (as if every call set that of each running job, and of each job seen for the first
        time, to now), promotions, and each managed pending job's queue and reason; the
        order."""
        now, mem, last = snapshot.time, self._mem, self._last_run
        waiting: dict[JobId, _Wait] = {}
        managed: list[_Wait] = []  # the managed pending jobs', in the snapshot's order
        due = math.inf
        promoted = False
        for j in pend:
            jid = j.id
            w = last.get(jid)
            if w is None or w.view is not j or now >= w.due:
                fresh = w is None  # running at the previous call, or not there
                if w is None:
                    w = _Wait(now if prev is None else _Since(prev.time, now, prev))
                if self._look(j, w, fresh, now, prev) is not None:
                    promoted = True
            waiting[jid] = w
            if w.due < due:
                due = w.due
            if j.managed:
                managed.append(w)
        for j in finished:
            w = last.get(j.id)
            if w is None:
                w = _Wait(now if prev is None else _Since(prev.time, now, prev))
            waiting[j.id] = w
        last.clear()
        last.update(waiting)
        if not _in_submit_order([w.entry[0] for w in managed]):
            managed.sort(key=lambda w: submit_key(w.entry[0]))
        # Queue by queue, FIFO within one.
        queues: list[list[tuple[JobView, str, None]]] = [[] for _ in self.thresholds]
        queues.append([])
        for w in managed:
            queues[w.queue].append(w.entry)
        ranked = [r for queue in queues for r in queue]
        if ranked != mem.ranked:  # (the same jobs and reasons: the same orders)
            mem.ranked, mem.orders = ranked, orders(ranked)
        # A running job is in queue len(thresholds) at most: only a pending job in a higher
        # queue can displace one. The jobs of the last queue, planned last, could only take
        # GPUs that nobody after them needs: they are left out.
        mem.candidates = [j for queue in queues[:-1] for j, _, _ in queue if not j.held]
        mem.queues = {j.id: waiting[j.id].queue for j in mem.candidates}
        mem.due = due
        # (A promotion's note is in this call's reasons only.)
        mem.pending = None if finished or promoted else pend

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now, mem = snapshot.time, self._mem
        prev, mem.prev = mem.prev, snapshot
        mem.ids.clear()
        last, base, th = self._last_run, self._base, self.thresholds
        pend, finished = snapshot.pending, snapshot.finished
        if finished or now >= mem.due or pend != mem.pending:
            self._order(snapshot, pend, finished, prev)
        # else the same jobs wait as at the last call, in the same views, and no promotion is
        # due: the same wait clocks, queues, reasons and order.
        if base:  # forget the jobs that left
            gone = [k for k in base if k not in last]
            if gone:
                running = self._running_ids(snapshot)
                for k in gone:
                    if k not in running:
                        del base[k]
        pending, q = mem.candidates, mem.queues
        preempts: tuple[Preempt, ...] = ()
        if pending:

            def victim_queue(v: JobView) -> int:
                sv = v.attained_gpu_s - base.get(v.id, 0.0)
                return bisect_right(th, sv if sv > 0.0 else 0.0)

            # Lower queues first, so a victim is one of a higher queue: latest submitted first.
            preempts, _ = plan_by_level(
                Capacity.of(snapshot),
                pending,
                level=lambda p: q[p.id],
                victims=lambda: [v for v in snapshot.running if self.may_preempt(v)],
                victim_level=victim_queue,
                top=len(th),
                arrange=latest_first,
                reason=lambda v, p: (f"{self._why(v)}: job {p.id} of Q{q[p.id]} needs "
                                     f"{p.gpus} GPUs"),
            )
        return Decision(policy=self.name, order=mem.orders, preemptions=preempts)


def new(**options: Any) -> Tiresias:
    """Options: thresholds ((3600.0,) GPU-s), promote_knob (8.0)."""
    return build(Tiresias, options)
