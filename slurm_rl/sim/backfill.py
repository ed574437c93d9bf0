"""One scheduling pass as slurmctld makes it: strict priority order, then EASY backfill.

Jobs start in priority order while they fit. The first that does not (the top blocked job) gets
a reservation: the earliest time its GPUs are free if every running job runs to its TIME LIMIT
(as Slurm plans; true durations are unknown to it), on the nodes it would get then. A lower job
may then start now only if it fits and either its own time limit ends by that time, or it fits
in GPUs the reservation does not need. Only one job is protected (EASY); at most
`max_test` jobs below it are examined (Slurm's bf_max_job_test).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

from slurm_rl.sim.cluster import BEST_FIT, Alloc, Cluster, place_in_buckets, split
from slurm_rl.sim.jobs import SimJob

Ends = list[tuple[float, int, SimJob]]
"""Running jobs as (planned end by time limit, seq, job), sorted."""


def reservation(now: float, top: SimJob, cluster: Cluster, ends: Ends
                ) -> tuple[float, list[int], tuple[int, ...]]:
    """(shadow time, GPUs per node that the reserved job does not need at that time, the
    nodes it is reserved on).

    The shadow time is math.inf when the job could not fit even on an empty cluster (then it
    is reserved on no node)."""
    G, gpus = cluster.per_node, top.gpus
    future = list(cluster.free)
    if gpus <= G:
        def feasible(touched: Iterable[int]) -> bool:
            return any(future[n] >= gpus for n in touched)
        ok = False
    else:
        k, base, extra = split(gpus, G)
        counts = cluster.free_counts()
        ge_base = sum(counts[base:])
        ge_more = sum(counts[base + 1:])

        def feasible(touched: Iterable[int]) -> bool:
            return ge_more >= extra and ge_base >= k
        ok = feasible(())
    shadow = now if ok else math.inf
    i, n_ends = 0, len(ends)
    changed: list[int] = []  # nodes whose future differs from free now
    while not ok and i < n_ends:
        t = max(now, ends[i][0])
        touched: list[int] = []
        # Everything that ends by t is free at t.
        while i < n_ends and max(now, ends[i][0]) <= t:
            for node, g in ends[i][2].alloc:
                old = future[node]
                future[node] = old + g
                touched.append(node)
                if gpus > G:
                    ge_base += (old < base <= old + g)
                    ge_more += (old < base + 1 <= old + g)
            i += 1
        ok = feasible(touched)
        changed += touched
        shadow = t
    if not ok:
        return math.inf, list(cluster.free), ()
    alloc = (place_in_buckets(cluster.buckets_with(future, changed), gpus, G)
             if cluster.placement == BEST_FIT else cluster.place_on(future, gpus))
    assert alloc is not None, "reservation feasible but not placeable"
    for node, g in alloc:
        future[node] -= g
    return shadow, future, tuple(node for node, _ in alloc)


def available(free: list[int], spare: list[int], reserved: tuple[int, ...]) -> list[int]:
    """Per node: min(free now, spare at the shadow time). Spare is free now plus what ends by
    then, less the reservation: below free only on the reserved nodes."""
    avail = list(free)
    for node in reserved:
        if spare[node] < avail[node]:
            avail[node] = spare[node]
    return avail


class ReservationCache:
    """The last reservation, reused while the top job, the running set and the free map are
    unchanged (an arrival changes none of them) and no running job is past its limit; with it
    what backfill derives from it and the free map alone (per node: min(free now, spare))."""

    def __init__(self) -> None:
        self.key: tuple[int, int, int] | None = None
        self.shadow = math.inf
        self.spare: list[int] = []
        self.avail: list[int] = []
        self.avail_total = 0

    def get(self, now: float, top: SimJob, cluster: Cluster, ends: Ends
            ) -> tuple[float, list[int], list[int], int]:
        """(shadow, spare, avail, sum(avail)), the lists the caller's own copies."""
        key = (top.seq, top.gpus, cluster.version)
        if key != self.key or (ends and now > ends[0][0]):
            self.shadow, self.spare, reserved = reservation(now, top, cluster, ends)
            self.avail = available(cluster.free, self.spare, reserved)
            self.avail_total = sum(self.avail)
            self.key = key
        return self.shadow, list(self.spare), list(self.avail), self.avail_total


def main_pass(queue: Iterator[SimJob], cluster: Cluster,
              start: Callable[[SimJob, Alloc], None]) -> SimJob | None:
    """slurmctld's main scheduler: start jobs from `queue` in priority order while they fit.
    Returns the first that does not (the rest stay in `queue`), or None when the queue ran out
    or the cluster is full."""
    for job in queue:
        alloc = cluster.place(job.gpus)
        if alloc is None:
            return job
        start(job, alloc)
        if cluster.free_total == 0:
            return None
    return None


def schedule(now: float, queue: Iterable[SimJob], cluster: Cluster, ends: Ends,
             start: Callable[[SimJob, Alloc], None], *, backfill: bool, max_test: int,
             cache: ReservationCache | None = None) -> None:
    """Start what can start now. `queue` yields pending jobs in priority order; `start`
    takes the GPUs and marks the job running (it must not end the iteration over `queue`)."""
    if cluster.free_total == 0:
        return
    rest = iter(queue)
    top = main_pass(rest, cluster, start)
    if top is None or not backfill:
        return
    G = cluster.per_node
    shadow = -1.0  # the top job's reservation, computed lazily, only if some job may backfill
    spare: list[int] = []
    avail: list[int] = []  # per node: min(free now, spare at the shadow time)
    avail_total = 0
    fail_single = G + 1  # smallest one-node size that failed to place long (monotone)
    fail_multi: set[int] = set()
    tested = 0
    for job in rest:
        g = job.gpus
        tested += 1
        if max_test and tested > max_test:
            return
        if g > cluster.free_total:
            continue
        if shadow < 0:
            if cache:
                shadow, spare, avail, avail_total = cache.get(now, top, cluster, ends)
            else:
                shadow, spare, reserved = reservation(now, top, cluster, ends)
                avail = available(cluster.free, spare, reserved)
                avail_total = sum(avail)
        if now + job.limit_at(g) <= shadow:
            alloc = cluster.place(g)  # ends before the reservation: anywhere
            if alloc is None:
                continue
        else:
            if g > avail_total or g >= fail_single or g in fail_multi:
                continue
            alloc = cluster.place_on(avail, g)
            if alloc is None:
                if g <= G:
                    fail_single = g
                else:
                    fail_multi.add(g)
                continue
            for node, c in alloc:
                spare[node] -= c
        start(job, alloc)
        for node, _ in alloc:
            new = min(cluster.free[node], spare[node])
            avail_total += new - avail[node]
            avail[node] = new
        if cluster.free_total == 0:
            return
