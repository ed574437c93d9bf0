"""Placement schedulers (pure): the heuristics (HEFT, lookahead, the request and stream plans,
whole model), the DP lower bound, and the episode runner.

A `Scheduler` answers `choose(sim)` with a device for the simulator's current layer; it must
pick a feasible one (`sim.options().feasible`). DRM-DQL and vanilla DQL are `QScheduler`s (dqn.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from slurm_rl.inference.cluster import Cluster
from slurm_rl.inference.planner import FOLLOWING, Planner
from slurm_rl.inference.profile import Profile
from slurm_rl.inference.sim import InferenceSim, TaskRecord, tables


class Scheduler(Protocol):
    name: str

    def choose(self, sim: InferenceSim) -> int: ...


class EarliestFinish:
    """HEFT-like greedy: each layer goes where it would finish first (queue, transfer of its
    inputs and compute included; what later layers will cost is not looked at)."""

    name = "heft"

    def choose(self, sim: InferenceSim) -> int:
        opts = sim.options()
        finish, feasible = opts.finish, opts.feasible
        return int(np.argmin(np.where(feasible, finish, np.inf)))


class Lookahead:
    """Earliest finish of the whole rest of the model: each layer goes where it would finish
    first plus the estimated time of the model's remaining layers on that same device (a
    one-step lookahead on HEFT; queues after this layer are not looked at)."""

    name = "lookahead"

    def choose(self, sim: InferenceSim) -> int:
        opts = sim.options()
        finish, feasible = opts.finish, opts.feasible
        rest = sim.task.t.suffix[sim.layer]
        return int(np.argmin(np.where(feasible, finish + rest, np.inf)))


class RequestPlan:
    """The whole task planned at its arrival (planner.py): the queue-aware DP plan over its
    layers or HEFT's placement, whichever is estimated to finish the task first; each layer
    then goes where the plan says (HEFT's device where that one has no memory left)."""

    name = "request-plan"

    def __init__(self) -> None:
        self.planner = Planner()

    def choose(self, sim: InferenceSim) -> int:
        return self.planner.device(sim)


class StreamPlan(RequestPlan):
    """The request plan charged for the requests behind it (planner.py): of HEFT's placement
    and the DP plan, the one that leaves the least latency summed over the task and
    `planner.FOLLOWING` requests like it, arriving one mean observed gap apart after it; so a
    task does not take the one fast device when the requests behind it would pay more for
    that than it gains."""

    name = "stream-plan"

    def __init__(self, following: int = FOLLOWING) -> None:
        self.planner = Planner(following)


class WholeModel:
    """The whole model on one device: the fastest idle one with memory for it, else the one
    where it would finish first; exclusive-GPU serving as clusters do it today."""

    name = "whole"

    def __init__(self) -> None:
        self._device = -1

    def choose(self, sim: InferenceSim) -> int:
        opts = sim.options()
        finish, feasible = opts.finish, opts.feasible
        t = sim.task.t
        if sim.layer == 0:
            fits = sim.used + t.need.sum() <= sim.memory
            if not fits.any():
                fits = feasible
            idle = fits & (sim.est_free <= sim.task.arrival)
            if idle.any():
                fl = np.array([d.flops_per_s for d in sim.cluster.devices])
                self._device = int(np.argmax(np.where(idle, fl, -1.0)))
            else:
                whole = sim.est_free + t.comp.sum(axis=0)
                self._device = int(np.argmin(np.where(fits, whole, np.inf)))
        if feasible[self._device]:
            return self._device
        return int(np.argmin(np.where(feasible, finish, np.inf)))


HEURISTICS: dict[str, type[Scheduler]] = {
    s.name: s for s in (EarliestFinish, Lookahead, RequestPlan, StreamPlan, WholeModel)}
"""The heuristic schedulers by name, each built fresh per episode (`HEURISTICS[name]()`)."""


class RandomFeasible:
    """A uniformly random feasible device (a test and exploration aid)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose(self, sim: InferenceSim) -> int:
        return int(self.rng.choice(np.flatnonzero(sim.options().feasible)))


def run_episode(sim: InferenceSim, scheduler: Scheduler) -> list[TaskRecord]:
    while not sim.done:
        if not sim.options().feasible.any():
            sim.drop()
            continue
        sim.place(scheduler.choose(sim))
    return sim.records


@dataclass(frozen=True, kw_only=True)
class Metrics:
    mean_s: float
    p95_s: float
    throughput: float
    """Tasks per second: completed tasks / (last finish - first arrival)."""
    slowdown: float
    """Mean latency / reference time (the model alone on its best device)."""
    dropped: int


def metrics(records: list[TaskRecord], dropped: int = 0) -> Metrics:
    lat = np.array([r.latency for r in records])
    span = max(r.finish for r in records) - min(r.arrival for r in records)
    return Metrics(mean_s=float(lat.mean()), p95_s=float(np.percentile(lat, 95)),
                   throughput=len(records) / span if span > 0 else float("inf"),
                   slowdown=float(np.mean([r.latency / r.ref_s for r in records])),
                   dropped=dropped)


def dp_chain(profile: Profile, cluster: Cluster) -> tuple[float, tuple[int, ...]]:
    """The optimal latency of one chain model alone on the cluster (no contention, estimated
    times, memory ignored: a lower bound), by dynamic programming over layer x device."""
    if not profile.is_chain:
        raise ValueError(f"{profile.model}: not a chain (the DP bound needs one)")
    t = tables(profile, cluster)
    inv, lat = 1.0 / cluster.bandwidth, cluster.latency()
    cost = profile.input_bytes * inv[cluster.source] + lat[cluster.source] + t.comp[0]
    back = []
    for i in range(1, len(profile.layers)):
        move = cost[:, None] + t.out_bytes[i - 1] * inv + lat  # (from, to)
        arg = move.argmin(axis=0)
        back.append(arg)
        cost = move[arg, np.arange(cluster.n)] + t.comp[i]
    d = int(cost.argmin())
    best = float(cost[d])
    path = [d]
    for arg in reversed(back):
        d = int(arg[d])
        path.append(d)
    return best, tuple(reversed(path))
