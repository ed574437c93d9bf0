"""The inference-task simulator (pure Python + numpy): a Poisson stream of DNN inference tasks
placed layer by layer on a cluster of devices.

A task arrives at its arrival time; its layers are placed one decision at a time, in the
profile's (topological) order, all at that arrival time (the scheduler sees the cluster as it
is then). A device runs one layer at a time, in the order layers were placed on it; a layer
starts once its device is free and every input has arrived (time = queueing + compute +
transfer; a transfer between two devices takes the link latency plus bytes / bandwidth). The
scheduler sees *estimates* (the roofline, cluster.py); the layers run with
*actual* times, the estimates times a log-normal factor (mean 1, `noise`), so a task's latency
is known only once its last layer has finished. A layer may go only to a device with memory
for it: weights and output of the layers placed there by every unfinished task.

Delayed-reward matching (`TaskRecord.shares`): once a task finishes, each of its layer
decisions gets the time by which that layer's actual finish pushed out the task's finish
frontier (the latest finish so far, starting at the arrival); the shares sum to the latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from slurm_rl.inference.cluster import F64, Cluster
from slurm_rl.inference.profile import Profile


class PlacementError(ValueError):
    """A scheduler chose a device that cannot take the layer."""


class Options(NamedTuple):
    """The current layer on each device (arrays indexed by device): its estimated times and
    whether the device has the memory for it."""

    ready: F64
    """When its inputs would have arrived there."""
    start: F64
    """When it could start there (ready and the device free)."""
    finish: F64
    """When it would finish there."""
    feasible: np.ndarray
    """True where the device has the memory for it."""


@dataclass(frozen=True, kw_only=True)
class StreamConfig:
    tasks: int = 20
    """Tasks per episode."""
    load: float = 0.5
    """Arrival rate as a share of the cluster's whole-model capacity (sum over devices of
    1 / mean model time there)."""
    noise: float = 0.1
    """Sigma of the log-normal factor between estimated and actual compute/transfer times."""
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class ModelTables:
    """What the simulator precomputes per (profile, cluster)."""

    profile: Profile
    comp: F64
    """(layers, devices) estimated seconds."""
    suffix: F64
    """(layers, devices): estimated seconds of the layers after this one on each device."""
    need: F64
    """(layers,) bytes a layer holds on its device: weights + output."""
    out_bytes: F64
    ref_s: float
    """The model alone on its best device, no transfers: the latency scale."""


def tables(profile: Profile, cluster: Cluster) -> ModelTables:
    comp = cluster.compute_times(profile)
    rev = np.cumsum(comp[::-1], axis=0)[::-1]
    suffix = np.vstack([rev[1:], np.zeros((1, cluster.n))])
    need = np.array([lay.param_bytes + lay.out_bytes for lay in profile.layers])
    out = np.array([lay.out_bytes for lay in profile.layers])
    return ModelTables(profile=profile, comp=comp, suffix=suffix, need=need, out_bytes=out,
                       ref_s=float(comp.sum(axis=0).min()))


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    task: int
    model: str
    arrival: float
    finish: float
    ref_s: float
    devices: tuple[int, ...]
    steps: tuple[int, ...]
    """The global decision index of each layer's placement."""
    finishes: tuple[float, ...]
    """Actual finish time of each layer."""
    shares: tuple[float, ...]
    """Matched share of the latency per layer decision (seconds; sums to the latency)."""

    @property
    def latency(self) -> float:
        return self.finish - self.arrival


@dataclass
class _Task:
    idx: int
    t: ModelTables
    arrival: float
    est_fin: list[float] = field(default_factory=list)
    act_fin: list[float] = field(default_factory=list)
    devices: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    held: F64 | None = None
    noise: F64 | None = None
    """(layers, 3): actual/estimated factors for compute and for up to two input transfers."""


class InferenceSim:
    """Stepped: `options()` for the current layer, `place(device)`; `done` when all tasks ran."""

    def __init__(self, cluster: Cluster, profiles: Sequence[Profile], cfg: StreamConfig,
                 mix: Sequence[float] | None = None) -> None:
        self.cluster, self.cfg = cluster, cfg
        self.models = [tables(p, cluster) for p in profiles]
        # The stream (arrivals, models) and each task's noise come from their own generators,
        # so every scheduler sees the same tasks with the same actual/estimated factors.
        self.rng = np.random.default_rng([cfg.seed, 0])
        _, _, self.memory, _ = cluster.arrays()
        self.inv_bw: F64 = 1.0 / cluster.bandwidth  # 0 on the diagonal
        self.lat: F64 = cluster.latency()  # 0 on the diagonal
        mean_time = np.mean([m.comp.sum(axis=0) for m in self.models], axis=0)
        self.rate = cfg.load * float(np.sum(1.0 / mean_time))
        p = np.asarray(mix if mix is not None else [1.0] * len(self.models), dtype=float)
        self.mix = p / p.sum()
        n = cluster.n
        self.est_free = np.zeros(n)
        self.act_free = np.zeros(n)
        self.used = np.zeros(n)
        self.now = 0.0
        self.step_count = 0
        self.inflight: list[tuple[float, F64]] = []
        self.pending: list[_Task] = []
        self.records: list[TaskRecord] = []
        self.done = False
        self.dropped = 0
        self._next = 0
        self.task: _Task = self._arrive()
        self._opts: Options | None = None
        self._consts: tuple[F64, F64] | None = None

    # -- the stream ------------------------------------------------------------------------

    def _arrive(self) -> _Task:
        if self._next > 0:
            self.now += float(self.rng.exponential(1.0 / self.rate))
        m = self.models[int(self.rng.choice(len(self.models), p=self.mix))]
        s = self.cfg.noise
        noise = (np.random.default_rng([self.cfg.seed, 1, self._next]).lognormal(
            -s * s / 2, s, (len(m.profile.layers), 3)) if s > 0
            else np.ones((len(m.profile.layers), 3)))
        task = _Task(idx=self._next, t=m, arrival=self.now, held=np.zeros(self.cluster.n),
                     noise=noise)
        self._next += 1
        keep = []
        for fin, held in self.inflight:
            if fin <= self.now:
                self.used -= held
            else:
                keep.append((fin, held))
        self.inflight = keep
        # an idle device is seen as idle; a busy one until its estimated free time
        self.est_free = np.where(self.act_free <= self.now, self.now,
                                 np.maximum(self.est_free, self.now))
        return task

    def device_constants(self) -> tuple[F64, F64]:
        """Mean seconds per byte out of each device, and log10 of its FLOP rate over the
        fastest's (features.py)."""
        if self._consts is None:
            n = self.cluster.n
            fl = self.cluster.arrays()[0]
            self._consts = (self.inv_bw.sum(axis=1) / max(n - 1, 1), np.log10(fl / fl.max()))
        return self._consts

    @property
    def layer(self) -> int:
        return len(self.task.devices)

    def options(self) -> Options:
        """For the current layer on each device: its estimated times and the feasibility mask
        (memory)."""
        if self._opts is not None:
            return self._opts
        task, i = self.task, self.layer
        ready = self.input_ready(i, task.est_fin, task.devices)
        start = np.maximum(ready, self.est_free)
        finish = start + task.t.comp[i]
        feasible = self.used + task.t.need[i] <= self.memory
        self._opts = Options(ready=ready, start=start, finish=finish, feasible=feasible)
        return self._opts

    def input_ready(self, k: int, est_fin: Sequence[float], devices: Sequence[int], *,
                    t: ModelTables | None = None, arrival: float | None = None) -> F64:
        """When layer `k` of the current task (or of a task of model `t` arriving at `arrival`,
        a planner's follower) would have its inputs on each device (estimated), its earlier
        layers having finished at `est_fin` on `devices` (the task's own, or a planner's trial,
        planner.py)."""
        if t is None:
            t = self.task.t
        if arrival is None:
            arrival = self.task.arrival
        ready: F64 | None = None
        for j in t.profile.layers[k].inputs:
            if j < 0:
                src = self.cluster.source
                arr = arrival + t.profile.input_bytes * self.inv_bw[src] + self.lat[src]
            else:
                src = devices[j]
                arr = est_fin[j] + t.out_bytes[j] * self.inv_bw[src] + self.lat[src]
            # an input is never there before the arrival (transfers take >= 0 s, and a layer
            # finishes after it), so the first one needs no max with it
            ready = arr if ready is None else np.maximum(ready, arr)
        if ready is None:
            return np.full(self.cluster.n, arrival)
        return ready

    def place(self, d: int) -> list[TaskRecord]:
        """Place the current layer on device `d`; returns the tasks that finished by the time
        the next decision is due (all of them at the end)."""
        if self.done:
            raise PlacementError("the episode is over")
        ready, start, finish, feasible = self.options()
        if not 0 <= d < self.cluster.n or not feasible[d]:
            raise PlacementError(f"device {d} cannot take layer {self.layer} of task "
                                 f"{self.task.idx} (no such device or not enough memory)")
        task, i = self.task, self.layer
        lay = task.t.profile.layers[i]
        act_ready = task.arrival
        assert task.noise is not None
        factors = task.noise[i]
        for k, j in enumerate(lay.inputs):
            if j < 0:
                b, src, fin = task.t.profile.input_bytes, self.cluster.source, task.arrival
            else:
                b, src, fin = task.t.out_bytes[j], task.devices[j], task.act_fin[j]
            tx = b * self.inv_bw[src, d] + self.lat[src, d]
            act_ready = max(act_ready, fin + tx * float(factors[1 + min(k, 1)]))
        act_fin = (max(act_ready, float(self.act_free[d]))
                   + float(task.t.comp[i, d]) * float(factors[0]))
        self.act_free[d] = act_fin
        self.est_free[d] = finish[d]
        task.est_fin.append(float(finish[d]))
        task.act_fin.append(act_fin)
        task.devices.append(d)
        task.steps.append(self.step_count)
        assert task.held is not None
        task.held[d] += task.t.need[i]
        self.used[d] += task.t.need[i]
        self.step_count += 1
        self._opts = None
        if len(task.devices) < len(task.t.profile.layers):
            return []
        self.inflight.append((max(task.act_fin), task.held))
        self.pending.append(task)
        if task.idx + 1 < self.cfg.tasks:
            self.task = self._arrive()
            return self._release(self.now)
        self.done = True
        return self._release(math.inf)

    def drop(self) -> list[TaskRecord]:
        """Refuse the current task (no device has memory for its next layer): what it holds
        is freed and the next task arrives. Returns the released tasks, as `place` does."""
        if self.done:
            raise PlacementError("the episode is over")
        assert self.task.held is not None
        self.used -= self.task.held
        self.dropped += 1
        self._opts = None
        if self.task.idx + 1 < self.cfg.tasks:
            self.task = self._arrive()
            return self._release(self.now)
        self.done = True
        return self._release(math.inf)

    def _release(self, until: float) -> list[TaskRecord]:
        out, keep = [], []
        for task in self.pending:
            fin = max(task.act_fin)
            if fin > until:
                keep.append(task)
                continue
            frontier, shares = task.arrival, []
            for f in task.act_fin:
                shares.append(max(0.0, f - frontier))
                frontier = max(frontier, f)
            out.append(TaskRecord(task=task.idx, model=task.t.profile.model,
                                  arrival=task.arrival, finish=fin, ref_s=task.t.ref_s,
                                  devices=tuple(task.devices), steps=tuple(task.steps),
                                  finishes=tuple(task.act_fin),
                                  shares=tuple(shares)))
        self.pending = keep
        self.records.extend(out)
        return out
