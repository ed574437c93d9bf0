"""When a pending job could start, as the `deadline` policy plans it: now if its GPUs fit on the
nodes now, else when enough running jobs are expected to end."""

from __future__ import annotations

import bisect
import itertools
import operator

from slurm_rl.core import ClusterSnapshot
from slurm_rl.policies.capacity import Capacity
from slurm_rl.policies.estimates import estimate_remaining


class Starts:
    """When a pending job could start at g GPUs: now if they fit on the nodes now, else when
    enough running jobs are expected to end (their estimates; GPUs counted cluster-wide). When
    running jobs of unknown duration hold the GPUs it cannot tell, and says now (optimistic).

    The running jobs' ends are worked out at the first job that does not fit now; answers are
    kept per (layout, GPUs)."""

    def __init__(self, snapshot: ClusterSnapshot, cap: Capacity) -> None:
        self.now, self.cap, self.free = snapshot.time, cap, cap.total_free
        self._snapshot = snapshot
        self._times: list[float] | None = None
        self._freed: list[int] = []
        self._known: dict[tuple[tuple[int, ...], int], float] = {}

    def at(self, shape: tuple[tuple[int, ...], int]) -> float:
        t = self._known.get(shape)
        if t is None:
            t = self._known[shape] = self._at(*shape)
        return t

    def _at(self, parts: tuple[int, ...], gpus: int) -> float:
        if self.cap.fits(parts):
            return self.now
        times = self._times
        if times is None:
            times = self._ends()
        i = bisect.bisect_left(self._freed, gpus - self.free)
        return max(self.now, times[i]) if i < len(times) else self.now

    def _ends(self) -> list[float]:
        now, snapshot = self.now, self._snapshot
        # The policy's hottest loop: estimate_remaining's first case (a prediction,
        # max(0.0, predicted)) for all running jobs at once (the simulator's snapshots work
        # them out without building views), the other cases one by one.
        seconds: list[float | None] = list(snapshot.running_predicted)
        if None in seconds:
            running = snapshot.running
            for i, j in enumerate(running):
                if seconds[i] is None:
                    est = estimate_remaining(j, now)
                    seconds[i] = None if est is None else est.seconds
            gpus = [j.gpus for j, s in zip(running, seconds, strict=True) if s is not None]
            known = [s for s in seconds if s is not None]
        else:
            gpus, known = list(snapshot.running_gpus), seconds  # type: ignore[assignment]
        ends = list(map(operator.add, itertools.repeat(now),
                        map(max, itertools.repeat(0.0), known)))  # now + max(0.0, s)
        # By end alone: the GPUs of jobs that end at the same time are freed together, so
        # `_at` finds the same time whatever their order (cheaper than sorting pairs).
        if len(ends) > 1:
            by_end = operator.itemgetter(*sorted(range(len(ends)), key=ends.__getitem__))
            ends, gpus = list(by_end(ends)), list(by_end(gpus))
        self._times = ends
        self._freed = list(itertools.accumulate(gpus))
        return ends
