"""One `deadline` decision (policy.py has the rules): reservations of minimum shares over
the GPUs in use over time, then what starts and what is resized now, then spare GPUs.

Pure: the snapshot and the pending jobs' `Job` records in, `Allocation`'s fields out.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_rl.core import ClusterSnapshot, JobId, JobView, id_key
from slurm_rl.policies.capacity import Capacity, job_layout
from slurm_rl.policies.deadline.jobs import Capper, Fate, Job, Share, make_job
from slurm_rl.policies.deadline.profile import Holds, LazyProfile, ReservedGpus
from slurm_rl.policies.estimates import Source, estimate_remaining, predictions_stand


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """The cluster as the plan counts it."""

    node_cap: int
    """GPUs per node (the widest usable node)."""
    total: int
    """GPUs on usable nodes."""
    alloc: int
    """GPUs allocated on usable nodes."""

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Shape:
        fc = snapshot.free_counts
        if fc is not None:  # every usable node has len(fc) - 1 GPUs (core.ClusterSnapshot)
            usable = sum(fc)
            node_cap = len(fc) - 1 if usable else 0
            total = node_cap * usable
            return cls(node_cap=node_cap, total=total,
                       alloc=total - sum(f * c for f, c in enumerate(fc)))
        return cls(node_cap=max((n.gpus_total for n in snapshot.nodes if n.state.usable),
                                default=0),
                   total=snapshot.gpus_total,
                   alloc=sum(n.gpus_alloc for n in snapshot.nodes if n.state.usable))


class Allocation:
    """Plan, then now: `fate`, `share`, `start` (pending jobs starting now, at this count),
    `size` (running elastic jobs' new counts), `notes`."""

    def __init__(self, snapshot: ClusterSnapshot, jobs: Sequence[Job], *, min_gain: float,
                 resize_cost_s: float, capped: Capper, shape: Shape,
                 elastic: Sequence[JobView], suspend: bool = False,
                 stands: Callable[[ClusterSnapshot], list[bool]] = predictions_stand) -> None:
        """`elastic`: the running jobs it may resize (`resizable`); `stands`: the running jobs
        whose predictions are their estimates (`estimates.predictions_stand`, or the policy's
        `StandingClaims`, which gives the same answers)."""
        self.now = snapshot.time
        self.snapshot = snapshot
        self.jobs = jobs
        self.by_id = {j.view.id: j for j in jobs}
        self.min_gain, self.cost = min_gain, resize_cost_s
        self.suspend = suspend
        """Running elastic jobs without a reservation hold nothing in the plan: a reserved
        share that does not place now suspends them (requeued, they resume later)."""
        self.suspended: set[JobId] = set()
        self._stands = stands
        self.cap = Capacity.of(snapshot)
        self.node_cap, self.total, self.alloc = shape.node_cap, shape.total, shape.alloc
        self.free = self.cap.total_free
        self.run_jobs = {v.id: self._running_job(v) for v in elastic}
        self.fate: dict[JobId, Fate] = {}
        self.share: dict[JobId, Share] = {}
        self.start: dict[JobId, int] = {}
        self.size = {v.id: v.gpus for v in elastic}
        self.floor: dict[JobId, int] = {}
        self.notes: dict[JobId, str] = {}
        self.grown: set[JobId] = set()
        self.shrunk: set[JobId] = set()
        self._holds: Holds | None = None
        self._squeezed = False
        self.prof = self._best_plan(set())
        over = capped([(j, self.share[j.view.id].gpus) for j in jobs
                       if j.user and self.fate[j.view.id] in (Fate.RESERVED, Fate.UNKNOWN)])
        if over:
            self.prof = self._best_plan(over)

    def _best_plan(self, capped: set[JobId]) -> LazyProfile:
        """The plan with running deadline jobs first, then pending ones in submit order; if some
        job is late in it, also the plan with running and pending jobs together cheapest first
        (GPU-seconds to make the deadline started now: a running job that needs many GPUs may
        lose its reservation to pending jobs that need few), and of the two the one that
        reserves more (ties: the first)."""
        self._squeezed = False
        prof = self._plan(capped, self.jobs)
        if not self._squeezed:  # no job is late for want of GPUs: no order can do better
            return prof
        first = (prof, self.fate, self.share, self.floor)
        prof = self._plan(capped, sorted([*self.jobs, *(rj for rj in self.run_jobs.values()
                                                         if rj.reserves())], key=self._cost),
                          mixed=True)
        if _met(first[1]) >= _met(self.fate):
            prof, self.fate, self.share, self.floor = first
        return prof

    def _cost(self, j: Job) -> tuple[int, float]:
        """(class rank, GPU-seconds at the fewest GPUs that end by its deadline if started
        now; 0 without an estimate or a deadline, inf if none does)."""
        d = j.deadline
        if d is None or j.est is None:
            return (j.plan_key[0], 0.0)
        for g in j.counts:
            if self.now + j.rem(g) <= d:
                return (j.plan_key[0], g * j.rem(g))
        return (j.plan_key[0], math.inf)

    def _running_job(self, v: JobView) -> Job:
        j = make_job(v, self.now, self.node_cap, self.total)
        if v.gpus not in j.counts:
            j.counts = sorted({*j.counts, v.gpus})
        return j

    # 1. Plan --------------------------------------------------------------------------------

    def _base(self) -> ReservedGpus:
        """Running jobs hold their GPUs until their estimated ends (unknown: for ever), running
        elastic jobs only their first count (the rest may be reclaimed); GPUs allocated to jobs
        the snapshot does not show are held for ever. (The holds are worked out once.)"""
        now, snap = self.now, self.snapshot
        holds = self._holds
        if holds is None:
            holds = self._holds = self._running_holds()
        shown = sum(snap.running_gpus)
        return ReservedGpus.of_ends(self.total, now, max(0, self.alloc - shown), holds)

    def _running_holds(self) -> Holds:
        """Each running job's hold. A job's prediction is its estimate only where its claims
        stand as they are (`estimates.claims_stand`: believed progress, no owner's record,
        no overrun); any other running job is estimated (`estimate_remaining`)."""
        now, snap = self.now, self.snapshot
        elastic = self.run_jobs
        predicted = snap.running_predicted
        running = snap.running
        stands = self._stands(snap)
        if not elastic and all(stands):  # the usual case, in arrays
            left = np.fromiter(predicted, dtype=np.float64, count=len(predicted))
            return Holds(now + np.fmax(left, 0.0),  # as now + max(0.0, p): the same floats
                         np.fromiter(snap.running_gpus, dtype=np.int64, count=len(predicted)))
        holds: list[tuple[float, int]] = []
        for v, g, p, ok in zip(running, snap.running_gpus, predicted, stands, strict=True):
            rj = elastic.get(v.id)
            if rj is not None:
                if not rj.reserves() and not self.suspend:
                    f = rj.counts[0]
                    holds.append((now + rj.rem(f), f))
                continue
            if ok:
                assert p is not None
                holds.append((now + (p if p > 0.0 else 0.0), g))
                continue
            est = estimate_remaining(v, now)
            holds.append((math.inf if est is None else now + est.seconds, g))
        return Holds.of(holds)

    def _held(self) -> int:
        """At least what `_base` holds at now, read without any estimate (LazyProfile)."""
        shown = sum(self.snapshot.running_gpus)
        el = self.run_jobs.values()
        return (max(0, self.alloc - shown) + shown - sum(rj.view.gpus for rj in el)
                + (0 if self.suspend else
                   sum(rj.counts[0] for rj in el if not rj.reserves())))

    def _plan(self, capped: set[JobId], order: Sequence[Job], mixed: bool = False) -> LazyProfile:
        """Reserves in `order`; without `mixed`, running elastic deadline jobs first (class,
        then deadline order), then `order` (pending jobs); with it, `order` holds both."""
        self.fate, self.share, self.floor = {}, {}, {}
        prof = LazyProfile(self.total, self.now, self._held, self._base)
        if not mixed:
            running = sorted((rj for rj in self.run_jobs.values() if rj.reserves()),
                             key=_plan_key)
            for rj in running:
                self._reserve(rj, prof, running=True)
        for j in order:
            jid = j.view.id
            if jid in self.run_jobs:
                self._reserve(j, prof, running=True)
                continue
            if j.hopeless:
                self.fate[jid] = Fate.DEMOTED if j.hard else Fate.LATE
                continue
            if not j.reserves() or j.view.held:
                self.fate[jid] = Fate.NONE
            elif jid in capped:
                self.fate[jid] = Fate.CAPPED
            else:
                self._reserve(j, prof, running=False)
        for rj in self.run_jobs.values():
            f = self.share[rj.view.id].gpus if rj.view.id in self.share else rj.counts[0]
            self.floor[rj.view.id] = f
        return prof

    def _reserve(self, j: Job, prof: LazyProfile, running: bool) -> None:
        now, jid, d = self.now, j.view.id, j.deadline
        assert d is not None
        cur = j.view.gpus
        if j.est is None:
            g = cur if running else j.counts[0]
            self.fate[jid], self.share[jid] = Fate.UNKNOWN, Share(g, now, None)
            prof.add(now, max(d, now), g)
            return
        bound = j.est.source is Source.TIME_LIMIT
        if not running and now + j.fastest() > d and not bound:
            self.fate[jid] = Fate.DEMOTED if j.hard else Fate.LATE
            j.hopeless = True
            return
        for g in j.counts:
            dur = j.rem(g) + (self.cost if running and g != cur else 0.0)
            s = prof.earliest(g, dur, d, now_only=running)
            if s is not None:
                self.fate[jid], self.share[jid] = Fate.RESERVED, Share(g, s, dur)
                prof.add(s, s + dur, g)
                return
        if bound:  # a time limit longer than the time left proves no miss
            g = cur if running else j.counts[0]
            self.fate[jid], self.share[jid] = Fate.UNKNOWN, Share(g, now, None)
            prof.add(now, max(d, now), g)
            return
        self.fate[jid] = Fate.LATE
        self._squeezed = True
        if running and not self.suspend:  # best-effort: holds its first count
            prof.add(now, now + j.rem(j.counts[0]), j.counts[0])

    # 2. Now ---------------------------------------------------------------------------------

    def allocate(self) -> list[Job]:
        """Grows, starts and reclaims; returns the pending jobs in rank order. A change is made
        only if every change of this decision still places on the nodes (`_pack`)."""
        now, fate = self.now, self.fate
        for rj in sorted(self.run_jobs.values(), key=_plan_key):  # grow to share
            jid = rj.view.id
            sh = self.share.get(jid)
            if sh is not None and sh.gpus > rj.view.gpus and self._try(
                    self.size, rj, sh.gpus, urgent=True):
                self.notes[jid] = f"grow to {sh.gpus} GPUs to meet its deadline"
        planned: list[Job] = []  # reserved or unknown
        rest: list[Job] = []  # late, capped, none
        demoted: list[Job] = []
        for j in self.jobs:
            f = fate[j.view.id]
            if f is Fate.RESERVED or f is Fate.UNKNOWN:
                planned.append(j)
            elif f is Fate.DEMOTED:
                demoted.append(j)
            else:
                rest.append(j)
        planned.sort(key=_plan_key)
        rest.sort(key=_be_key)
        for j in planned:
            sh = self.share[j.view.id]
            if not j.view.held and sh.start <= now:
                self._try(self.start, j, sh.gpus, urgent=True)
        too_long: dict[int, float] = {}  # GPUs: the shortest time the profile had no room for
        failed: set[tuple[int, ...]] = set()  # layouts that did not place (since a shrink)
        for j in rest:
            if j.view.held or self.free <= 0:
                continue
            g = j.counts[0]
            dur = j.rem(g)
            if g in too_long and dur >= too_long[g]:
                continue  # reservations are only added: no room for longer either
            if self.prof.earliest(g, dur, math.inf, now_only=True) is None:
                too_long[g] = dur
                continue  # it would delay a reservation
            parts = tuple(job_layout(j.view, g, self.node_cap))
            if parts in failed:
                continue
            shrinks = len(self.shrunk)
            if self._try(self.start, j, g, urgent=False):
                self.prof.add(now, now + dur, g)
            else:
                failed.add(parts)
            if len(self.shrunk) != shrinks:
                failed.clear()
        return [*planned, *rest, *demoted]

    def _try(self, counts: dict[JobId, int], j: Job, g: int, urgent: bool) -> bool:
        """Sets counts[job] = g (a start, or a running job's size) if it places, shrinking
        running elastic jobs toward their floors if that makes it place (`urgent`: for a
        reserved share, from any; else only from jobs without a reservation), widest first;
        else changes nothing."""
        jid = j.view.id
        had = counts.get(jid)
        cur = had if had is not None else 0
        if g - cur > self.free + self._reclaimable(jid, urgent):
            return False
        counts[jid] = g
        packed = self._pack()
        if packed is not None:
            self._take(packed)
            return True
        shrunk: list[tuple[JobId, int]] = []
        for rid in self._shrinkable(jid, urgent):
            shrunk.append((rid, self.size[rid]))
            self.size[rid] = self.floor[rid]
            packed = self._pack()
            if packed is not None:
                for sid, _ in shrunk:
                    self.shrunk.add(sid)
                    self.notes[sid] = f"shrink to {self.size[sid]} GPUs to start job {jid}"
                self._take(packed)
                return True
        if urgent and self.suspend:
            for rid in self._suspendable(jid):
                shrunk.append((rid, self.size[rid]))
                self.size[rid] = 0
                packed = self._pack()
                if packed is not None:
                    for sid, _ in shrunk:
                        if self.size[sid] == 0:
                            self.suspended.add(sid)
                            self.notes[sid] = f"suspended to start job {jid} for its deadline"
                        else:
                            self.shrunk.add(sid)
                            self.notes[sid] = f"shrink to {self.size[sid]} GPUs to start job {jid}"
                    self._take(packed)
                    return True
        for rid, old in shrunk:
            self.size[rid] = old
        if had is None:
            del counts[jid]
        else:
            counts[jid] = had
        return False

    def _shrinkable(self, jid: JobId, urgent: bool) -> list[JobId]:
        """Running elastic jobs above their floors that may give GPUs to `jid`: without a
        reservation first, then (if `urgent`) reserved ones; widest first, then by id."""
        out = [rid for rid, g in self.size.items() if rid != jid and g > self.floor[rid]
               and (urgent or self.fate.get(rid) is not Fate.RESERVED)]
        out.sort(key=lambda rid: (self.fate.get(rid) is Fate.RESERVED, -self.size[rid],
                                  id_key(rid)))
        return out

    def _suspendable(self, jid: JobId) -> list[JobId]:
        """Running elastic jobs without a reservation that a reserved share may suspend:
        the last in best-effort order first."""
        out = [rid for rid, g in self.size.items() if rid != jid and g > 0
               and self.fate.get(rid) not in (Fate.RESERVED, Fate.UNKNOWN)]
        out.sort(key=lambda rid: self.run_jobs[rid].be_order(), reverse=True)
        return out

    def _reclaimable(self, jid: JobId, urgent: bool) -> int:
        out = sum(self.size[rid] - self.floor[rid] for rid in self._shrinkable(jid, urgent))
        if urgent and self.suspend:
            out += sum(self.floor[rid] for rid in self._suspendable(jid))
        return out

    def _take(self, packed: Capacity) -> None:
        self.cap = packed
        self.free = packed.total_free

    def _pack(self) -> Capacity | None:
        """The snapshot's free GPUs less this decision's changes, applied as the simulator
        applies them (None: they do not all fit): suspended jobs' GPUs released, then each
        resize in turn, shrinks first (its own GPUs released, its new count placed), then the
        starts, widest first. Released GPUs form chunks of their own (capacity.py), so a grow
        is placed as if its old GPUs were on another node: conservative. (Releasing every
        resize's GPUs before placing any counted a grow on GPUs another grow had taken.)"""
        cap = Capacity.of(self.snapshot)
        nc = self.node_cap
        moved = sorted(((self.run_jobs[jid].view, g) for jid, g in self.size.items()
                        if g != self.run_jobs[jid].view.gpus),
                       key=lambda e: (e[1] - e[0].gpus, str(e[0].id)))
        for v, g in moved:
            if g == 0:
                cap.release(job_layout(v, v.gpus, nc))
        for v, g in moved:
            if g > 0:
                cap.release(job_layout(v, v.gpus, nc))
                if not cap.take(job_layout(v, g, nc)):
                    return None
        parts = [job_layout(self.by_id[jid].view, g, nc) for jid, g in self.start.items()]
        parts.sort(key=lambda p: (-max(p, default=0), -len(p)))
        for p in parts:
            if not cap.take(p):
                return None
        return cap

    # 3. Spare GPUs --------------------------------------------------------------------------

    def spare(self) -> None:
        """Gives the GPUs still free, one allowed step at a time, where a GPU shortens a
        predicted remaining time the most (seconds saved per extra GPU, ties by id; a running
        job pays the restart once), while a step cuts it by at least `min_gain`; jobs shrunk
        for others get none. A step that does not place (`_pack`) ends that job's growth."""
        if self.free <= 0:
            return
        heap: list[tuple[float, str, int, int]] = []
        jobs: dict[JobId, Job] = {}
        for jid, x in self.start.items():
            jobs[jid] = self.by_id[jid]
            self._push(heap, jobs[jid], x, False)
        for jid, x in self.size.items():
            if jid not in self.shrunk and jid not in self.suspended:
                jobs[jid] = self.run_jobs[jid]
                self._push(heap, self.run_jobs[jid], x, True)
        while heap and self.free > 0:
            _, sid, x, y = heapq.heappop(heap)
            jid = JobId(sid)
            j = jobs[jid]
            running = jid in self.size
            counts = self.size if running else self.start
            if y - x > self.free:
                continue
            counts[jid] = y
            packed = self._pack()
            if packed is None:
                counts[jid] = x
                continue
            self._take(packed)
            self.grown.add(jid)
            self._push(heap, j, y, running)

    def _push(self, heap: list[tuple[float, str, int, int]], j: Job, x: int,
              running: bool) -> None:
        y = next((c for c in j.counts if c > x), None)
        if y is None:
            return
        rx, ry = j.rem(x), j.rem(y)
        if math.isinf(rx) or ry > rx * (1 - self.min_gain):
            return
        cost = self.cost if running and x == j.view.gpus else 0.0
        saved = rx - ry - cost
        if saved > 0:
            heapq.heappush(heap, (-saved / (y - x), str(j.view.id), x, y))


def _met(fate: dict[JobId, Fate]) -> int:
    return sum(f is Fate.RESERVED or f is Fate.UNKNOWN for f in fate.values())


def _plan_key(j: Job) -> tuple[int, float, float, tuple[tuple[int, str], ...]]:
    return j.plan_key


def _be_key(j: Job) -> tuple[bool, float, float, tuple[tuple[int, str], ...]]:
    return j.be_order()
