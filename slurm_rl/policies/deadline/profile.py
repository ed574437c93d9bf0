"""GPUs reserved over time, cluster-wide (the plan's): a piecewise-constant profile that
reservations are added to and that answers the earliest start with room for a job.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt


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
        build."""
        return cls.of_ends(capacity, now, base, Holds.of(holds))

    @classmethod
    def of_ends(cls, capacity: int, now: float, base: int, holds: Holds) -> ReservedGpus:
        """`of_holds` in one pass over arrays: the ends sorted, the GPUs still held after each
        distinct end a running sum (instead of one cut and one walk per hold)."""
        ends, gpus = holds.ends, holds.gpus
        if np.isnan(ends).any():  # as add() would take it, one at a time
            return cls._slowly(capacity, now, base, holds.pairs())
        live = ends > now  # add() skips ends at or before now (end <= start)
        ends, gpus = ends[live], gpus[live]
        held = base + int(gpus.sum())
        finite = ends < math.inf
        ends, gpus = ends[finite], gpus[finite]
        order = np.argsort(ends, kind="stable")
        ends, gpus = ends[order], gpus[order]
        after = held - np.cumsum(gpus)
        last = np.ones(len(ends), dtype=bool)  # the last hold of each distinct end
        last[:-1] = ends[1:] != ends[:-1]
        prof = cls(capacity, now)
        prof.used[0] = held
        prof.times.extend(ends[last].tolist())
        prof.used.extend(after[last].tolist())
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
        """Earliest start with `gpus` free for `dur` that ends by `deadline` (`now_only`: now
        or None)."""
        full_until = self._full_until.get(gpus)
        first = 0 if full_until is None else bisect.bisect_left(self.times, full_until)
        if now_only:
            return None if first else self._earliest_now(gpus, dur, deadline)
        return self._earliest_from(first, gpus, dur, deadline)

    def _earliest_from(self, first: int, gpus: int, dur: float, deadline: float) -> float | None:
        """The walk over the segments from `first`: a start at the first segment with room,
        dropped at a segment without; None once a start ends after the deadline; the start
        once the segment where `dur` has passed is reached. Done in jumps (the next segment
        with room, the next without, the window's end by bisection: its test only turns true
        once), with the walk's own comparisons."""
        times, cap = self.times, self.capacity - gpus
        n = len(times)
        seen_room = False
        i = first
        while True:
            s = self._next_with(i, n, cap.__ge__)  # room: used <= cap
            if s == n:
                if not seen_room:
                    self._full_until[gpus] = math.inf
                return None
            if not seen_room:
                seen_room = True
                self._full_until[gpus] = times[s]
            start = times[s]
            if start + dur > deadline:
                return None
            k = self._window_end(s, start, dur)
            stop = k + 1 if k < n else n
            full = self._next_with(s, stop, cap.__lt__)
            if full == stop:  # room all through
                return start if k < n else None
            i = full + 1

    def _next_with(self, i: int, stop: int, test: Callable[[int], bool]) -> int:
        """The first index in [i, stop) whose used GPUs pass `test` (stop: none)."""
        hits = itertools.compress(itertools.count(i),
                                  map(test, itertools.islice(self.used, i, stop)))
        return next(hits, stop)

    def _window_end(self, s: int, start: float, dur: float) -> int:
        """The first segment k >= s whose end - start >= dur (len(times): none)."""
        times = self.times
        n = len(times)
        k = s + bisect.bisect_left(range(s, n - 1), True,
                                   key=lambda j: times[j + 1] - start >= dur)
        if k == n - 1 and not math.inf - start >= dur:
            return n
        return k

    def _earliest_now(self, gpus: int, dur: float, deadline: float) -> float | None:
        """`earliest` at now, where no segment is known full: now if every segment until
        `dur` has passed has room. The walk's comparisons, the segment where `dur` has passed
        found by bisection (that test only turns true once)."""
        times, used, cap = self.times, self.used, self.capacity - gpus
        if used[0] > cap:
            return None
        self._full_until[gpus] = start = times[0]
        if start + dur > deadline:
            return None
        n = len(times)
        k = bisect.bisect_left(range(n - 1), True, key=lambda i: times[i + 1] - start >= dur)
        if k == n - 1 and not math.inf - start >= dur:
            return None
        return start if max(used[:k + 1]) <= cap else None


class Holds:
    """Running jobs' holds: each holds `gpus[i]` GPUs until `ends[i]` (inf: for ever)."""

    __slots__ = ("ends", "gpus")

    def __init__(self, ends: npt.NDArray[np.float64], gpus: npt.NDArray[np.int64]) -> None:
        self.ends, self.gpus = ends, gpus

    @classmethod
    def of(cls, holds: Sequence[tuple[float, int]]) -> Holds:
        return cls(np.fromiter((h[0] for h in holds), dtype=np.float64, count=len(holds)),
                   np.fromiter((h[1] for h in holds), dtype=np.int64, count=len(holds)))

    def pairs(self) -> list[tuple[float, int]]:
        return list(zip(self.ends.tolist(), self.gpus.tolist(), strict=True))


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
