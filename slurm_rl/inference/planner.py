"""Request-level planning for layer placement (pure numpy): where the rest of the current task
would best go, as a whole, given the queues as they are and, optionally, the requests that
will follow it.

HEFT places one layer at a time where that layer finishes first; it never sees that moving a
layer to a fast device also moves every later layer's input there and back. A plan looks at the
whole task instead:

- `dp_plan`: a dynamic programme over layer x device in the task's (topological) order, with
  the simulator's own estimates (a layer starts once its inputs are there and its device is
  free, `InferenceSim.options`). For a chain it gives the task's earliest estimated finish
  exactly (memory aside): its later layers on a device it already used start after the earlier
  ones anyway. In a DAG every input of a layer is reached from its own best device, so parallel
  branches may all be planned on one device, where they would queue.
- `rollout`: the task's estimated finish when its remaining layers follow a plan (each falling
  back to HEFT's device where the planned one has no memory left) or HEFT, with the queues and
  memory updated layer by layer as the simulator does; a DAG's branches queue here.
- `best_plan`: the rollout of the DP plan or HEFT's own, whichever is better: with
  `following=0` the one that finishes the task first (HEFT on a tie), so a task is never
  planned to finish later than HEFT would place it (estimated). Finishing one task first can
  cost the tasks behind it: the plan that takes the one fast device makes the next request
  wait for it. With `following=k` each candidate is also charged the latency of k requests
  like this one arriving after it, one mean gap apart, each planned the same way (without
  followers) on the queues the candidate leaves; the candidate with the least summed latency
  wins. The gap is the mean gap between the arrivals seen so far (no follower before a gap
  has been seen); the requests that really follow are not looked at.

`Planner` keeps one task's plan across its layer decisions and re-plans when a layer went
elsewhere (a learned scheduler may deviate). `features.py` reads it for the plan-residual
Q-network, `schedulers.RequestPlan` and `schedulers.StreamPlan` follow it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slurm_rl.inference.cluster import F64
from slurm_rl.inference.features import BASES
from slurm_rl.inference.sim import InferenceSim, ModelTables

FOLLOWING = 2
"""The requests after the current one that `stream-plan` charges a plan for: measured on a
development set of settings (docs/inference.md), 2 lowered the worst cell against 1 and cost
less time than 3, which was no better."""


@dataclass(frozen=True, kw_only=True)
class Request:
    """A task to plan and the queues it meets: the simulator's current task, or a follower
    that a plan is charged for."""

    t: ModelTables
    arrival: float
    est_fin: tuple[float, ...]
    """The estimated finish of each layer placed already."""
    devices: tuple[int, ...]
    """The device of each layer placed already."""
    free: F64
    """When each device is estimated to be free (none before the arrival)."""
    used: F64
    """The memory in use on each device."""

    @staticmethod
    def current(sim: InferenceSim) -> Request:
        task = sim.task
        return Request(t=task.t, arrival=task.arrival, est_fin=tuple(task.est_fin),
                       devices=tuple(task.devices), free=sim.est_free, used=sim.used)


@dataclass(frozen=True, kw_only=True)
class Rollout:
    finish: float
    """The task's estimated finish (seconds, the simulator's clock)."""
    devices: tuple[int, ...]
    """Every layer's device, those placed already included."""
    finishes: tuple[float, ...]
    """Every layer's estimated finish, in the same order."""
    free: F64
    """When each device is estimated to be free after the task."""
    used: F64


def dp_plan(sim: InferenceSim, req: Request | None = None) -> tuple[int, ...]:
    """Every layer's device for `req` (the current task by default): the placed ones as they
    are, the rest from the dynamic programme (the earliest estimated finish of each layer on
    each device, each input reached from its best device). A layer with no device that has
    memory for it gets device 0 (the rollout falls back to HEFT there)."""
    r = req or Request.current(sim)
    t, n, i = r.t, sim.cluster.n, len(r.devices)
    layers = t.profile.layers
    inv, lat, src = sim.inv_bw, sim.lat, sim.cluster.source
    cols = np.arange(n)
    fin = np.full((len(layers), n), np.inf)
    for k in range(i):
        fin[k, r.devices[k]] = r.est_fin[k]
    back: list[list[np.ndarray | None]] = [[] for _ in layers]
    for k in range(i, len(layers)):
        ready: np.ndarray | None = None  # no input is there before the arrival (sim.py)
        for j in layers[k].inputs:
            if j < 0:
                arr = r.arrival + t.profile.input_bytes * inv[src] + lat[src]
                back[k].append(None)
            else:
                move = fin[j][:, None] + t.out_bytes[j] * inv + lat  # (from, to)
                arg = move.argmin(axis=0)
                arr = move[arg, cols]
                back[k].append(arg)
            ready = arr if ready is None else np.maximum(ready, arr)
        if ready is None:
            ready = np.full(n, r.arrival)
        f = np.maximum(ready, r.free) + t.comp[k]
        fin[k] = np.where(r.used + t.need[k] <= sim.memory, f, np.inf)
    plan = list(r.devices) + [-1] * (len(layers) - i)
    for k in range(len(layers) - 1, i - 1, -1):
        if plan[k] < 0:
            plan[k] = int(fin[k].argmin())
        for j, arg in zip(layers[k].inputs, back[k], strict=True):
            if arg is not None and j >= i and plan[j] < 0:
                plan[j] = int(arg[plan[k]])
    return tuple(plan)


def rollout(sim: InferenceSim, plan: tuple[int, ...] | None,
            req: Request | None = None) -> Rollout | None:
    """`req`'s (the current task's) remaining layers placed by `plan` (None: HEFT's device each
    time) on copies of the queues and memory, with the simulator's estimates; None when a layer
    would find no device with memory (the simulator would drop the task)."""
    r = req or Request.current(sim)
    t = r.t
    free, used = r.free.copy(), r.used.copy()
    fin, devs = list(r.est_fin), list(r.devices)
    for k in range(len(devs), len(t.profile.layers)):
        ready = sim.input_ready(k, fin, devs, t=t, arrival=r.arrival)
        f = np.maximum(ready, free) + t.comp[k]
        ok = used + t.need[k] <= sim.memory
        if not ok.any():
            return None
        d = plan[k] if plan is not None else -1
        if d < 0 or not ok[d]:
            d = int(np.argmin(np.where(ok, f, np.inf)))
        free[d] = f[d]
        used[d] += t.need[k]
        fin.append(float(f[d]))
        devs.append(d)
    return Rollout(finish=max(fin), devices=tuple(devs), finishes=tuple(fin), free=free,
                   used=used)


def _candidates(sim: InferenceSim, req: Request) -> list[Rollout]:
    """HEFT's rollout, then the DP plan's where it differs (those that place the task)."""
    heft = rollout(sim, None, req)
    dp = rollout(sim, dp_plan(sim, req), req)
    out = [x for x in (heft, dp) if x is not None]
    if len(out) == 2 and out[0].devices == out[1].devices:
        out.pop()
    return out


def _first(cands: list[Rollout]) -> Rollout:
    """The candidate that finishes first (the earlier one, HEFT, on a tie)."""
    return min(cands, key=lambda x: x.finish)


def request_rollout(sim: InferenceSim) -> Rollout | None:
    """The current task's rollout by the request plan (`best_plan` without followers); None
    when neither candidate places it."""
    cands = _candidates(sim, Request.current(sim))
    return _first(cands) if cands else None


def best_plan(sim: InferenceSim, following: int = 0, gap: float = 0.0) -> tuple[int, ...]:
    """Every layer's device for the current task: the DP plan's rollout or HEFT's, whichever
    finishes first by the estimates (HEFT's on a tie or when neither places the task); with
    `following` > 0 and a `gap` > 0, whichever leaves the least latency summed over the task
    and `following` requests like it arriving `gap` seconds apart after it (module doc)."""
    req = Request.current(sim)
    cands = _candidates(sim, req)
    if not cands:
        return req.devices + (-1,) * (len(req.t.profile.layers) - len(req.devices))
    if len(cands) == 1 or following <= 0 or gap <= 0:
        return _first(cands).devices
    best, cost = cands[0], np.inf
    for c in cands:
        total = c.finish - req.arrival
        free, at = c.free, req.arrival
        for _ in range(following):
            at += gap
            nxt = Request(t=req.t, arrival=at, est_fin=(), devices=(),
                          free=np.maximum(free, at), used=np.zeros_like(req.used))
            placed = _candidates(sim, nxt)
            if not placed:
                break
            f = _first(placed)
            total += f.finish - at
            free = f.free
        if total < cost:
            best, cost = c, total
    return best.devices


def for_base(base: str) -> Planner | None:
    """The planner whose device a residual network corrects (features.BASES): None for
    "heft", the request plan for "plan", the stream plan for "stream"."""
    if base == "heft":
        return None
    if base == "plan":
        return Planner()
    if base == "stream":
        return Planner(FOLLOWING)
    raise ValueError(f"base: {base!r}, not one of {', '.join(BASES)}")


class Planner:
    """The planned device of the simulator's current layer. A task is planned at its first
    layer (`best_plan`, charged for `following` requests after it) and re-planned from the
    current layer whenever an earlier one was placed elsewhere than planned; where the planned
    device has no memory for the layer, HEFT's device stands in. A new simulator (episode)
    starts the arrival count again."""

    def __init__(self, following: int = 0) -> None:
        if following < 0:
            raise ValueError(f"following: {following}, not >= 0")
        self.following = following
        self._sim: object = None
        self._first = (0, 0.0)
        """The first task seen of this simulator's stream: its index and arrival."""
        self._task: object = None
        """The task the plan is for (compared by identity)."""
        self._plan: tuple[int, ...] = ()

    def gap(self, sim: InferenceSim) -> float:
        """The mean gap between the arrivals seen so far (0 before a second one)."""
        if sim is not self._sim:
            self._sim, self._first = sim, (sim.task.idx, sim.task.arrival)
        k, first = self._first
        seen = sim.task.idx - k
        return (sim.task.arrival - first) / seen if seen > 0 else 0.0

    def device(self, sim: InferenceSim) -> int:
        task, i = sim.task, sim.layer
        gap = self.gap(sim)
        if (task is not self._task or i == 0
                or tuple(task.devices) != self._plan[:i]):
            self._task, self._plan = task, best_plan(sim, self.following, gap)
        opts = sim.options()
        d = self._plan[i]
        if 0 <= d < sim.cluster.n and opts.feasible[d]:
            return d
        return int(np.argmin(np.where(opts.feasible, opts.finish, np.inf)))
