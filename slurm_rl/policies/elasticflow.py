"""`elasticflow`: EDF with admission control, minimum satisfactory share and elastic scaling.

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

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobView,
    Resize,
    id_key,
)
from slurm_rl.policies.elasticflow_state import (
    Known,
    Memory,
    Share,
    by_edf,
    elastic_ids,
    resizable,
    usable_alloc,
)
from slurm_rl.policies.elasticflow_state import (
    deadline_of as _deadline,
)
from slurm_rl.policies.elasticflow_state import (
    edf_key as _edf,
)
from slurm_rl.policies.estimates import estimate_remaining, remaining_at
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.gpu_profile import LazyProfile, ReservedGpus
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, managed_pending, orders, submit_key

NAME = "elasticflow"


class _Round:
    """One decision: the snapshot's views and what has been decided so far."""

    def __init__(self, snapshot: ClusterSnapshot, resize_cost_s: float, min_gain: float,
                 mem: Memory) -> None:
        self.now = now = snapshot.time
        fc = snapshot.free_counts
        if fc is not None:  # every usable node has len(fc) - 1 GPUs (core.ClusterSnapshot)
            usable = sum(fc)
            self.total, self.node_cap = (len(fc) - 1) * usable, len(fc) - 1 if usable else 0
            self.free = sum(f * c for f, c in enumerate(fc))
        else:
            self.total = snapshot.gpus_total
            self.node_cap = max((n.gpus_total for n in snapshot.nodes if n.state.usable),
                                default=0)
            self.free = snapshot.gpus_free
        self.snapshot, self.resize_cost_s, self.min_gain = snapshot, resize_cost_s, min_gain
        self.mem = mem
        self.pending = managed_pending(snapshot)
        old, known = mem.known, {}
        cap = (self.node_cap, self.total)
        fresh: list[Known] = []
        for j in self.pending:
            k = old.get(j.id)
            if k is None or k.view is not j:
                d = j.intent.deadline if j.intent else None
                k = Known(view=j, est=estimate_remaining(j, now), deadline=d,
                          edf=(d if d is not None else math.inf, *submit_key(j)),
                          ranged=gpu_range(j) is not None)
                if d is not None:
                    fresh.append(k)
            if k.counts_for != cap:
                k.counts_for = cap
                rng = gpu_range(j)
                k.counts = allowed_counts(*rng, *cap) if rng else [j.gpus]
                k.rems, k.least = {}, None
                k.entry_key = None
            known[j.id] = k
        # The last EDF list, less the jobs that left or changed, is still in order: sorting it
        # with the new ones appended costs about one pass.
        edf = [k for k in mem.edf if known.get(k.view.id) is k]
        edf += fresh
        edf.sort(key=by_edf)
        self.known, self.edf_pending, mem.known, mem.edf = known, edf, known, edf
        ids = snapshot.running_ids
        if ids is not mem.running_ids:  # the same object: no job started or ended since
            mem.elastic_ids = elastic_ids(snapshot, mem)
            mem.running_ids = ids
        self.elastic = ({j.id: j for j in snapshot.running if j.id in mem.elastic_ids}
                        if mem.elastic_ids else {})
        self.floor: dict[JobId, int] = {}  # planned count of running elastic jobs (no deadline)
        self.shares: dict[JobId, Share] = {}
        self.refused: set[JobId] = set()
        self.size = {j.id: j.gpus for j in self.elastic.values()}  # running elastic, decided
        self.start: dict[JobId, int] = {}  # pending jobs expected to start now, at this count
        self.notes: dict[JobId, str] = {}
        self.grown: set[JobId] = set()

    def _known(self, j: JobView) -> Known | None:
        k = self.known.get(j.id)
        return k if k is not None and k.view is j else None

    def counts(self, j: JobView) -> list[int]:
        k = self._known(j)
        if k is not None:
            return k.counts
        rng = gpu_range(j)
        return allowed_counts(*rng, self.node_cap, self.total) if rng else [j.gpus]

    def rem(self, j: JobView, g: int) -> float:
        k = self._known(j)
        if k is None:
            est = estimate_remaining(j, self.now)
            return remaining_at(j, est, g) if est else math.inf
        return k.rem(g)

    def profile(self) -> ReservedGpus:
        """Running jobs' GPUs until their estimated ends (unknown: for ever); running elastic
        jobs without a deadline at their floor. GPUs allocated to jobs the snapshot does not
        show are held for ever."""
        now, snap, elastic = self.now, self.snapshot, self.elastic
        holds = []
        gpus = snap.running_gpus
        shown = sum(gpus)
        running = snap.running if elastic else None  # (views only where needed)
        # rem(j, g) for the prediction at its own count (estimate_remaining's first source,
        # which remaining_at returns as it is), inlined: the hottest loop
        for i, (g, p) in enumerate(zip(gpus, snap.running_predicted, strict=True)):
            if elastic:
                assert running is not None
                j = running[i]
                if j.id in elastic:
                    if _deadline(j) is not None:
                        continue
                    g = self.floor[j.id]
                    holds.append((now + self.rem(j, g), g))
                    continue
            if p is not None and g >= 1:
                holds.append((now + (p if p > 0.0 else 0.0), g))
            else:
                if running is None:
                    running = snap.running
                holds.append((now + self.rem(running[i], g), g))
        alloc = usable_alloc(snap.nodes, self.mem)
        return ReservedGpus.of_holds(self.total, now, max(0, alloc - shown), holds)

    def held_bound(self) -> int:
        """At least the GPUs `profile()` holds at now (its holds' counts, ignoring that those
        ending by now are left out), read without any estimate (gpu_profile.LazyProfile)."""
        mem, snap = self.mem, self.snapshot
        if mem.shown_for is not snap.running_ids:  # the same object: the same runs
            mem.shown, mem.shown_for = sum(snap.running_gpus), snap.running_ids
        elastic = sum(j.gpus for j in self.elastic.values())
        floors = sum(self.floor.values())
        return max(0, usable_alloc(snap.nodes, mem) - mem.shown) + mem.shown - elastic + floors

    # 1. Plan: admission control and minimum satisfactory shares -------------------------------

    def plan(self) -> list[JobView]:
        now = self.now
        for j in self.elastic.values():
            if _deadline(j) is None:
                self.floor[j.id] = self.counts(j)[0]
        # Running jobs were admitted before: their commitments come first.
        edf = sorted((j for j in self.elastic.values() if _deadline(j) is not None), key=_edf)
        edf += [k.view for k in self.edf_pending if not k.view.held]
        prof = LazyProfile(self.total, now, self.held_bound, self.profile)
        for j in edf:
            d = _deadline(j)
            assert d is not None
            running = j.id in self.elastic
            k = None if running else self._known(j)
            if k is not None and k.est is not None and now + k.fastest() > d:
                # Not even now: no start in the profile (all at or after now) can make it.
                self.refused.add(j.id)
                continue
            if (k.est if k is not None else estimate_remaining(j, now)) is None:
                g = j.gpus if running else self.counts(j)[0]
                self.shares[j.id] = Share(gpus=g, start=now, dur=None)
                prof.add(now, max(d, now), g)
                continue
            for g in self.counts(j):
                dur = self.rem(j, g) + (self.resize_cost_s if running and g != j.gpus else 0.0)
                s = prof.earliest(g, dur, d, now_only=running)
                if s is not None:
                    self.shares[j.id] = Share(gpus=g, start=s, dur=dur)
                    prof.add(s, s + dur, g)
                    break
            else:
                self.refused.add(j.id)
                if running:
                    prof.add(now, now + self.rem(j, j.gpus), j.gpus)
        return edf

    def refusal(self, j: JobView) -> str:
        g = self.counts(j)[-1]
        return (f"not admitted: deadline {fmt_time(_deadline(j) or 0.0)} unreachable even at "
                f"{g} GPUs (est {fmt_dur(self.rem(j, g))}) given commitments")

    # 2. Now: starts, grow to share, reclaim ---------------------------------------------------

    def ranked(self) -> list[JobView]:
        """Admitted (and held) deadline jobs EDF, best-effort by submit, then not admitted."""
        refused = self.refused
        edf = [k.view for k in self.edf_pending]
        return ([j for j in edf if j.id not in refused]
                + [j for j in self.pending if self.known[j.id].deadline is None]
                + [j for j in edf if j.id in refused])

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

    def allocate_now(self, edf: list[JobView], ranked: list[JobView]) -> None:
        for j in edf:
            if j.id in self.elastic and j.id in self.shares:
                extra = self.shares[j.id].gpus - j.gpus
                if 0 < extra <= self.free:
                    self.free -= extra
                    self.size[j.id] = self.shares[j.id].gpus
                    self.notes[j.id] = (f"grow to {self.size[j.id]} GPUs to meet deadline "
                                        f"{fmt_time(_deadline(j) or 0.0)}")
        for j in ranked:
            if j.held:
                continue
            share = self.shares.get(j.id)
            g = share.gpus if share else self.known[j.id].counts[0]
            if g > self.free and share is not None and share.start <= self.now:
                self.free += self.reclaim(g - self.free, j)
            if g <= self.free:
                self.free -= g
                self.start[j.id] = g

    # 3. Leftover GPUs: elastic scaling --------------------------------------------------------

    def grow(self) -> None:
        if self.free <= 0:
            return
        by_id = {j.id: j for j in self.pending} | self.elastic
        while self.free > 0:
            best: tuple[float, JobId, int] | None = None
            for jid, x in [*self.start.items(), *self.size.items()]:
                job = by_id[jid]
                running = jid in self.elastic
                if running and x < job.gpus:
                    continue  # being shrunk for someone else
                y = next((c for c in self.counts(job) if c > x), None)
                if y is None or y - x > self.free or math.isinf(self.rem(job, x)):
                    continue  # no larger count that fits, or nothing known
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

    def decision(self, policy: str, ranked_jobs: list[JobView], mem: Memory) -> Decision:
        ranked: list[Ranked] = []
        now = self.now
        for j in ranked_jobs:
            k = self.known[j.id]
            d = k.deadline
            share = self.shares.get(j.id)
            grown = self.start[j.id] if j.id in self.grown else None
            g = self.start.get(j.id, share.gpus if share else k.counts[0])
            gpus = g if k.ranged else None
            if j.id in self.refused:
                key: tuple[Any, ...] = ("refused", grown, gpus)
            elif d is None or j.held:
                key = ("best-effort" if d is None else "held", grown, gpus)
            else:
                assert share is not None
                wait = None if share.start <= now else share.start - now
                key = ("admitted", share.gpus, share.dur, wait, grown, gpus)
            if k.entry_key != key or k.entry is None:
                k.entry_key, k.entry = key, (j, self._why(j, d, share, grown), gpus)
            ranked.append(k.entry)
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
                parts.append(self.refusal(j))
            resizes.append(Resize(job_id=jid, gpus=g, reason="; ".join(parts)))
        made = orders(ranked, reuse=(mem.ranked, mem.orders))
        mem.ranked, mem.orders = ranked, made
        return Decision(policy=policy, order=made, resizes=tuple(resizes))

    def _why(self, j: JobView, d: float | None, share: Share | None,
             grown: int | None) -> Callable[[], str]:
        """The reason of a ranked job, formatted when read."""
        if j.id in self.refused:
            first = self.refusal(j)  # cheap beside the plan: its parts are cached per view
            return lambda: first if grown is None else f"{first}; given {grown} GPUs from leftover"
        now = self.now

        def why() -> str:
            if d is None:
                text = "best-effort (no deadline), submit order"
            elif j.held:
                text = f"EDF, deadline {fmt_time(d)}, held: not planned"
            else:
                assert share is not None
                text = f"EDF, deadline {fmt_time(d)}, {share.why(now)}"
            return text if grown is None else f"{text}; given {grown} GPUs from leftover"

        return why


@dataclass(frozen=True, kw_only=True)
class ElasticFlow:
    name: str = field(default=NAME, init=False)
    resize_cost_s: float = 30.0
    """Restart time assumed for resizing a running elastic job (checkpoint, requeue, reload)."""
    min_gain: float = 0.1
    """Leftover GPUs: a step must cut the job's remaining time by at least this fraction."""
    _mem: Memory = field(default_factory=lambda: Memory(), init=False, repr=False,
                          compare=False)

    def __post_init__(self) -> None:
        if self.resize_cost_s < 0 or not 0 <= self.min_gain < 1:
            raise ValueError("resize_cost_s must be >= 0 and min_gain in [0, 1)")

    def may_resize(self, job: JobView) -> bool:
        """Resizing (capabilities.py): running elastic managed jobs with a GPU range."""
        return resizable(job)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        r = _Round(snapshot, self.resize_cost_s, self.min_gain, self._mem)
        edf = r.plan()
        ranked = r.ranked()
        r.allocate_now(edf, ranked)
        r.grow()
        return r.decision(self.name, ranked, self._mem)


def new(**options: Any) -> ElasticFlow:
    """Options: resize_cost_s (30.0), min_gain (0.1)."""
    return build(ElasticFlow, options)
