"""`elasticflow`'s plan of one job over the free-GPU profile (ElasticFlow's
`scheduler.py:ef_sim_allocation`), and the profile itself (`CLUSTER.future_free_gpus`).

Pure: numbers in, numbers out. Work is counted as ElasticFlow counts iterations: a job's work
left is 1 (all of it) and it does 1 / rem(g) of it per second at g GPUs, rem(g) being its
remaining time at g GPUs (the estimate moved along the model's speed-up curve), so a plan may
change the count from one profile step to the next.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, itemgetter, le, mul, ne, sub, truediv

_first, _second = itemgetter(0), itemgetter(1)

Step = tuple[float, float, int]
"""(from, to, GPUs) of a plan."""


class Profile:
    """Free GPUs over time from `now` on: a step function, `free[i]` on [times[i], times[i+1])
    (the last step for ever). May go below zero where a running job keeps its floor."""

    __slots__ = ("free", "times")

    def __init__(self, now: float, total: int) -> None:
        self.times: list[float] = [now]
        self.free: list[int] = [total]

    @classmethod
    def of_holds(cls, now: float, total: int, holds: Sequence[tuple[float, int]]) -> Profile:
        """`total` GPUs less `holds`, each (end, GPUs) held from now to end: one sort."""
        live = sorted(holds)  # then those that end after now, in C loops
        live = live[bisect.bisect_right(live, (now, math.inf)):]
        gpus = list(map(_second, live))
        if 0 in gpus:  # a hold of no GPUs makes no step
            live = [h for h in live if h[1]]
            gpus = list(map(_second, live))
        new = cls(now, total - sum(gpus))
        k = len(live)
        while k and live[k - 1][0] == math.inf:
            k -= 1
        if k:
            # one step per distinct end (a dict keeps the last, cumulative, value of a time)
            steps = dict(zip([now, *map(_first, live[:k])],
                             accumulate(gpus[:k], initial=new.free[0]), strict=True))
            new.times, new.free = list(steps), list(steps.values())
        return new

    def min_free(self, start: float, end: float) -> int:
        """The least free GPUs on [start, end)."""
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        j = bisect.bisect_left(self.times, end)
        return min(self.free[i:max(j, i + 1)])

    def copy(self) -> Profile:
        new = Profile.__new__(Profile)
        new.times, new.free = list(self.times), list(self.free)
        return new

    def _cut(self, t: float) -> int:
        """Index of the step that starts at t (made if needed); t >= times[0]."""
        i = bisect.bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.free.insert(i + 1, self.free[i])
        return i + 1

    def take(self, start: float, end: float, gpus: int) -> None:
        """Hold `gpus` on [start, end) (end inf: for ever)."""
        start = max(start, self.times[0])
        if gpus == 0 or end <= start:
            return
        i = self._cut(start)
        j = self._cut(end) if end < math.inf else len(self.times)
        free = self.free
        free[i:j] = map(gpus.__rsub__, free[i:j])  # f - gpus each

    def take_steps(self, steps: Sequence[Step]) -> None:
        for a, b, g in steps:
            self.take(a, b, g)

    def segments(self, until: float) -> list[tuple[float, float, int]]:
        """(from, to, free) steps before `until` (the last one cut there)."""
        out = []
        times, free = self.times, self.free
        for i, t in enumerate(times):
            if t >= until:
                break
            nxt = times[i + 1] if i + 1 < len(times) else math.inf
            out.append((t, min(nxt, until), free[i]))
        return out


def level(counts: Sequence[int], n: int) -> int:
    """The largest allowed count that n free GPUs hold (`utils.get_last_level`); 0: none."""
    i = bisect.bisect_right(counts, n)
    return counts[i - 1] if i else 0


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    end: float
    """When the plan finishes the job (inf: never, with the profile's GPUs)."""
    ok: bool
    """Whether it ends by the deadline."""

    def at(self, t: float) -> int:
        """GPUs the plan gives at t."""
        for a, b, g in self.steps:
            if a <= t < b:
                return g
        return 0


def plan_job(profile: Profile, now: float, deadline: float, rem: Callable[[int], float],
             counts: Sequence[int], *, work: float = 1.0, floor: int = 0,
             fast: bool = True) -> Plan:
    """ElasticFlow's minimum satisfactory share of one job (`ef_sim_allocation`).

    For each quota q of `counts`, smallest first: walking back from the deadline, each profile
    step gives the job min(q, level(free)) GPUs; the first q whose steps hold `work` before the
    deadline is its share. The job then runs forward from now: before the step where that
    backward walk ended ("point") at min(previous quota, level(free)), from it at min(q,
    level(free)), until its work is done. No quota: it runs at the largest count each step
    holds until done (past the deadline: `ok` False), as the original's "allocate from ddl".
    `floor`: GPUs it keeps in the first step whatever the profile says (a running job that
    cannot be paused). `fast` False: the general loop even for a rigid job (the reference
    its fast path, `plan_rigid`, is tested against)."""
    rates = {}
    for c in counts:
        r = rem(c)
        rates[c] = 1.0 / r if r > 0 else math.inf
    times, free = profile.times, profile.free
    # steps before the deadline: k < n, the last one cut at the deadline
    n = bisect.bisect_left(times, deadline) if deadline > now else 0
    one = counts[0] if len(counts) == 1 else 0  # a rigid job: level(f) is it or nothing
    if fast and one and not floor and 0.0 < rates[one] < math.inf:
        return plan_rigid(profile, now, deadline, rates[one], one, work)[0]
    for qi, q in enumerate(counts):
        acc, point = 0.0, None
        b = deadline
        for k in range(n - 1, -1, -1):
            a, f = times[k], free[k]
            g = (one if f >= one else 0) if one else min(q, level(counts, f))
            if g:
                acc += (b - a) * rates[g]
                if acc >= work:
                    point = a
                    break
            b = a
        if point is None:
            continue
        low = counts[qi - 1] if qi else 0
        plan = _forward(times, free, deadline, now, work, rates, counts, (point, q, low), floor)
        if plan is not None and plan.end <= deadline:
            return plan
    top = counts[-1] if counts else 0
    plan = _forward(times, free, math.inf, now, work, rates, counts, (-math.inf, top, top),
                    floor)
    if plan is None:  # the profile never holds a count: it never ends
        return Plan(steps=(), end=math.inf, ok=False)
    return Plan(steps=plan.steps, end=plan.end, ok=plan.end <= deadline)


@dataclass(frozen=True, slots=True)
class Reuse:
    """A rigid plan and all of the profile it was made from: the steps from its point to the
    deadline. A later profile with the same values there gives the same plan (`plan_rigid`)."""

    key: tuple[float, float, int, float]
    """(deadline, rate, GPUs, work)."""
    times: list[float]
    free: list[int]
    plan: Plan


def plan_rigid(profile: Profile, now: float, deadline: float, r: float, one: int,
               work: float = 1.0, last: Reuse | None = None) -> tuple[Plan, Reuse | None]:
    """`plan_job` for a rigid job (one count, rate r, 0 < r < inf, no floor): the same float
    operations in the same order, run in C loops (`accumulate`, `map`) over windows of profile
    steps that double in size, instead of a Python loop over every step
    (test_elasticflow_gate.py checks it against `plan_job`'s general loop).

    `last`: what an earlier call returned for the job. Where its key is the same and `profile`
    holds the very values it read (the steps from the point to the deadline, compared wherever
    they now lie), that plan is the answer: the backward walk and the forward run read only
    those steps and the deadline, so they would make it again, float for float. The second
    value: what to pass next time (None: a plan that read from now, which moves)."""
    times, free = profile.times, profile.free
    n = bisect.bisect_left(times, deadline) if deadline > now else 0
    key = (deadline, r, one, work)
    if last is not None and n and last.key == key:
        lo = n - len(last.free)
        if lo >= 0 and free[lo:n] == last.free and times[lo:n] == last.times:
            return last.plan, last
    # (the walk back mostly ends near where it did last time: one window to a bit past there)
    hint = len(last.free) + len(last.free) // 8 + 2 if last is not None else 0
    point = _point_one(times, free, deadline, n, r, one, work, hint)
    if point is not None:
        # (a run that ends by the deadline ends by step n: one window to there)
        plan = _forward_one(times, free, deadline, work, r, one, point, n - point)
        if plan is not None and plan.end <= deadline:
            return plan, Reuse(key=key, times=times[point:n], free=free[point:n], plan=plan)
    plan = _forward_one(times, free, math.inf, work, r, one, 0)
    if plan is None:  # the profile never holds a count: it never ends
        return Plan(steps=(), end=math.inf, ok=False), None
    return Plan(steps=plan.steps, end=plan.end, ok=plan.end <= deadline), None


_WINDOW = 16
"""Profile steps `_point_one` and `_forward_one` read first (then twice as many each time)."""


def _point_one(times: list[float], free: list[int], deadline: float, n: int, r: float,
               one: int, work: float, first: int = 0) -> int | None:
    """The step where the backward walk from the deadline over the steps that hold `one`
    (acc += (b - a) * r) first holds `work`; None: it never does. `first`: steps to read in
    the first window (more than `_WINDOW`; the window changes no float operation)."""
    acc, hi, size = 0.0, n, max(first, _WINDOW)
    while hi > 0:
        lo = max(0, hi - size)
        size *= 2
        fits = list(map(one.__le__, reversed(free[lo:hi])))
        ks = list(compress(range(hi - 1, lo - 1, -1), fits))
        if ks:
            ends = times[lo + 1:hi + 1] if hi < n else [*times[lo + 1:n], deadline]
            accs = list(accumulate(map(mul, map(sub, compress(reversed(ends), fits),
                                                map(times.__getitem__, ks)), repeat(r)),
                                   initial=acc))
            i = bisect.bisect_left(accs, work, 1)  # the first acc >= work (accs never fall)
            if i < len(accs):
                return ks[i - 1]
            acc = accs[-1]
        hi = lo
    return None


def _forward_one(times: list[float], free: list[int], until: float, work: float, r: float,
                 one: int, k0: int, first: int = 0) -> Plan | None:
    """`_forward` for `plan_rigid`, from step k0 (its point) on: each step that holds `one`
    runs it (left -= (b - a) * r) until a + left / r <= b; one plan step while it runs
    without a break. `first`: steps to read in the first window (more than `_WINDOW`)."""
    n = bisect.bisect_left(times, until) if until < math.inf else len(times)
    steps: list[Step] = []
    left, lo, size = work, k0, max(first, _WINDOW)
    open_a: float | None = None  # start of the plan step still running
    last_b: float | None = None  # b of the last step that ran
    while lo < n:
        hi = min(n, lo + size)
        size *= 2
        fits = list(map(one.__le__, free[lo:hi]))
        qa = list(compress(times[lo:hi], fits))
        if not qa:
            lo = hi
            continue
        bs = times[lo + 1:hi + 1]
        if hi == len(times):
            bs.append(math.inf)
        if hi == n and bs[-1] > until:  # only the step before `until` can pass it
            bs[-1] = until
        qb = list(compress(bs, fits))
        lefts = list(accumulate(map(mul, map(sub, qb, qa), repeat(r)), sub, initial=left))
        done = list(map(le, map(add, qa, map(truediv, lefts, repeat(r))), qb))
        found = True in done
        upto = done.index(True) + 1 if found else len(qa)
        for s in compress(range(upto), map(ne, [last_b, *qb[:upto - 1]], qa)):
            if open_a is not None:
                steps.append((open_a, qb[s - 1] if s else last_b, one))  # type: ignore[arg-type]
            open_a = qa[s]
        if found:
            assert open_a is not None
            end = qa[upto - 1] + lefts[upto - 1] / r
            steps.append((open_a, end, one))
            return Plan(steps=tuple(steps), end=end, ok=True)
        left, last_b, lo = lefts[-1], qb[-1], hi
    return None


def _forward(times: Sequence[float], free: Sequence[int], until: float, now: float,
             work: float, rates: dict[int, float], counts: Sequence[int],
             quota: tuple[float, int, int], floor: int) -> Plan | None:
    """Runs the job forward from now over the profile steps before `until`: quota = (point, q,
    low) gives it at most q GPUs from point on and at most low before."""
    point, q, low = quota
    steps: list[Step] = []
    left = work
    one = counts[0] if len(counts) == 1 else 0
    last = len(times) - 1
    # before `point` a quota of no GPUs (low 0) and no floor give nothing: start at point
    k0 = bisect.bisect_left(times, point) if not low and not floor else 0
    for k in range(k0, last + 1):
        a = times[k]
        if a >= until:
            break
        f = free[k]
        if one:
            g = one if f >= one and (q if a >= point else low) else 0
        else:
            g = min(q if a >= point else low, level(counts, f))
        if a <= now and floor > g:
            g = floor
        if not g:
            continue
        b = times[k + 1] if k < last else math.inf
        if b > until:
            b = until
        r = rates[g]
        need = left / r if r > 0 else math.inf
        end = a + need if a + need <= b else b
        if steps and steps[-1][2] == g and steps[-1][1] == a:  # one step while g holds
            steps[-1] = (steps[-1][0], end, g)
        else:
            steps.append((a, end, g))
        if end < b or a + need == b:
            return Plan(steps=tuple(steps), end=end, ok=True)
        left -= (b - a) * r
    return None


def gpu_time(plan: Plan) -> float:
    """GPU-seconds of a plan (`utils.get_allocation_time`)."""
    return sum((b - a) * g for a, b, g in plan.steps)
