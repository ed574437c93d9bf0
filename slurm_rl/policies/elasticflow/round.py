"""One round of `elasticflow` (the package's docstring gives the steps): the base profile and
admission with plans (1-2), the allocation now (3), leftover GPUs (4), the Decision.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from functools import cached_property
from itertools import compress, repeat
from operator import add

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, Preempt, Resize, id_key
from slurm_rl.policies.elasticflow.base import of_ends
from slurm_rl.policies.elasticflow.jobs import Info, Sticky, deadline_of, edf_key, elastic_ids
from slurm_rl.policies.elasticflow.nodes import Alloc, NodeMap
from slurm_rl.policies.elasticflow.plan import Plan, Profile, plan_job, plan_rigid
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.ordering import Ranked, managed_pending, orders, submit_key


class Round:
    """One decision (or one `futile` check, whose round `decide` then goes on with)."""

    def __init__(self, snapshot: ClusterSnapshot, cost: float, sticky: Sticky) -> None:
        self.now = snapshot.time
        self.snapshot, self.cost, self.sticky = snapshot, cost, sticky
        self.nodes = NodeMap(snapshot, sticky.nodes)
        self.total = self.nodes.total
        self.pending = managed_pending(snapshot)
        eids = elastic_ids(snapshot, sticky)
        self.elastic = ({j.id: j for j in snapshot.running if j.id in eids} if eids else {})
        live = {j.id for j in self.pending} | set(self.elastic)
        sticky.prune(live)
        self.info: dict[JobId, Info] = {}
        self.plans: dict[JobId, Plan] = {}
        self.size = {jid: j.gpus for jid, j in self.elastic.items()}
        self.start: dict[JobId, int] = {}
        self.notes: dict[JobId, str] = {}
        self.grown: set[JobId] = set()
        self.prof: Profile | None = Profile(self.now, self.total)
        """The free-GPU profile with the admitted jobs' plans; None where no job is admitted
        (then `free_now` holds what it would have free now)."""
        self.free_now = 0
        self.allocs: dict[JobId, Alloc] = {}

    @cached_property
    def stands(self) -> list[bool]:
        """Per running job (in `snapshot.running` order): whether its prediction is its
        estimate (`estimates.claims_stand`: believed progress, no owner's record, no
        overrun). Where it is not, the job is estimated as one without a prediction is, so a
        prediction from progress nobody believes does not free its GPUs in the plan."""
        return self.sticky.claims(self.snapshot)

    @cached_property
    def fast(self) -> bool:
        """The common case, built in arrays: no running elastic job, and every running job's
        prediction is its estimate."""
        return not self.elastic and all(self.stands)

    def inf(self, j: JobView) -> Info:
        i = self.info.get(j.id)
        if i is None:
            i = self.info[j.id] = self.sticky.info(j, self.now, self.nodes.cap, self.total)
        return i

    def best_effort(self, j: JobView) -> bool:
        return deadline_of(j) is None or j.id in self.sticky.declined

    # 1. The base profile ------------------------------------------------------------------

    def base_profile(self) -> Profile:
        """The base profile: the free GPUs over time without the admitted jobs' plans (running
        jobs that cannot be re-planned hold their GPUs to their estimated end, unknown: for
        ever; running best-effort elastic jobs their minimum; GPUs of jobs the snapshot does
        not show for ever). The common case is built fast (base.py: `of_ends`)."""
        snap, now = self.snapshot, self.now
        preds = snap.running_predicted
        if self.fast:
            gpus = snap.running_gpus
            ends = list(map(add, repeat(now), preds))  # type: ignore[arg-type]
            forever = max(0, self.nodes.alloc - sum(gpus))
            built = of_ends(now, self.total, ends, gpus, forever, self.sticky.order)
            if built is not None:
                self.sticky.order = built[1]
                return built[0]
        return Profile.of_holds(now, self.total, self.base_holds())

    def base_free(self) -> int:
        """`base_profile().free[0]` (the GPUs it has free now), without building it."""
        now, snap = self.now, self.snapshot
        preds = snap.running_predicted
        if self.fast:  # base_holds' common case, in C loops
            gpus = snap.running_gpus
            ends = map(add, repeat(now), preds)  # type: ignore[arg-type]
            held = sum(compress(gpus, map(now.__lt__, ends)))
            return self.total - held - max(0, self.nodes.alloc - sum(gpus))
        return self.total - sum(g for e, g in self.base_holds() if e > now)

    def base_holds(self) -> list[tuple[float, int]]:
        """(end, GPUs) of what `base_profile` holds from now."""
        now, holds, snap = self.now, [], self.snapshot
        elastic = self.elastic
        running = snap.running if elastic else None  # views only where needed
        gpus, preds = snap.running_gpus, snap.running_predicted
        stands = self.stands
        for i, (g, p) in enumerate(zip(gpus, preds, strict=True)):
            if elastic:
                assert running is not None
                j = running[i]
                if j.id in elastic:
                    if self.best_effort(j):
                        lo = self.inf(j).counts[0]
                        holds.append((now + self.inf(j).rem(lo), lo))
                    continue
            if p is None or not stands[i]:
                if running is None:
                    running = snap.running
                holds.append((now + self.inf(running[i]).rem(g), g))
            else:
                holds.append((now + max(0.0, p), g))
        holds.append((math.inf, max(0, self.nodes.alloc - sum(gpus))))
        return holds

    # 2. Plans and admission ---------------------------------------------------------------

    def plan_one(self, prof: Profile, j: JobView) -> Plan:
        d, i, now = deadline_of(j), self.inf(j), self.now
        assert d is not None
        if i.est is None:  # unknown duration: admitted unchecked, its minimum to its deadline
            plan = Plan(steps=((now, max(d, now + 1.0), i.counts[0]),), end=d, ok=True)
        elif len(i.counts) == 1 and j.id not in self.elastic and 0.0 < (rate := _rate(
                i.rem(i.counts[0]))) < math.inf:  # plan_job's rigid path, with its last plan
            plan, i.reuse = plan_rigid(prof, now, d, rate, i.counts[0], 1.0, i.reuse)
        else:
            running = j.id in self.elastic
            plan = plan_job(prof, now, d, i.rem, i.counts)
            if running and self.cost > 0 and 0 < plan.at(now) != j.gpus:
                # the restart costs the job `cost` seconds of work at its new count
                work = 1.0 + self.cost / i.rem(plan.at(now))
                plan = plan_job(prof, now, d, i.rem, i.counts, work=work)
        prof.take_steps(plan.steps)
        return plan

    def plan(self) -> list[JobView]:
        """Plans every admitted job and decides on the new ones; returns the admitted, EDF."""
        sticky, now = self.sticky, self.now
        adm: list[JobView] = []
        for j in self.elastic.values():
            if deadline_of(j) is not None and j.id not in sticky.declined:
                sticky.admitted.add(j.id)  # running: admitted before (or when the daemon began)
                adm.append(j)
        new: list[JobView] = []
        for j in self.pending:
            if deadline_of(j) is None or j.held or j.id in sticky.declined:
                continue
            (adm if j.id in sticky.admitted else new).append(j)
        adm.sort(key=edf_key)
        if not adm and not new:  # best-effort jobs alone: only the GPUs free now count
            self.plans, self.prof, self.free_now = {}, None, self.base_free()
            return adm
        base = self.base_profile()
        prof = base.copy()
        # The admitted jobs' plans, EDF over `prof`: made only as far as they are read (a
        # newcomer admitted re-plans those after it anyway), in the same order over the same
        # profile, so each is the plan the full pass would make.
        plans: dict[JobId, Plan] = {}
        done = 0

        def upto(m: int) -> None:
            nonlocal done
            while done < m:
                j = adm[done]
                plans[j.id] = self.plan_one(prof, j)
                done += 1

        for n in new:
            d, i = deadline_of(n), self.inf(n)
            assert d is not None
            if i.est is not None and now + min(map(i.rem, i.counts)) > d:
                sticky.decline(n.id)  # not even with the whole cluster from now
                continue
            key = edf_key(n)
            k = next((x for x, j in enumerate(adm) if edf_key(j) > key), len(adm))
            upto(k)
            trial = base.copy()
            for j in adm[:k]:  # the plans of earlier deadlines do not change
                trial.take_steps(plans[j.id].steps)
            tried = {n.id: self.plan_one(trial, n)}
            ok = tried[n.id].ok
            for x in range(k, len(adm)):
                if not ok:
                    break
                j = adm[x]
                tried[j.id] = p = self.plan_one(trial, j)
                if not p.ok:
                    upto(x + 1)
                    ok = not plans[j.id].ok
            if ok:
                sticky.admitted.add(n.id)
                adm.insert(k, n)
                plans.update(tried)
                prof, done = trial, len(adm)
            else:
                sticky.decline(n.id)
        upto(len(adm))
        self.plans, self.prof = plans, prof
        return adm

    # 3. Now -------------------------------------------------------------------------------

    def allocate_now(self, adm: list[JobView]) -> None:
        nodes, now = self.nodes, self.now
        self.allocs = {j.id: nodes.alloc_of(j) for j in self.elastic.values()}
        for j in adm:
            g = self.plans[j.id].at(now)
            if j.id in self.elastic:
                if g > j.gpus and self._move(j, g):
                    self.notes[j.id] = (f"grow to {g} GPUs: planned share for deadline "
                                        f"{fmt_time(deadline_of(j) or 0.0)}")
            elif g > 0:
                got = nodes.place(g)
                if got is None and self._reclaim(j, g):
                    got = nodes.place(g)
                if got is not None:
                    nodes.take(got)
                    self.allocs[j.id], self.start[j.id] = got, g
        failed: set[int] = set()  # counts that did not place: nodes only fill up in here
        dropped = self.sticky.declined if self.sticky.drop else ()
        for j in self.pending:  # best-effort: its minimum, where commitments leave room
            if nodes.total_free <= 0:
                break
            if j.held or not self.best_effort(j) or j.id in dropped:
                continue
            i = self.inf(j)
            g = i.counts[0]
            if g in failed:
                continue
            end = now + i.rem(g)
            prof = self.prof
            if g > nodes.total_free or (self.free_now if prof is None
                                        else prof.min_free(now, end)) < g:
                continue
            got = nodes.place(g)
            if got is None:
                failed.add(g)
            else:
                nodes.take(got)
                self.allocs[j.id], self.start[j.id] = got, g
                if prof is not None:
                    prof.take(now, end, g)
                elif end > now:  # (the base profile never falls: its least is at now)
                    self.free_now -= g

    def _move(self, j: JobView, g: int) -> bool:
        if g == 0:  # suspended: preempted, it resumes when its plan gives it GPUs again
            self.nodes.release(self.allocs[j.id])
            self.allocs[j.id], self.size[j.id] = (), 0
            return True
        got = self.nodes.move(self.allocs[j.id], g)
        if got is None:
            return False
        self.allocs[j.id], self.size[j.id] = got, g
        return True

    def _fits(self, job: JobView, need: int) -> bool:
        """Whether `job` would place at `need` GPUs now (a running one in its own GPUs too)."""
        nodes = self.nodes
        if job.id not in self.elastic:
            return nodes.place(need) is not None
        own = self.allocs[job.id]
        nodes.release(own)
        ok = nodes.place(need) is not None
        nodes.take(own)
        return ok

    def _reclaim(self, job: JobView, need: int) -> bool:
        """Shrink other running elastic jobs (best-effort ones to their minimum, latest
        submitted first; then admitted ones to their planned count, latest deadline first)
        until `job` places at `need` GPUs; if they cannot make room, nobody shrinks."""
        others = [j for j in self.elastic.values() if j.id != job.id]
        cands = sorted((j for j in others if self.best_effort(j)), key=submit_key, reverse=True)
        cands += sorted((j for j in others if j.id in self.plans), key=edf_key, reverse=True)
        saved = (list(self.nodes.free), self.nodes.total_free, dict(self.allocs),
                 dict(self.size))
        changed = []
        for v in cands:
            low = self._low(v)
            opts = [c for c in self.inf(v).counts if low <= c < self.size[v.id]]
            for c in [*reversed(opts), *([0] if low == 0 else [])]:  # the least shrink first
                if not self._move(v, c):
                    continue
                if v not in changed:
                    changed.append(v)
                if self._fits(job, need):
                    what = "grow" if job.id in self.elastic else "start"
                    for w in changed:
                        n = self.size[w.id]
                        self.notes[w.id] = (f"shrink to {n} GPUs to {what} job {job.id} "
                                            "(deadline first)" if n else
                                            f"suspend to {what} job {job.id} (deadline first; "
                                            "its plan gives it no GPUs now)")
                    return True
        self.nodes.free, self.nodes.total_free, self.allocs, self.size = saved
        return False

    def _low(self, v: JobView) -> int:
        """How far `_reclaim` may shrink a running job."""
        lo = self.inf(v).counts[0]
        # an admitted job whose plan gives it nothing now may be suspended (0: preempted)
        return lo if self.best_effort(v) else self.plans[v.id].at(self.now)

    # 4. Leftover GPUs by marginal GPU-time ------------------------------------------------

    def leftover(self, adm: list[JobView]) -> None:
        heap: list[tuple[float, int, JobId, int]] = []
        jobs: dict[JobId, JobView] = {}
        for n, j in enumerate([*adm, *self.elastic.values(), *self.pending]):
            if j.id in jobs or j.held or (j.id not in self.elastic and j.id not in self.start
                                          and j.id not in self.plans):
                continue
            jobs[j.id] = j
            self._push(heap, j, n)
        grown = self.grown
        while heap and self.nodes.total_free > 0:
            _, n, jid, y = heapq.heappop(heap)
            j = jobs[jid]
            if jid in self.elastic:
                if self.size[jid] < j.gpus or not self._move(j, y):
                    continue
            else:
                old = self.allocs.get(jid, ())
                self.nodes.release(old)
                got = self.nodes.place(y)
                self.nodes.take(got if got is not None else old)
                if got is None:
                    continue
                self.allocs[jid], self.start[jid] = got, y
            grown.add(jid)
            self._push(heap, j, n)

    def _push(self, heap: list[tuple[float, int, JobId, int]], j: JobView, n: int) -> None:
        i = self.inf(j)
        running = j.id in self.elastic
        x = self.size[j.id] if running else self.start.get(j.id, 0)
        y = next((c for c in i.counts if c > x), None)
        if y is None or y - x > self.nodes.total_free:
            return
        if x == 0:
            heapq.heappush(heap, (-math.inf, n, j.id, y))
            return
        rx, ry = i.rem(x), i.rem(y)
        if running and x == j.gpus:
            ry += self.cost
        if not ry < rx or math.isinf(rx):
            return
        heapq.heappush(heap, ((y * ry - x * rx) / (y - x), n, j.id, y))

    # Decision -----------------------------------------------------------------------------

    def checked(self) -> list[tuple[JobId, int]]:
        """The resizes that hold on the nodes when applied as the engine applies them (from
        the snapshot's nodes, shrinks first, then the smallest grows): the others are left out
        (the job keeps its count)."""
        moves = [(g - self.elastic[jid].gpus, jid, g) for jid, g in self.size.items()
                 if g != self.elastic[jid].gpus]
        if not moves:
            return []
        nodes, out = NodeMap(self.snapshot, self.sticky.nodes), []
        # preemptions first, then shrinks, then the smallest grows (the simulator's order)
        for _, jid, g in sorted(moves, key=lambda m: (m[2] != 0, m[0], m[1])):
            j = self.elastic[jid]
            if g == 0:
                nodes.release(nodes.alloc_of(j))
                out.append((jid, g))
            elif nodes.move(nodes.alloc_of(j), g) is not None:
                out.append((jid, g))
        return sorted(out, key=lambda e: id_key(e[0]))

    def decision(self, policy: str, adm: list[JobView]) -> Decision:
        resizes, preempts = [], []
        for jid, g in self.checked():
            j = self.elastic[jid]
            if g == 0:
                preempts.append(Preempt(job_id=jid, reason=self.notes.get(jid, "")))
                continue
            parts = [self.notes[jid]] if jid in self.notes else []
            if jid in self.grown:
                parts.append(f"leftover GPUs (marginal GPU-time): est "
                             f"{fmt_dur(self.inf(j).rem(j.gpus))} -> "
                             f"{fmt_dur(self.inf(j).rem(g))}")
            resizes.append(Resize(job_id=jid, gpus=g, reason="; ".join(parts)))
        ranked: list[Ranked] = []
        waiting = [j for j in adm if j.id not in self.elastic]
        rest = [j for j in self.pending if j.id not in self.plans]
        if self.sticky.drop:  # declined and dropped: last (live, where nobody drops them)
            declined = self.sticky.declined
            rest.sort(key=lambda j: j.id in declined)
        for j in sorted(waiting, key=lambda j: (j.id not in self.start, edf_key(j))) + rest:
            i = self.inf(j)
            g = self.start.get(j.id, i.counts[0])
            ranked.append((j, self._why(j), g if i.ranged else None))
        return Decision(policy=policy, order=orders(ranked), resizes=tuple(resizes),
                        preemptions=tuple(preempts))

    def _why(self, j: JobView) -> Callable[[], str]:
        plan, g, now = self.plans.get(j.id), self.start.get(j.id), self.now
        declined, grown = j.id in self.sticky.declined, j.id in self.grown
        d = deadline_of(j)

        def why() -> str:
            if j.held:
                text = "held: not planned"
            elif declined:
                text = (f"declined at admission: deadline {fmt_time(d or 0.0)} cannot be met "
                        "with the admitted jobs' plans; "
                        + ("dropped (declined=drop): never started by this policy, last in "
                           "the order" if self.sticky.drop else "best-effort"))
            elif plan is None:
                text = "best-effort (no deadline), submit order"
            elif self.inf(j).est is None:
                text = f"EDF, deadline {fmt_time(d or 0.0)}, duration unknown: admitted unchecked"
            else:
                first = plan.steps[0] if plan.steps else (now, now, 0)
                when = "now" if first[0] <= now else f"in {fmt_dur(first[0] - now)}"
                text = (f"EDF, deadline {fmt_time(d or 0.0)}, admitted: planned {first[2]} GPUs "
                        f"from {when}, ends {fmt_time(plan.end)}")
            if g is not None:
                text += f"; start now at {g} GPUs" + (" (leftover)" if grown else "")
            return text

        return why


def _rate(rem: float) -> float:
    """Work per second at a remaining time (`plan_job`'s rates)."""
    return 1.0 / rem if rem > 0 else math.inf
