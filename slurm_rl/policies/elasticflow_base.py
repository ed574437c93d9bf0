"""`elasticflow`'s base profile: the free GPUs over time without the admitted jobs' plans
(running jobs that cannot be re-planned hold their GPUs to their estimated end, unknown: for
ever; running best-effort elastic jobs their minimum; GPUs of jobs the snapshot does not show
for ever). Built at nearly every decision, from every running job.

The common case (no elastic job running, every running job's remaining time known) is built in
C loops, and sorted in the order of the last call where that order still sorts the ends: a run's
estimated end moves little from one decision to the next, so the order mostly holds, and a
check costs one pass where a sort of (end, GPUs) tuples costs many
(test_elasticflow_gate.py checks it against `Profile.of_holds`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate, compress, islice, repeat
from operator import add, le, lt, ne
from typing import TYPE_CHECKING

from slurm_rl.policies.elasticflow_plan import Profile

if TYPE_CHECKING:
    from slurm_rl.policies.elasticflow_round import Round


def base_profile(r: Round) -> Profile:
    """The base profile of the round's snapshot (the module's docstring)."""
    snap, now = r.snapshot, r.now
    preds = snap.running_predicted
    if not r.elastic and None not in preds:
        gpus = snap.running_gpus
        ends = list(map(add, repeat(now), preds))  # type: ignore[arg-type]
        forever = max(0, r.nodes.alloc - sum(gpus))
        built = of_ends(now, r.total, ends, gpus, forever, r.sticky.order)
        if built is not None:
            r.sticky.order = built[1]
            return built[0]
    return Profile.of_holds(now, r.total, base_holds(r))


def of_ends(now: float, total: int, ends: list[float], gpus: Sequence[int], forever: int,
            order: list[int]) -> tuple[Profile, list[int]] | None:
    """`Profile.of_holds(now, total, [*zip(ends, gpus), (inf, forever)])`, and the order that
    sorts `ends` (`order` where it still does); None where an end is NaN.

    Holds that end at the same time may come in any order: the profile keeps one step per
    distinct end, with the GPUs of all of them (integers: any order adds up the same)."""
    e: list[float] = []
    distinct = kept = False
    if len(order) == len(ends):
        e = list(map(ends.__getitem__, order))
        distinct = all(map(lt, e, islice(e, 1, None)))
        kept = distinct or all(map(le, e, islice(e, 1, None)))
    if not kept:
        order = sorted(range(len(ends)), key=ends.__getitem__)
        e = list(map(ends.__getitem__, order))
        distinct = all(map(lt, e, islice(e, 1, None)))
        if not distinct and not all(map(le, e, islice(e, 1, None))):  # a NaN (no order)
            return None
    g = list(map(gpus.__getitem__, order))
    i = bisect.bisect_right(e, now)  # those that end after now
    if i:
        e, g = e[i:], g[i:]
    if 0 in g:  # a hold of no GPUs makes no step
        keep = list(map(ne, g, repeat(0)))
        e, g = list(compress(e, keep)), list(compress(g, keep))
    new = Profile(now, total - sum(g) - forever)
    k = bisect.bisect_left(e, math.inf)
    if k == len(e) and distinct:  # (mostly) one step per end, without hashing them
        new.times.extend(e)
        new.free = list(accumulate(g, initial=new.free[0]))
    elif k:
        # one step per distinct end (a dict keeps the last, cumulative, value of a time)
        steps = dict(zip([now, *e[:k]], accumulate(g[:k], initial=new.free[0]), strict=True))
        new.times, new.free = list(steps), list(steps.values())
    return new, order


def base_free(r: Round) -> int:
    """`base_profile(r).free[0]` (the GPUs it has free now), without building it."""
    now, snap = r.now, r.snapshot
    preds = snap.running_predicted
    if not r.elastic and None not in preds:  # base_holds' common case, in C loops
        gpus = snap.running_gpus
        ends = map(add, repeat(now), preds)  # type: ignore[arg-type]
        held = sum(compress(gpus, map(now.__lt__, ends)))
        return r.total - held - max(0, r.nodes.alloc - sum(gpus))
    return r.total - sum(g for e, g in base_holds(r) if e > now)


def base_holds(r: Round) -> list[tuple[float, int]]:
    """(end, GPUs) of what `base_profile` holds from now."""
    now, holds, snap = r.now, [], r.snapshot
    elastic = r.elastic
    running = snap.running if elastic else None  # views only where needed
    gpus, preds = snap.running_gpus, snap.running_predicted
    for i, (g, p) in enumerate(zip(gpus, preds, strict=True)):
        if elastic:
            assert running is not None
            j = running[i]
            if j.id in elastic:
                if r.best_effort(j):
                    lo = r.inf(j).counts[0]
                    holds.append((now + r.inf(j).rem(lo), lo))
                continue
        if p is None:
            if running is None:
                running = snap.running
            holds.append((now + r.inf(running[i]).rem(g), g))
        else:
            holds.append((now + max(0.0, p), g))
    holds.append((math.inf, max(0, r.nodes.alloc - sum(gpus))))
    return holds
