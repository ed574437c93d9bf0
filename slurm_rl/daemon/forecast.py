"""A start/finish forecast for `slurm-rl status`: pending jobs placed in the daemon's order on the
cluster's GPUs, each at the earliest time its GPUs are free for its whole run without moving a
job ranked above it (conservative backfill, as slurmctld's backfill plans), with every job
assumed to run its time limit (as Slurm plans, too) unless its reported progress says it ends
sooner. Pure: jobs in, times out.

It is a plan, not a promise: GPUs are one pool (a job that needs a whole node may wait longer),
and jobs outside the daemon's view, reservations and limits are not known. A job with no time
limit holds its GPUs for ever in the plan, so jobs that need them get no forecast (None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Running:
    job_id: str
    gpus: int
    end: float | None
    """Expected end (None: unknown, holds its GPUs for ever)."""


@dataclass(frozen=True, kw_only=True)
class Waiting:
    job_id: str
    gpus: int
    duration_s: float | None
    """Expected run time (None: unknown)."""


@dataclass(frozen=True, kw_only=True)
class Forecast:
    start: float | None
    finish: float | None


class _Profile:
    """Free GPUs over time: free[i] on [times[i], times[i+1]), the last segment unbounded."""

    def __init__(self, now: float, capacity: int) -> None:
        self.times = [now]
        self.free = [capacity]

    def _split(self, t: float) -> int:
        """Index of the segment starting at t (made if needed); t >= times[0]."""
        lo = 0
        while lo + 1 < len(self.times) and self.times[lo + 1] <= t:
            lo += 1
        if self.times[lo] == t:
            return lo
        self.times.insert(lo + 1, t)
        self.free.insert(lo + 1, self.free[lo])
        return lo + 1

    def reserve(self, start: float, end: float, gpus: int) -> None:
        i = self._split(start)
        j = self._split(end) if math.isfinite(end) else len(self.times)
        for k in range(i, j):
            self.free[k] -= gpus

    def earliest(self, gpus: int, duration: float) -> float | None:
        """The earliest segment start from which `gpus` stay free for `duration`."""
        n = len(self.times)
        for i in range(n):
            end = self.times[i] + duration
            k = i
            while k < n and self.times[k] < end:
                if self.free[k] < gpus:
                    break
                k += 1
            else:
                return self.times[i]
        return None


def forecast(now: float, capacity: int, running: Sequence[Running],
             waiting: Sequence[Waiting]) -> dict[str, Forecast]:
    """Running jobs' finishes and waiting jobs' starts and finishes, `waiting` in rank order."""
    profile = _Profile(now, capacity)
    out: dict[str, Forecast] = {}
    for r in running:
        end = math.inf if r.end is None else max(r.end, now)
        if end > now:
            profile.reserve(now, end, r.gpus)
        out[r.job_id] = Forecast(start=None, finish=None if r.end is None else end)
    for w in waiting:
        duration = math.inf if w.duration_s is None else max(w.duration_s, 0.0)
        start = profile.earliest(w.gpus, duration) if 0 < w.gpus <= capacity else None
        if start is None:
            out[w.job_id] = Forecast(start=None, finish=None)
            continue
        finish = start + duration
        profile.reserve(start, finish, w.gpus)
        out[w.job_id] = Forecast(start=start, finish=finish if math.isfinite(finish) else None)
    return out
