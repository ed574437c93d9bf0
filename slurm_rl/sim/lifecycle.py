"""A simulated job's life cycle in the engine: arrival, start (or restart), stop, finish,
requeue; and the full-state audit. Mixed into `engine.Simulator`, whose state it reads and
changes through `_Engine` (as `apply.py`)."""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Protocol

from slurm_rl.core import JobId, JobState
from slurm_rl.policies.capabilities import Resizing
from slurm_rl.sim import backfill
from slurm_rl.sim.cluster import Alloc, Cluster
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.results import Interval, JobRecord, SimulationError
from slurm_rl.sim.snapshots import SnapshotBuilder
from slurm_rl.sim.views import node_name, running_view

FINISH = 0
"""The heap's event kind for a completion (engine.py has the others)."""


class _Engine(Protocol):
    """The part of `engine.Simulator` that the life cycle uses."""

    now: float
    cfg: EngineConfig
    cluster: Cluster
    busy_gpu_s: float
    completed: int
    deadlines_met: int
    _snapshots: SnapshotBuilder
    _active: dict[JobId, SimJob]
    _pending: dict[SimJob, None]
    _pending_sorted: bool
    _running: dict[SimJob, None]
    _resizer: Resizing | None
    _resizable: set[SimJob] | None
    _ends: backfill.Ends
    _records: dict[int, JobRecord]
    _intervals: list[Interval]

    def _push(self, at: float, kind: int, job: SimJob | None = None, version: int = 0) -> None: ...
    def _stop(self, job: SimJob) -> None: ...


class JobLifecycle:
    def _arrive(self: _Engine, job: SimJob) -> None:
        if job.submitted:
            raise SimulationError(f"job {job.id} submitted twice")
        job.submitted = True
        self._active[job.id] = job
        self._pending[job] = None

    def _start(self: _Engine, job: SimJob, alloc: Alloc) -> None:
        """Start (or restart) a run; the caller removes the job from the pending queue."""
        now, cfg = self.now, self.cfg
        if job.state is not JobState.PENDING:
            raise SimulationError(f"job {job.id} started while {job.state.name}")
        if now < job.trace.submit:
            raise SimulationError(f"job {job.id} started at {now} before its submission")
        if sum(g for _, g in alloc) != job.gpus:
            raise SimulationError(f"job {job.id}: allocation {alloc} is not {job.gpus} GPUs")
        self.cluster.take(alloc)
        self._snapshots.dirty.update(n for n, _ in alloc)
        job.alloc, job.state, job.run_start = alloc, JobState.RUNNING, now
        job.progress_from = now + cfg.launch_delay_s + (
            cfg.restart_delay_s if job.needs_delay else 0.0)
        job.needs_delay = False
        job.rate = job.rate_at(job.gpus)
        if job.first_start is None:
            job.first_start = now
        left = job.total - job.done
        finish = job.progress_from + (left / job.rate if left > 0 and job.rate > 0 else 0.0)
        job.version += 1
        self._push(finish, FINISH, job, job.version)
        job.planned_end = now + job.limit_at(job.gpus)
        insort(self._ends, (job.planned_end, job.seq, job))
        self._running[job] = None
        job.view = job.view_static = None
        if self._resizer is not None:  # `_resizable`: the runs it may resize
            # (a throwaway view: the snapshot builder sees the run start by view_static None)
            view = running_view(job.run_static(), now)
            job.view_static = None
            if self._resizer.may_resize(view):
                self._resizable.add(job)  # type: ignore[union-attr]

    def _stop(self: _Engine, job: SimJob) -> None:
        """End the current run: book progress, service and the interval; free the GPUs."""
        now = self.now
        job.done = job.done_at(now)
        held = now - job.run_start
        job.attained += job.gpus * held
        self.busy_gpu_s += job.gpus * held
        self._intervals.append(Interval(
            job_id=job.trace.id, start=job.run_start, end=now, gpus=job.gpus,
            nodes=tuple(node_name(n) for n, _ in job.alloc),
            node_gpus=tuple(g for _, g in job.alloc)))
        self.cluster.give(job.alloc)
        self._snapshots.dirty.update(n for n, _ in job.alloc)
        self._snapshots.stopped.append(job.id)
        i = bisect_left(self._ends, (job.planned_end, job.seq))
        if i >= len(self._ends) or self._ends[i][2] is not job:
            raise SimulationError(f"job {job.id} missing from the running set")
        del self._ends[i]
        del self._running[job]
        if self._resizable:
            self._resizable.discard(job)
        job.alloc = ()
        job.view = job.view_static = None

    def _finish(self: _Engine, job: SimJob) -> None:
        if job.end is not None:
            raise SimulationError(f"job {job.id} finished twice")
        self._stop(job)
        job.done = job.total
        job.state, job.end = JobState.COMPLETED, self.now
        del self._active[job.id]
        self.completed += 1
        if job.trace.deadline is not None and self.now <= job.trace.deadline:
            self.deadlines_met += 1
        assert job.first_start is not None
        self._records[job.seq] = JobRecord(
            job_id=job.trace.id, submit=job.trace.submit, start=job.first_start, end=self.now,
            gpus=job.gpus, restarts=job.restarts, deadline=job.trace.deadline,
            trace_gpus=job.trace.gpus, trace_duration=job.trace.duration)

    def _requeue(self: _Engine, job: SimJob) -> None:
        job.last_rate, job.last_update = job.rate, self.now
        self._stop(job)
        job.state = JobState.PENDING
        job.restarts += 1
        job.needs_delay = True
        job.version += 1  # its completion event is void
        self._pending[job] = None
        self._pending_sorted = False

    def audit(self: _Engine) -> None:
        """Check the whole state (slow; `EngineConfig.audit` runs it after every event)."""
        self.cluster.audit()
        used = [0] * self.cfg.nodes
        for job in self._running:
            assert job.state is JobState.RUNNING and job.alloc, f"{job.id} bad running state"
            assert sum(g for _, g in job.alloc) == job.gpus, f"{job.id} allocation != gpus"
            for node, g in job.alloc:
                used[node] += g
        for node, u in enumerate(used):
            if u > self.cfg.gpus_per_node or u != self.cfg.gpus_per_node - self.cluster.free[node]:
                raise SimulationError(f"node {node}: {u} GPUs in use, free map says "
                                      f"{self.cluster.free[node]} free")
        assert len(self._ends) == len(self._running), "running set and end list differ"
        for job in self._pending:
            assert job.state is JobState.PENDING and not job.alloc, f"{job.id} bad pending state"
        assert len(self._pending) + len(self._running) == len(self._active), "active set drift"
