"""The engine's event heap and timers: pushing events, arming and firing the policy tick and
the scheduler cycles, and where the next cycle falls (a fixed grid, or the explicit instants
measured on a real cluster). Mixed into `engine.Simulator` (as `apply.py`, `lifecycle.py`)."""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from typing import Protocol

from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.results import SimulationError


class _Engine(Protocol):
    """The part of `engine.Simulator` that the timers use."""

    now: float
    cfg: EngineConfig
    _heap: list[tuple[float, int, int, SimJob | None, int]]
    _seq: itertools.count[int]
    _armed: dict[int, float | None]

    def _push(self, at: float, kind: int, job: SimJob | None = None, version: int = 0) -> None: ...
    def _next_on_grid(self, phase: float, period: float) -> float: ...


class Timers:
    def _push(self: _Engine, at: float, kind: int, job: SimJob | None = None,
              version: int = 0) -> None:
        if not at >= self.now:  # also catches NaN
            raise SimulationError(f"event at {at} scheduled in the past (now {self.now})")
        heapq.heappush(self._heap, (at, kind, next(self._seq), job, version))

    def _arm(self: _Engine, kind: int, at: float) -> None:
        """Set timer `kind` (tick, main scheduler, backfill) to fire at `at`."""
        self._armed[kind] = at
        self._push(at, kind)

    def _fired(self: _Engine, t: float, kind: int) -> bool:
        """Pop the events of timer `kind` at time t; whether the armed one was among them."""
        heap, fired = self._heap, False
        while heap and heap[0][0] == t and heap[0][1] == kind:
            heapq.heappop(heap)
            if self._armed[kind] == t:
                self._armed[kind] = None
                fired = True
        return fired

    def _next_tick(self: _Engine) -> float:
        """The next policy tick after now: tick_s on, or the next point of the fixed grid."""
        tick, phase = self.cfg.tick_s, self.cfg.tick_phase_s
        if phase is None:
            return self.now + tick
        return self._next_on_grid(phase, tick)

    def _next_cycle(self: _Engine, times: tuple[float, ...], phase: float, period: float) -> float:
        """The next scheduler cycle after now: from the explicit instants while they last,
        then on the grid."""
        i = bisect_right(times, self.now)
        return times[i] if i < len(times) else self._next_on_grid(phase, period)

    def _next_on_grid(self: _Engine, phase: float, period: float) -> float:
        """The first point of phase + k x period strictly after now."""
        at = phase + (math.floor((self.now - phase) / period) + 1) * period
        return at if at > self.now else at + period
