"""One scheduling pass as slurmctld's backfill scheduler makes it: every job tested gets a
reservation (conservative backfill), not only the top one.

slurmctld's backfill plugin walks pending jobs in priority order over a map of when each node's
resources free up (running jobs end at their TIME LIMITS). A job that fits now starts; one that
does not is planned at the earliest time it fits for its whole time limit, and that plan is
written into the map, so no lower job may delay it. Only the first `max_test` jobs are examined
(bf_max_job_test). On the test cluster this, not EASY backfill (one protected job), is what
reproduced slurmctld's start order (docs/sim-to-real.md).

A reservation holds WHOLE NODES for its window, as slurmctld 22.05's backfill map does (it
records node bitmaps): measured on the test cluster, a 1-GPU job with a long limit was not
backfilled onto a node with 2 GPUs free now and 4 later, when a 3-GPU job was planned there.

The map is a step function: breakpoints `times[0] = now < times[1] < ...` and, for each interval
[times[k], times[k+1]), the free GPUs per node (-1: reserved) and the jobs per node (for
`cons_tres` placement).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable

from slurm_rl.sim.backfill import Ends, main_pass
from slurm_rl.sim.cluster import Alloc, Cluster
from slurm_rl.sim.jobs import SimJob

_RESERVED = -1


class _BackfillMap:
    """slurmctld's backfill map (module docstring): free GPUs and jobs per node over time."""

    def __init__(self, now: float, cluster: Cluster, ends: Ends) -> None:
        self.cluster = cluster
        self.times: list[float] = [now]
        self.free: list[list[int]] = [list(cluster.free)]
        self.jobs: list[list[int]] = [list(cluster.jobs_on)]
        for end, _seq, job in ends:
            # A job past its limit is planned as ending just after now (its GPUs are busy now).
            t = max(now + 1e-6, end)
            if t > self.times[-1]:
                self.times.append(t)
                self.free.append(list(self.free[-1]))
                self.jobs.append(list(self.jobs[-1]))
            for node, g in job.alloc:
                self.free[-1][node] += g
                self.jobs[-1][node] -= 1

    def _split_at(self, t: float) -> int:
        """Index of the interval starting exactly at t (inserting a breakpoint if needed)."""
        k = bisect.bisect_right(self.times, t) - 1
        if self.times[k] == t:
            return k
        self.times.insert(k + 1, t)
        self.free.insert(k + 1, list(self.free[k]))
        self.jobs.insert(k + 1, list(self.jobs[k]))
        return k + 1

    def earliest(self, gpus: int, duration: float) -> tuple[int, Alloc] | None:
        """(interval index, placement) of the earliest start that fits for `duration`."""
        n = len(self.times)
        for k in range(n):
            start = self.times[k]
            end = start + duration
            window = list(self.free[k])
            j = k + 1
            while j < n and self.times[j] < end:
                row = self.free[j]
                for i, f in enumerate(row):
                    if f < window[i]:
                        window[i] = f
                j += 1
            alloc = self.cluster.place_on(window, gpus, self.jobs[k])
            if alloc is not None:
                return k, alloc
        return None

    def reserve(self, k: int, duration: float, alloc: Alloc, *, started: bool) -> None:
        """Write a job into the map from interval k for `duration`: a job started now holds
        its GPUs (and a CPU per node); a planned one holds its whole nodes."""
        start = self.times[k]
        end = start + duration
        if math.isfinite(end):
            self._split_at(end)
        k = self._split_at(start)
        j = k
        while j < len(self.times) and self.times[j] < end:
            free, jobs = self.free[j], self.jobs[j]
            for node, g in alloc:
                if started:
                    free[node] -= g
                    jobs[node] += 1
                else:
                    free[node] = _RESERVED
            j += 1


def schedule(now: float, queue: Iterable[SimJob], cluster: Cluster, ends: Ends,
             start: Callable[[SimJob, Alloc], None], *, max_test: int) -> None:
    """Start what can start now; plan every other tested job so that no lower one delays it.

    `queue` yields pending jobs in priority order; `start` takes the GPUs and marks the job
    running."""
    if cluster.free_total == 0:
        return
    rest = iter(queue)
    top = main_pass(rest, cluster, start)
    if top is None:
        return
    profile = _BackfillMap(now, cluster, ends)
    tested = 0
    for job in itertools.chain((top,), rest):
        g = job.gpus
        tested += 1
        if max_test and tested > max_test:
            return
        duration = job.limit_at(g)
        found = profile.earliest(g, duration)
        if found is None:
            continue  # can never fit: no reservation (Slurm leaves it pending)
        k, alloc = found
        if k == 0 and all(cluster.free[node] >= c for node, c in alloc):
            # Fits now without touching any reservation made for a higher job.
            start(job, alloc)
            profile.reserve(0, duration, alloc, started=True)
            if cluster.free_total == 0:
                return
            continue
        profile.reserve(k, duration, alloc, started=False)
