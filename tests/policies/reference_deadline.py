"""`deadline`'s rules (slurm_rl/policies/deadline/policy.py) written the plain way: every
pending job's estimate worked out at every call (no memo), reservations kept as a list of
(start, end, GPUs) and the earliest start found by trying every boundary, spare GPUs given by
scanning every candidate at every step (no heap). The reference the policy must agree with,
decision for decision (tests/policies/test_deadline_fast.py): ranks, GPU counts, resizes."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_rl.core import Decision, JobOrder, JobState, Resize, ServiceClass, id_key
from slurm_rl.policies import urgency
from slurm_rl.policies.capacity import Capacity, job_layout
from slurm_rl.policies.estimates import Source, estimate_remaining, remaining_at
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.ordering import managed_pending

BE, CRIT = ServiceClass.BESTEFFORT, ServiceClass.CRITICAL


@dataclass
class J:
    view: object
    counts: list
    est: object
    deadline: object
    hard: bool
    cls: ServiceClass
    user: str

    def rem(self, g):
        return remaining_at(self.view, self.est, g) if self.est is not None else math.inf

    def reserves(self):
        return self.deadline is not None and self.cls is not BE

    def plan_key(self):
        d = self.deadline if self.deadline is not None else math.inf
        return (0 if self.cls is CRIT else 1, d, self.view.submit_time, id_key(self.view.id))

    def be_key(self):
        return (self.cls is BE, self.view.submit_time + min(self.rem(self.counts[0]), 1e12),
                self.view.submit_time, id_key(self.view.id))


def make_j(v, now, node_cap, total):
    rng, it = gpu_range(v), v.intent
    cls = it.service_class if it else ServiceClass.STANDARD
    d = it.deadline if it else None
    return J(v, allowed_counts(*rng, node_cap, total) if rng else [v.gpus],
             estimate_remaining(v, now), d, bool(it and it.hard), cls,
             v.user if v.user and d is not None and cls is not BE else "")


def resizable(v):
    return (v.managed and v.state is JobState.RUNNING and v.intent is not None
            and v.intent.elastic and gpu_range(v) is not None)


class Profile:
    """Reserved GPUs as a plain list of (start, end, gpus)."""

    def __init__(self, capacity, now):
        self.capacity, self.now, self.res = capacity, now, []

    def add(self, start, end, gpus):
        start, end = max(start, self.now), max(end, self.now)
        if end > start:
            self.res.append((start, end, gpus))

    def used(self, t):
        return sum(g for s, e, g in self.res if s <= t < e)

    def earliest(self, gpus, dur, deadline, now_only):
        points = sorted({self.now, *(t for s, e, _ in self.res for t in (s, e)
                                     if self.now <= t < math.inf)})
        for t in points[:1] if now_only else points:
            if t + dur > deadline:
                return None
            inside = [t] + [p for p in points if t < p < t + dur]
            if all(self.used(p) + gpus <= self.capacity for p in inside):
                return t
        return None


def decide(snapshot, min_gain=0.1, cost=30.0, share=urgency.DEFAULT_SHARE):
    """(order as [(id, gpus or None)] in rank order, resizes as [(id, gpus)] by id)."""
    now = snapshot.time
    node_cap = max((n.gpus_total for n in snapshot.nodes if n.state.usable), default=0)
    total = snapshot.gpus_total
    pending = [make_j(v, now, node_cap, total) for v in managed_pending(snapshot)]
    by_id = {j.view.id: j for j in pending}
    run = {}
    for v in snapshot.running:
        if resizable(v):
            j = make_j(v, now, node_cap, total)
            j.counts = sorted({*j.counts, v.gpus})
            run[v.id] = j

    def plan(capped, order, mixed=False):
        prof = Profile(total, now)
        shown = sum(v.gpus for v in snapshot.running)
        alloc = sum(n.gpus_alloc for n in snapshot.nodes if n.state.usable)
        prof.add(now, math.inf, max(0, alloc - shown))
        for v in snapshot.running:
            if v.id in run:
                if not run[v.id].reserves():
                    f = run[v.id].counts[0]
                    prof.add(now, now + run[v.id].rem(f), f)
                continue
            est = estimate_remaining(v, now)
            prof.add(now, math.inf if est is None else now + max(0.0, est.seconds), v.gpus)
        fate, shares = {}, {}

        def reserve(j, running):
            d, cur, jid = j.deadline, j.view.gpus, j.view.id
            if j.est is None:
                g = cur if running else j.counts[0]
                fate[jid], shares[jid] = "unknown", g
                prof.add(now, max(d, now), g)
                return
            bound = j.est.source is Source.TIME_LIMIT
            if not running and now + min(j.rem(g) for g in j.counts) > d and not bound:
                fate[jid] = "demoted" if j.hard else "late"
                return
            for g in j.counts:
                dur = j.rem(g) + (cost if running and g != cur else 0.0)
                s = prof.earliest(g, dur, d, running)
                if s is not None:
                    fate[jid], shares[jid] = ("reserved", s), g
                    prof.add(s, s + dur, g)
                    return
            if bound:
                g = cur if running else j.counts[0]
                fate[jid], shares[jid] = "unknown", g
                prof.add(now, max(d, now), g)
                return
            fate[jid] = "late"
            if running:
                prof.add(now, now + j.rem(j.counts[0]), j.counts[0])

        if not mixed:
            for j in sorted((j for j in run.values() if j.reserves()), key=J.plan_key):
                reserve(j, True)
        for j in order:
            if j.view.id in run:
                reserve(j, True)
            elif not j.reserves() or j.view.held:
                fate[j.view.id] = "none"
            elif j.view.id in capped:
                fate[j.view.id] = "capped"
            else:
                reserve(j, False)
        return prof, fate, shares

    def cheapest(j):
        if j.deadline is None or j.est is None:
            return (0 if j.cls is CRIT else 1, 0.0)
        for g in j.counts:
            if now + j.rem(g) <= j.deadline:
                return (0 if j.cls is CRIT else 1, g * j.rem(g))
        return (0 if j.cls is CRIT else 1, math.inf)

    def met(fate):
        return sum(f == "unknown" or (isinstance(f, tuple) and f[0] == "reserved")
                   for f in fate.values())

    def best_plan(capped):
        first = plan(capped, pending)
        if "late" not in first[1].values():
            return first
        both = [*pending, *(j for j in run.values() if j.reserves())]
        second = plan(capped, sorted(both, key=cheapest), mixed=True)
        return first if met(first[1]) >= met(second[1]) else second

    def planned(f):
        return f == "unknown" or isinstance(f, tuple)

    prof, fate, shares = best_plan(set())
    urgent = sorted((j for j in pending if j.user and planned(fate[j.view.id])), key=J.plan_key)
    over = urgency.capped_in(snapshot, [(j.user, shares[j.view.id]) for j in urgent],
                             urgency.deadline_not_besteffort, share,
                             {v.user for v in snapshot.pending if v.managed}) if urgent else []
    if over:
        prof, fate, shares = best_plan({urgent[k].view.id for k in over})
    floor = {jid: shares.get(jid, j.counts[0]) for jid, j in run.items()}
    size = {jid: j.view.gpus for jid, j in run.items()}
    start, shrunk = {}, set()

    def free_after():
        """Free GPUs less every resize and start so far, as the simulator applies them: each
        resize in turn, shrinks first (released, then placed), then the starts, widest first;
        None if they do not all place."""
        cap = Capacity.of(snapshot)
        moved = sorted(((run[jid].view, g) for jid, g in size.items()
                        if g != run[jid].view.gpus), key=lambda e: (e[1] - e[0].gpus,
                                                                     str(e[0].id)))
        for v, g in moved:
            cap.release(job_layout(v, v.gpus, node_cap))
            if not cap.take(job_layout(v, g, node_cap)):
                return None
        parts = [job_layout(by_id[jid].view, g, node_cap) for jid, g in start.items()]
        parts.sort(key=lambda p: (-max(p, default=0), -len(p)))
        for p in parts:
            if not cap.take(p):
                return None
        return cap

    def attempt(counts, jid, g, urgent):
        had = counts.get(jid)
        counts[jid] = g
        if free_after() is not None:
            return True
        donors = [rid for rid in size if rid != jid and size[rid] > floor[rid]
                  and (urgent or not isinstance(fate.get(rid), tuple))]
        donors.sort(key=lambda rid: (isinstance(fate.get(rid), tuple), -size[rid], id_key(rid)))
        before = dict(size)
        for rid in donors:
            size[rid] = floor[rid]
            if free_after() is not None:
                shrunk.update(r for r in donors if size[r] != before[r])
                return True
        size.update(before)
        if had is None:
            del counts[jid]
        else:
            counts[jid] = had
        return False

    for j in sorted(run.values(), key=J.plan_key):
        g = shares.get(j.view.id)
        if isinstance(fate.get(j.view.id), tuple) and g > j.view.gpus:
            attempt(size, j.view.id, g, True)
    ranked = sorted((j for j in pending if planned(fate[j.view.id])), key=J.plan_key)
    for j in ranked:
        f = fate[j.view.id]
        if not j.view.held and (f == "unknown" or f[1] <= now):
            attempt(start, j.view.id, shares[j.view.id], True)
    rest = sorted((j for j in pending if fate[j.view.id] in ("late", "capped", "none")),
                  key=J.be_key)
    failed = set()  # a layout that did not place is not tried again until a job is shrunk
    for j in rest:
        cap = free_after()
        if j.view.held or cap.total_free <= 0:
            continue
        g = j.counts[0]
        if prof.earliest(g, j.rem(g), math.inf, True) is None:
            continue
        parts = tuple(job_layout(j.view, g, node_cap))
        if parts in failed:
            continue
        before = len(shrunk)
        if attempt(start, j.view.id, g, False):
            prof.add(now, now + j.rem(g), g)
        else:
            failed.add(parts)
        if len(shrunk) != before:
            failed.clear()
    ranked += rest
    ranked += [j for j in pending if fate[j.view.id] == "demoted"]
    # Spare GPUs: scan every candidate at every step for the best saving per extra GPU.
    cands = {jid: (by_id[jid], False) for jid in start}
    cands.update({jid: (run[jid], True) for jid in size if jid not in shrunk})
    done = set()
    while True:
        cap = free_after()
        free = cap.total_free
        if free <= 0:
            break
        best = None
        for jid, (j, running) in cands.items():
            if jid in done:
                continue
            x = (size if running else start)[jid]
            y = next((c for c in j.counts if c > x), None)
            if y is None:
                done.add(jid)
                continue
            rx, ry = j.rem(x), j.rem(y)
            saved = rx - ry - (cost if running and x == j.view.gpus else 0.0)
            if math.isinf(rx) or ry > rx * (1 - min_gain) or not saved > 0:
                done.add(jid)
                continue
            key = (-saved / (y - x), str(jid))
            if best is None or key < best[0]:
                best = (key, jid, y, running)
        if best is None:
            break
        _, jid, y, running = best
        counts = size if running else start
        x = counts[jid]
        if y - x > free:
            done.add(jid)
            continue
        counts[jid] = y
        if free_after() is None:
            counts[jid] = x
            done.add(jid)
    order = []
    for j in ranked:
        f = fate[j.view.id]
        g = start.get(j.view.id, shares.get(j.view.id, j.counts[0]))
        order.append((j.view.id, g if gpu_range(j.view) else None))
    resizes = [(jid, g) for jid, g in sorted(size.items(), key=lambda e: id_key(e[0]))
               if g != run[jid].view.gpus]
    return order, resizes


class Reference:
    """`decide` as a policy (reasons left out), for the simulator."""

    name = "deadline"

    def __init__(self, **options):
        self.options = options

    def may_resize(self, job):
        return resizable(job)

    def decide(self, snapshot):
        order, resizes = decide(snapshot, **self.options)
        return Decision(policy=self.name,
                        order=tuple(JobOrder(job_id=jid, rank=k, gpus=g)
                                    for k, (jid, g) in enumerate(order)),
                        resizes=tuple(Resize(job_id=jid, gpus=g) for jid, g in resizes))
