"""Request-level planning for layer placement (pure numpy): where the rest of the current task
would best go, as a whole, given the queues as they are.

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
- `best_plan`: the rollout of the DP plan or HEFT's own, whichever finishes first (HEFT on a
  tie), so a task is never planned to finish later than HEFT would place it (estimated).

`Planner` keeps one task's plan across its layer decisions and re-plans when a layer went
elsewhere (a learned scheduler may deviate). `features.py` reads it for the plan-residual
Q-network, `schedulers.RequestPlan` follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_rl.inference.sim import InferenceSim


@dataclass(frozen=True, kw_only=True)
class Rollout:
    finish: float
    """The task's estimated finish (seconds, the simulator's clock)."""
    devices: tuple[int, ...]
    """Every layer's device, those placed already included."""


def dp_plan(sim: InferenceSim) -> tuple[int, ...]:
    """Every layer's device for the current task: the placed ones as they are, the rest from
    the dynamic programme (the earliest estimated finish of each layer on each device, each
    input reached from its best device). A layer with no device that has memory for it gets
    device 0 (the rollout falls back to HEFT there)."""
    task, n = sim.task, sim.cluster.n
    t, i = task.t, sim.layer
    layers = t.profile.layers
    inv, lat, src = sim.inv_bw, sim.lat, sim.cluster.source
    cols = np.arange(n)
    fin = np.full((len(layers), n), np.inf)
    for k in range(i):
        fin[k, task.devices[k]] = task.est_fin[k]
    back: list[list[np.ndarray | None]] = [[] for _ in layers]
    for k in range(i, len(layers)):
        ready = np.full(n, task.arrival)
        for j in layers[k].inputs:
            if j < 0:
                arr = task.arrival + t.profile.input_bytes * inv[src] + lat[src]
                back[k].append(None)
            else:
                move = fin[j][:, None] + t.out_bytes[j] * inv + lat  # (from, to)
                arg = move.argmin(axis=0)
                arr = move[arg, cols]
                back[k].append(arg)
            ready = np.maximum(ready, arr)
        f = np.maximum(ready, sim.est_free) + t.comp[k]
        fin[k] = np.where(sim.used + t.need[k] <= sim.memory, f, np.inf)
    plan = list(task.devices) + [-1] * (len(layers) - i)
    for k in range(len(layers) - 1, i - 1, -1):
        if plan[k] < 0:
            plan[k] = int(fin[k].argmin())
        for j, arg in zip(layers[k].inputs, back[k], strict=True):
            if arg is not None and j >= i and plan[j] < 0:
                plan[j] = int(arg[plan[k]])
    return tuple(plan)


def rollout(sim: InferenceSim, plan: Sequence[int] | None) -> Rollout | None:
    """The current task's remaining layers placed by `plan` (None: HEFT's device each time) on
    copies of the queues and memory, with the simulator's estimates; None when a layer would
    find no device with memory (the simulator would drop the task)."""
    task = sim.task
    t = task.t
    free, used = sim.est_free.copy(), sim.used.copy()
    fin, devs = list(task.est_fin), list(task.devices)
    for k in range(sim.layer, len(t.profile.layers)):
        f = np.maximum(sim.input_ready(k, fin, devs), free) + t.comp[k]
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
    return Rollout(finish=max(fin), devices=tuple(devs))


def best_plan(sim: InferenceSim) -> tuple[int, ...]:
    """Every layer's device for the current task: the DP plan's rollout or HEFT's, whichever
    finishes first by the estimates (HEFT's on a tie or when neither places the task)."""
    heft = rollout(sim, None)
    dp = rollout(sim, dp_plan(sim))
    if dp is not None and (heft is None or dp.finish < heft.finish):
        return dp.devices
    if heft is not None:
        return heft.devices
    return tuple(sim.task.devices) + (-1,) * (len(sim.task.t.profile.layers) - sim.layer)


class Planner:
    """The planned device of the simulator's current layer. A task is planned at its first
    layer (`best_plan`) and re-planned from the current layer whenever an earlier one was
    placed elsewhere than planned; where the planned device has no memory for the layer, HEFT's
    device stands in."""

    def __init__(self) -> None:
        self._task: object = None
        """The task the plan is for (compared by identity)."""
        self._plan: tuple[int, ...] = ()

    def device(self, sim: InferenceSim) -> int:
        task, i = sim.task, sim.layer
        if (task is not self._task or i == 0
                or tuple(task.devices) != self._plan[:i]):
            self._task, self._plan = task, best_plan(sim)
        opts = sim.options()
        d = self._plan[i]
        if 0 <= d < sim.cluster.n and opts.feasible[d]:
            return d
        return int(np.argmin(np.where(opts.feasible, opts.finish, np.inf)))
