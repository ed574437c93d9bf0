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

    def __init__(self, now: float, cluster: Cluster, ends: Ends, window_s: float = 0.0,
                 origin_s: float = 0.0) -> None:
        self.cluster = cluster
        self.now = now
        self.window_s = window_s
        self.origin_s = origin_s
        self._ends = ends
        self._planned: list[tuple[float, float, Alloc]] = []
        self._build()

    def _build(self) -> None:
        """The map from the running jobs alone (each freeing its GPUs at its release)."""
        now, cluster = self.now, self.cluster
        self.times: list[float] = [now]
        self.free: list[list[int]] = [list(cluster.free)]
        self.jobs: list[list[int]] = [list(cluster.jobs_on)]
        for t, job in self._releases():
            if t > self.times[-1]:
                self.times.append(t)
                self.free.append(list(self.free[-1]))
                self.jobs.append(list(self.jobs[-1]))
            for node, g in job.alloc:
                self.free[-1][node] += g
                self.jobs[-1][node] -= 1

    def _releases(self) -> list[tuple[float, SimJob]]:
        """When each running job's GPUs count as free, in order. A job past its limit is
        planned as ending just after now (its GPUs are busy now). Without a window, at its own
        end; with one, in slurmctld's batches (`will_run_batches`)."""
        after = self.now + 1e-6
        if self.window_s <= 0:
            return [(max(after, end), job) for end, _seq, job in self._ends]
        jobs = [job for _end, _seq, job in self._ends]
        ends = [math.floor(end + self.origin_s) for end, _seq, _job in self._ends]
        out: list[tuple[float, SimJob]] = []
        for lo, hi in will_run_batches(ends, self.window_s):
            t = max(after, ends[hi - 1] - self.origin_s)
            out.extend((t, job) for job in jobs[lo:hi])
        return out

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
        its GPUs (and a CPU per node); a planned one holds its whole nodes. With a window, a
        job started now is one more running job in the batches: the map is built again."""
        if started and self.window_s > 0:
            self._build()
            for start, length, nodes in self._planned:
                self._hold(self._split_at(start), length, nodes, started=False)
            return
        if not started:
            self._planned.append((self.times[k], duration, alloc))
        self._hold(k, duration, alloc, started=started)

    def _hold(self, k: int, duration: float, alloc: Alloc, *, started: bool) -> None:
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


def will_run_batches(ends: list[int], window_s: float) -> list[tuple[int, int]]:
    """slurmctld's will-run test (select/cons_tres, used by backfill for a job that cannot
    start now) frees running jobs in batches, not one at a time: the first end rounded up to
    the next multiple of the window (on the epoch clock) is an anchor; a batch takes every job
    that ends within anchor + window, then the window doubles (until the next job falls
    inside it). A job planned there starts at the LAST end of the batch that made it fit, on
    the nodes free after the whole batch, so a node that frees up early inside a batch is no
    earlier than the others. `ends`: whole epoch seconds, ascending; returns [lo, hi) index
    ranges of the batches."""
    out: list[tuple[int, int]] = []
    n = len(ends)
    if n == 0:
        return out
    window = window_s
    anchor = ends[0] + (window - ends[0] % window)
    i = 0
    while i < n:
        lo = i
        i += 1
        while i < n and ends[i] <= anchor + window:
            i += 1
        out.append((lo, i))
        window *= 2
        while i < n and ends[i] > anchor + window:
            window *= 2
    return out


def schedule(now: float, queue: Iterable[SimJob], cluster: Cluster, ends: Ends,
             start: Callable[[SimJob, Alloc], None], *, max_test: int, window_s: float = 0.0,
             origin_s: float = 0.0) -> None:
    """Start what can start now; plan every other tested job so that no lower one delays it.

    `queue` yields pending jobs in priority order; `start` takes the GPUs and marks the job
    running. `window_s` > 0: running jobs free their GPUs in slurmctld's will-run batches
    (`will_run_batches`), with `origin_s` the epoch time of trace second 0."""
    if cluster.free_total == 0:
        return
    rest = iter(queue)
    top = main_pass(rest, cluster, start)
    if top is None:
        return
    profile = _BackfillMap(now, cluster, ends, window_s, origin_s)
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
