"""The fast build of `elasticflow`'s base profile (`Round.base_profile`, round.py: the free
GPUs over time without the admitted jobs' plans), built at nearly every decision from every
running job.

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
from operator import le, lt, ne

from slurm_rl.policies.elasticflow.plan import Profile


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
