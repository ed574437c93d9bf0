"""The engine's event heap and its timers, an object the engine owns (`Simulator._events`).

Events are (time, kind, seq, job, version): at one time, lower kinds first (completions, then
decisions landing, then the policy tick, the main scheduler and backfill), and the counter
breaks the remaining ties in the order events were made, as SimPy's heap does. A timer (tick,
main scheduler, backfill) is armed for one time; an event of its kind at another time is stale
and ignored. Where the next cycle falls: a fixed grid, or the explicit instants measured on a
real cluster. The clock is the engine's: each call that needs it is given `now`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right

from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.results import SimulationError

FINISH, APPLY, TICK, MAIN, BF = 0, 1, 2, 3, 4
"""Event kinds, in the order they are handled at one time."""

Event = tuple[float, int, int, SimJob | None, int]
"""(time, kind, seq, job, version): a completion carries its job and the run's version (a
requeued run's completion is void), a decision landing its seq."""


class Events:
    """The heap, the sequence counter and the armed timers."""

    __slots__ = ("_armed", "_seq", "heap")

    def __init__(self) -> None:
        self.heap: list[Event] = []
        self._seq = itertools.count()
        self._armed: dict[int, float | None] = {TICK: None, MAIN: None, BF: None}

    def push(self, now: float, at: float, kind: int, job: SimJob | None = None,
             version: int = 0) -> None:
        """An event at `at` (never before `now`: a SimulationError)."""
        if not at >= now:  # also catches NaN
            raise SimulationError(f"event at {at} scheduled in the past (now {now})")
        heapq.heappush(self.heap, (at, kind, next(self._seq), job, version))

    def push_apply(self, at: float) -> int:
        """A decision landing at `at`; its seq, by which the engine keeps the decision."""
        seq = next(self._seq)
        heapq.heappush(self.heap, (at, APPLY, seq, None, 0))
        return seq

    def armed(self, kind: int) -> bool:
        return self._armed[kind] is not None

    def arm(self, now: float, kind: int, at: float) -> None:
        """Set timer `kind` (tick, main scheduler, backfill) to fire at `at`."""
        self._armed[kind] = at
        self.push(now, at, kind)

    def fired(self, t: float, kind: int) -> bool:
        """Pop the events of timer `kind` at time t; whether the armed one was among them."""
        heap, fired = self.heap, False
        while heap and heap[0][0] == t and heap[0][1] == kind:
            heapq.heappop(heap)
            if self._armed[kind] == t:
                self._armed[kind] = None
                fired = True
        return fired


def next_tick(now: float, tick: float, phase: float | None, times: tuple[float, ...] = ()
              ) -> float:
    """The next policy tick after now: the next of the explicit instants while they last,
    then `tick` on, or the next point of the fixed grid."""
    if times and (at := _next_of(times, now)) is not None:
        return at
    return now + tick if phase is None else next_on_grid(now, phase, tick)


def next_cycle(now: float, times: tuple[float, ...], phase: float, period: float) -> float:
    """The next scheduler cycle after now: from the explicit instants while they last, then on
    the grid."""
    at = _next_of(times, now)
    return at if at is not None else next_on_grid(now, phase, period)


def _next_of(times: tuple[float, ...], now: float) -> float | None:
    """The first of the ascending explicit instants after now (None: they are over)."""
    i = bisect_right(times, now)
    return times[i] if i < len(times) else None


def next_on_grid(now: float, phase: float, period: float) -> float:
    """The first point of phase + k x period strictly after now."""
    at = phase + (math.floor((now - phase) / period) + 1) * period
    return at if at > now else at + period
