"""The preempting form of the `rl` policy (docs/rl.md, "Preemption"): the learned order plus
requeues decided by the same network's scores of running jobs.

A pending job, taken in the network's order, that does not fit in the free GPUs requeues running
jobs the network scores below its own by more than `preempt_margin`, lowest first, until it
fits (`plan_preemptions_by_prefix`; a job that cannot fit even so stops nobody). Only managed,
plainly RUNNING jobs are requeued, and not those a guard protects (utilisation, docs/rl.md):
`protect_run_s` (a job whose current run has lasted that long runs to its end),
`max_restarts`, `protect_gpus`. Nothing reads oracle data.

What bounds the cost (a Preempting policy is asked at every event with something pending):
- `decide` always plans in full: the whole queue's order and the requeues (the daemon asks at
  every cycle and gets both). The simulator asks `futile` first (`Gated`, capabilities.py) and
  skips the call where it is True, as it skips its own futile calls:
  - where nothing can start and no job arrived, or the only job that may start fits (nothing
    else can start; every running job keeps its GPUs);
  - where nothing can start but jobs arrived and none of the arriving jobs among the shown
    slots would, alone, requeue running jobs (kept scores; only those jobs are scored).
  So an older pending job considers preemption where GPUs free up and something fits, or
  where an arrival triggers a plan, not at every arrival as the straightforward version did
  (`tests/rl/test_rl_preempt_bounded.py` counts the difference).
- Running jobs' scores are kept (`Memo`, sorted, updated from `running_changes` where the
  snapshot has it): a run is scored when first seen, all of them again every `rescore_s`
  seconds, and a job a plan would requeue on a kept score is scored again at that instant and
  the plan made again, until it requeues only freshly scored jobs. `rescore_s = 0` scores
  every running job at every plan, as the straightforward version did.
`Stateful`: the kept scores are per episode; `reset()` forgets them.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, id_key
from slurm_rl.policies.capabilities import CycleState
from slurm_rl.policies.capacity import Capacity, gang_parts
from slurm_rl.policies.preemption import may_preempt, plan_preemptions_by_prefix
from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.features import pending_in_order, running_rows, shown_rows, some_rows
from slurm_rl.policies.rl.order import LearnedOrder

_Key = tuple[float, float | None, int]
_GPUS, _NODES, _first = attrgetter("gpus"), attrgetter("nodes"), itemgetter(0)
_FIRST_FEW = 8


def _run(v: JobView) -> _Key:
    """Which run of a job (submit time, start, GPUs): a restart or resize is a new run."""
    return v.submit_time, v.start_time, v.gpus


class Memo:
    """The preemptable running jobs with their kept scores, as of the snapshot whose
    running_ids object is `ids`. `jobs`: id -> (sort key, view of this run, time scored); the
    sort key is (score, -submit time, order kept in), so that `views` (the jobs lowest score
    first), `keys` and `thr` (score + margin) stay sorted lists, updated by bisection as jobs
    come and go; `epoch`: when every kept score was last computed again; `until`: a heap of
    (time a kept run becomes protected by protect_run_s, id, run)."""

    __slots__ = ("epoch", "ids", "jobs", "keys", "margin", "seq", "thr", "until", "views")

    def __init__(self, margin: float) -> None:
        self.margin = margin
        self.jobs: dict[JobId, tuple[tuple[float, float, int], JobView, float]] = {}
        self.keys: list[tuple[float, float, int]] = []
        self.views: list[JobView] = []
        self.thr: list[float] = []
        self.ids: frozenset[JobId] | None = None
        self.epoch = -math.inf
        self.seq = 0
        self.until: list[tuple[float, JobId, _Key]] = []

    def clear(self) -> None:
        self.__init__(self.margin)  # type: ignore[misc]

    def score(self, jid: JobId) -> float:
        return self.jobs[jid][0][0]

    def low(self) -> float:
        """The lowest kept score (inf: none)."""
        return self.keys[0][0] if self.keys else math.inf

    def drop(self, jid: JobId) -> None:
        e = self.jobs.pop(jid, None)
        if e is not None:
            i = bisect_left(self.keys, e[0])
            del self.keys[i], self.views[i], self.thr[i]

    def expire(self, now: float) -> None:
        """Forget the runs protected by now (protect_run_s)."""
        until = self.until
        while until and until[0][0] <= now:
            _, jid, run = heappop(until)
            e = self.jobs.get(jid)
            if e is not None and _run(e[1]) == run:
                self.drop(jid)

    def fill(self, views: Sequence[JobView], scores: list[float], now: float) -> bool:
        """`keep` each of `views` with its score, into an empty memo, sorted once; False (the
        memo left empty) if two share an id (`keep` would keep the later one only)."""
        seq, m, inf = self.seq, self.margin, math.inf
        made = []
        for v, x in zip(views, scores, strict=True):
            t = v.submit_time  # (NaN sorts as -inf, as in keep)
            made.append(((x if x == x else -inf, -t if t == t else -inf, seq), v, x))
            seq += 1
        jobs = {v.id: (key, v, now) for key, v, _ in made}
        if len(jobs) < len(made):
            return False
        made.sort(key=_first)  # (keys are distinct: seq)
        self.seq, self.jobs = seq, jobs
        self.keys = [key for key, _, _ in made]
        self.views = [v for _, v, _ in made]
        self.thr = [x + m for _, _, x in made]
        return True

    def keep(self, v: JobView, score: float, now: float) -> None:
        self.drop(v.id)
        # NaN compares unequal to itself: it would break the bisection (a job's submit time
        # may be NaN, and a NaN feature gives a NaN score); both sort as -inf instead
        t = v.submit_time
        key = (score if score == score else -math.inf, -t if t == t else -math.inf, self.seq)
        self.seq += 1
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.views.insert(i, v)
        self.thr.insert(i, score + self.margin)
        self.jobs[v.id] = (key, v, now)


@dataclass(frozen=True, kw_only=True)
class RLPreempting(LearnedOrder):
    """The learned order plus preemption by the same network's scores (Preempting,
    Stateful)."""

    preempt_margin: float = 0.0
    """Requeue a running job only if a pending job's score exceeds its own by more than this."""
    rescore_s: float = 3600.0
    """Every this many seconds all running jobs are scored again (0: at every plan)."""
    max_restarts: int | None = None
    """A running job requeued this many times already is not requeued again (None: no cap)."""
    protect_gpus: int | None = None
    """Running jobs with at least this many GPUs are not requeued (None: any may be)."""
    protect_run_s: float | None = 21600.0
    """A job whose current run has lasted this long (seconds) is not requeued (None: no limit).
    6 h: chosen on the TRAINING clusters (docs/rl.md, "Utilisation")."""
    _memo: Memo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.preempt_margin >= 0:
            raise ValueError(f"preempt_margin must be >= 0, got {self.preempt_margin}")
        if not self.rescore_s >= 0:
            raise ValueError(f"rescore_s must be >= 0, got {self.rescore_s}")
        for name in ("max_restarts", "protect_gpus", "protect_run_s"):
            v = getattr(self, name)
            if v is not None and not v >= 0:
                raise ValueError(f"{name} must be >= 0 or none, got {v}")
        super().__post_init__()
        object.__setattr__(self, "_memo", Memo(self.preempt_margin))

    def reset(self) -> None:
        """Stateful: forget the kept scores (a new episode)."""
        self._memo.clear()

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): managed, plainly RUNNING jobs the guards leave
        (`protect_run_s` is applied where a plan is made: it moves with the clock)."""
        return may_preempt(job) and (
            (self.max_restarts is None or job.restarts < self.max_restarts)
            and (self.protect_gpus is None or job.gpus < self.protect_gpus))

    # -- scoring -----------------------------------------------------------------------------

    def _rescore(self, snapshot: ClusterSnapshot, jobs: list[JobView],
                 cluster: npt.NDArray[np.float32]) -> None:
        """Score `jobs` (views of this snapshot) now and keep the scores."""
        if jobs:
            rows = running_rows(snapshot, jobs, cache=self._rows)
            s = self.scores(rows, cluster, snapshot.time).tolist()
            now, memo, r = snapshot.time, self._memo, self.protect_run_s
            if not memo.jobs and memo.fill(jobs, s, now):  # (a full rescore: one sort)
                if r is not None:
                    for v in jobs:
                        if v.start_time is not None:
                            heappush(memo.until, (v.start_time + r, v.id, _run(v)))
                return
            for v, x in zip(jobs, s, strict=True):
                if r is not None and v.start_time is not None and v.id not in memo.jobs:
                    heappush(memo.until, (v.start_time + r, v.id, _run(v)))
                memo.keep(v, x, now)

    def _keepable(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        """The `jobs` whose scores are kept: those `may_preempt` allows and `protect_run_s`
        does not protect by now (the method's rule written out here, on the policy's settings
        read once: asked of every running job at each full rescore)."""
        r, most, wide = self.protect_run_s, self.max_restarts, self.protect_gpus
        return [v for v in jobs if may_preempt(v)
                and (most is None or v.restarts < most) and (wide is None or v.gpus < wide)
                and (r is None or v.start_time is None or now - v.start_time < r)]

    def _sync(self, snapshot: ClusterSnapshot, cluster: npt.NDArray[np.float32]) -> None:
        """Bring the memo to this snapshot's running jobs: score the runs not seen before,
        forget those gone or protected by now; every `rescore_s` seconds, score them all
        again."""
        memo, now = self._memo, snapshot.time
        ids = snapshot.running_ids
        if now - memo.epoch >= self.rescore_s:
            memo.clear()
            memo.epoch = now
            self._rescore(snapshot, self._keepable(snapshot.running, now), cluster)
        elif ids is not memo.ids:
            changes = snapshot.running_changes
            jobs = memo.jobs
            if changes is not None and changes.since is memo.ids:
                started = changes.started
                for jid, _ in changes.stopped:
                    memo.drop(jid)
                for v in started:
                    memo.drop(v.id)
                new = self._keepable(started, now)
            else:
                # kept runs that go on stay; the rest are dropped; new runs are scored
                new, same = [], set()
                for v in self._keepable(snapshot.running, now):
                    e = jobs.get(v.id)
                    if e is not None and _run(v) == _run(e[1]):
                        same.add(v.id)
                    else:
                        new.append(v)
                for jid in [jid for jid in jobs if jid not in same]:
                    memo.drop(jid)
            self._rescore(snapshot, new, cluster)
        memo.expire(now)
        memo.ids = ids

    # -- deciding ----------------------------------------------------------------------------

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> bool:
        """Gated (capabilities.py): nothing fits and no job arrived, or the only job that may
        start fits, or nothing fits and no arriving job would requeue anything on its own."""
        now = snapshot.time
        pending = [j for j in snapshot.pending if j.managed]
        cap = Capacity.of(snapshot)
        if cap.fits((1,)):  # (else nothing fits)
            movers = [j for j in pending if not j.held]
            if _one_fits(cap, movers):  # (the only one that may start: no order matters)
                return len(movers) < 2
        # (held arrivals too: they take a slot; they do not preempt)
        arrivals = [j for j in pending if j.submit_time == now]
        if not any(not j.held for j in arrivals):
            return True
        older = sum(1 for j in pending if j.submit_time < now)
        return not self._arrival_may_preempt(snapshot, arrivals, older, len(pending),
                                             sum(j.gpus for j in pending))

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        """The learned order of the whole queue and the requeues that let its jobs start."""
        return self._plan(snapshot)

    def _arrival_may_preempt(self, snapshot: ClusterSnapshot, arrivals: list[JobView],
                             older: int, n_pending: int, pending_gpus: int) -> bool:
        """Whether a job arrived now that is shown (among the oldest max_jobs) would requeue
        running jobs if it were the only pending job (kept scores): it outranks some by more
        than the margin, and stopping those lets it fit."""
        m = self._fcfg.max_jobs
        if older >= m:
            return False
        arrivals.sort(key=lambda j: id_key(j.id))
        shown = [j for j in arrivals[:m - older] if not j.held]
        if not shown:
            return False
        rows, cluster = some_rows(snapshot, shown, n_pending, pending_gpus, self._fcfg,
                                  cache=self._rows)
        s = self.scores(rows, cluster, snapshot.time)
        self._sync(snapshot, cluster)
        memo = self._memo
        if not memo.thr or not s.max() > memo.thr[0]:
            return False
        score = {j.id: x for j, x in zip(shown, s.tolist(), strict=True)}
        ranked = sorted(shown, key=lambda j: -score[j.id])
        views, thr = memo.views, memo.thr
        pre, _ = plan_preemptions_by_prefix(Capacity.of(snapshot), ranked, views,
                                            prefix=lambda p, _: bisect_left(thr, score[p.id]),
                                            reason=lambda v, p: "")
        return bool(pre)

    def _plan(self, snapshot: ClusterSnapshot) -> Decision:
        pending = pending_in_order(snapshot)
        rows, cluster, shown_ids = shown_rows(snapshot, self._fcfg, pending, cache=self._rows)
        n = len(shown_ids)
        if n == 0:
            return decision_from_scores(snapshot, shown_ids, [], policy=self.name,
                                        pending=pending)
        s = self.scores(rows, cluster, snapshot.time)
        d = decision_from_scores(snapshot, shown_ids, s, policy=self.name, pending=pending)
        score = dict(zip(shown_ids, s.tolist(), strict=True))
        by_id = {j.id: j for j in pending[:n]}
        movers = [p for o in d.order[:n] if not (p := by_id[o.job_id]).held]
        memo, m = self._memo, self.preempt_margin
        thr: list[float] = []
        views: list[JobView] | None = None

        def victims() -> list[JobView]:  # (asked only if some mover does not fit)
            nonlocal thr, views
            self._sync(snapshot, cluster)
            views, thr = memo.views, memo.thr
            return views

        cap, now = Capacity.of(snapshot), snapshot.time
        while True:
            pre, _ = plan_preemptions_by_prefix(
                cap, movers, victims if views is None else views,
                prefix=lambda p, _: bisect_left(thr, score[p.id]),  # noqa: B023 (current thr)
                reason=lambda v, p: (f"rl: score {memo.score(v.id):.3g} < {score[p.id]:.3g} "
                                     f"- {m:g} of job {p.id} ({p.gpus} GPUs)"))
            if not pre:
                break
            stale = {x.job_id for x in pre if memo.jobs[x.job_id][2] < now}
            if not stale:
                break
            # no requeue on a kept score: score the jobs this plan stops now, plan again
            self._rescore(snapshot, [v for v in snapshot.running if v.id in stale],
                          cluster)
            views, thr = memo.views, memo.thr
        return Decision(policy=d.policy, order=d.order, preemptions=pre) if pre else d


def _one_fits(cap: Capacity, movers: list[JobView]) -> bool:
    """Whether one of `movers` fits the free GPUs `cap` (each shape asked once): the first
    few one by one (one of them often fits), then the shapes of the others as a set."""
    node_cap = cap.node_cap
    seen = set()
    for j in movers[:_FIRST_FEW]:
        shape = j.gpus, j.nodes
        if shape not in seen:
            if cap.fits(gang_parts(*shape, node_cap)):
                return True
            seen.add(shape)
    rest = movers[_FIRST_FEW:]
    return bool(rest) and any(
        cap.fits(gang_parts(g, n, node_cap))
        for g, n in set(zip(map(_GPUS, rest), map(_NODES, rest), strict=True)) - seen)


def new(**options: Any) -> RLPreempting:
    """Options (strings from --policy-option are converted): checkpoint, preempt_margin,
    rescore_s, and the guards max_restarts, protect_gpus, protect_run_s ("none": off)."""
    out = dict(options)
    for name, kind in (("preempt_margin", float), ("rescore_s", float), ("max_restarts", int),
                       ("protect_gpus", int), ("protect_run_s", float)):
        if name not in out:
            continue
        v = out[name]
        if name not in ("preempt_margin", "rescore_s") and (v is None or v == "none"):
            out[name] = None
            continue
        try:
            out[name] = kind(v)
        except (TypeError, ValueError):
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"{name} must be {what} >= 0, got {v!r}") from None
    from slurm_rl.policies.options import build

    return build(RLPreempting, out)
