"""GPUs reserved over time, cluster-wide (elasticflow's plan): a piecewise-constant profile that
reservations are added to and that answers the earliest start with room for a job.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence


class ReservedGpus:
    """GPUs reserved over time, piecewise constant: used[i] GPUs from times[i] to times[i+1]."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity, self.now = capacity, now
        self.times: list[float] = [now]
        self.used: list[int] = [0]
        self._full_until: dict[int, float] = {}
        """Per GPU count g: every segment starting before this time has no room for g. Exact
        because reservations only ever add GPUs (a full segment stays full, also when cut)."""

    @classmethod
    def of_holds(cls, capacity: int, now: float, base: int,
                 holds: Sequence[tuple[float, int]]) -> ReservedGpus:
        """The profile that add(now, inf, base) then add(now, end, gpus) for each hold would
        build, in one pass (sorted ends instead of one cut and one walk per hold)."""
        ending: list[tuple[float, int]] = []
        held = base
        for hold in holds:
            end = hold[0]
            if end > now:
                held += hold[1]
                if end < math.inf:
                    ending.append(hold)
            elif end != end:  # NaN: as add() would take it, one at a time
                return cls._slowly(capacity, now, base, holds)
        ending.sort()
        prof = cls(capacity, now)
        times, used = prof.times, prof.used
        used[0] = held
        last = now
        for end, gpus in ending:  # add() skips ends at or before now (end <= start)
            held -= gpus
            if end == last:
                used[-1] = held
            else:
                times.append(end)
                used.append(held)
                last = end
        return prof

    @classmethod
    def _slowly(cls, capacity: int, now: float, base: int,
                holds: Sequence[tuple[float, int]]) -> ReservedGpus:
        prof = cls(capacity, now)
        prof.add(now, math.inf, base)
        for end, gpus in holds:
            prof.add(now, end, gpus)
        return prof

    def _cut(self, t: float) -> int:
        i = bisect.bisect_left(self.times, t)
        if i == len(self.times) or self.times[i] != t:
            self.times.insert(i, t)
            self.used.insert(i, self.used[i - 1])
        return i

    def add(self, start: float, end: float, gpus: int) -> None:
        start, end = max(start, self.now), max(end, self.now)
        if end <= start:
            return
        i = self._cut(start)
        j = self._cut(end) if end < math.inf else len(self.times)
        used = self.used
        used[i:j] = [u + gpus for u in used[i:j]]

    def earliest(self, gpus: int, dur: float, deadline: float, now_only: bool) -> float | None:
        """Earliest start with `gpus` free for `dur` that ends by `deadline`."""
        times, used, cap = self.times, self.used, self.capacity - gpus
        n = len(times)
        full_until = self._full_until.get(gpus)
        first = 0 if full_until is None else bisect.bisect_left(times, full_until)
        if first and now_only:
            return None
        start: float | None = None
        seen_room = False
        for i in range(first, n):
            if used[i] > cap:
                if now_only:
                    return None
                start = None
                continue
            if not seen_room:
                seen_room = True
                self._full_until[gpus] = times[i]
            start = times[i] if start is None else start
            if start + dur > deadline:
                return None
            if (times[i + 1] if i + 1 < n else math.inf) - start >= dur:
                return start
        if not seen_room:
            self._full_until[gpus] = math.inf
        return None


class LazyProfile:
    """A `ReservedGpus` of running holds, built only once a job does not fit at now.

    Until then every reservation starts at now, and `held()` (at least the GPUs the built
    profile would hold at now, worked out without the holds' ends) bounds what is reserved at
    now: while a job fits under that bound, the profile has room for it from now on (running
    holds only end), so `earliest` is now, or None past the deadline, as the built profile
    would answer. Once built, the reservations made so far are added to it in order, as if it
    had been built first."""

    def __init__(self, capacity: int, now: float, held: Callable[[], int],
                 build: Callable[[], ReservedGpus]) -> None:
        self.capacity, self.now = capacity, now
        self._held_bound, self._build = held, build
        self._held: int | None = None
        self._made: list[tuple[float, float, int]] = []
        self.built: ReservedGpus | None = None

    def _fits_now(self, gpus: int) -> bool:
        if self.built is not None:
            return False
        if self._held is None:
            self._held = self._held_bound()
        return self._held + gpus <= self.capacity

    def earliest(self, gpus: int, dur: float, deadline: float, now_only: bool) -> float | None:
        if self._fits_now(gpus):
            return self.now if not self.now + dur > deadline else None
        if self.built is None:
            self.built = self._build()
            for r in self._made:
                self.built.add(*r)
        return self.built.earliest(gpus, dur, deadline, now_only)

    def add(self, start: float, end: float, gpus: int) -> None:
        if self.built is not None:
            self.built.add(start, end, gpus)
            return
        assert start <= self.now, "unbuilt: reservations start at now"
        if self._held is None:
            self._held = self._held_bound()
        self._held += gpus
        self._made.append((start, end, gpus))
