"""How the engine applies a policy's `Decision` to the simulated cluster: the model of what
Slurm would do with the daemon's actions (the engine module's docstring has the rules). Mixed
into `engine.Simulator`, whose state it reads and changes through `_Engine`.

- preemptions first: the job is requeued with its progress kept; its next start pays
  `restart_delay_s`;
- resizes next, shrinks before grows: the job is requeued and restarted at once at the new
  count ahead of the queue, paying the restart delay; a count that does not fit even in the
  job's own GPUs is refused;
- with `restart_rules`, only the restarts the daemon would make live (EngineConfig);
- order last: ranks for pending jobs (lower first, ties in submit order); pending jobs the
  decision does not mention rank after all mentioned ones, in submit order. A JobOrder's GPU
  count applies to jobs with an intent GPU range (clamped into it and to the cluster).
Anything invalid is ignored and counted in `SimResult.notes`. Preempts or Resizes from a policy
that does not declare them (`Preempting`, `Resizing`) stop the run (`SimulationError`).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from slurm_rl.core import Decision, JobId, JobState, Policy
from slurm_rl.policies.capabilities import Resizing
from slurm_rl.policies.restart_gate import HOUR_S, restart_gain
from slurm_rl.sim.cluster import Alloc, Cluster
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.jobs import SimJob, gpu_range
from slurm_rl.sim.results import SimulationError
from slurm_rl.sim.views import running_view


class _Engine(Protocol):
    """The part of `engine.Simulator` that applying a decision uses."""

    policy: Policy
    cfg: EngineConfig
    cluster: Cluster
    preemptions: int
    resizes: int
    notes: Counter[str]
    _active: dict[JobId, SimJob]
    _pending: dict[SimJob, None]
    _ranked: list[SimJob]
    _preempts: bool
    _resizer: Resizing | None
    _restart_log: dict[JobId, list[float]]
    now: float

    def _note(self, kind: str, detail: str) -> None: ...
    def _requeue(self, job: SimJob) -> None: ...
    def _start(self, job: SimJob, alloc: Alloc) -> None: ...
    def _gpus_of(self, job_id: JobId) -> int: ...
    def _clamp(self, job: SimJob, gpus: int, what: str) -> int | None: ...
    def _set_gpus(self, job: SimJob, gpus: int) -> None: ...
    def _resize(self, job_id: JobId, gpus: int) -> None: ...
    def _refused(self, job: SimJob, gpus: int | None) -> str: ...
    def _restarted(self, job: SimJob) -> None: ...


class ApplyDecisions:
    """Preemptions, then resizes (shrinks first), then the order and GPU counts of pending
    jobs; anything invalid is skipped and noted."""

    def _apply(self: _Engine, d: Decision) -> None:
        active = self._active
        if (d.preemptions and not self._preempts) or (d.resizes and self._resizer is None):
            raise SimulationError(
                f"policy {self.policy.name} returned preemptions or resizes without declaring "
                "them (slurm_rl.policies.capabilities: Preempting, Resizing)")
        for p in d.preemptions:
            job = active.get(p.job_id)
            if job is None or job.state is not JobState.RUNNING:
                self._note("preempt of a job not running", str(p.job_id))
                continue
            if self.cfg.restart_rules and (why := self._refused(job, None)):
                self._note(f"preempt refused by the restart rules: {why}", str(p.job_id))
                continue
            self._requeue(job)
            self._restarted(job)
            self.preemptions += 1
        for r in sorted(d.resizes, key=lambda r: (r.gpus - self._gpus_of(r.job_id), r.job_id)):
            self._resize(r.job_id, r.gpus)
        for old in self._ranked:
            old.rank = None
        ranked: list[SimJob] = []
        for o in d.order:
            job = active.get(o.job_id)
            if job is None or job.state is not JobState.PENDING:
                self._note("order for a job not pending", str(o.job_id))
                continue
            if job.rank is not None:
                self._note("job ranked twice (first rank kept)", str(o.job_id))
                continue
            job.rank = (o.rank, job.seq)
            ranked.append(job)
            if o.gpus is not None and o.gpus != job.gpus:
                self._set_gpus(job, o.gpus)
        ranked.sort(key=lambda j: j.rank)  # type: ignore[arg-type, return-value]
        self._ranked = ranked

    def _gpus_of(self: _Engine, job_id: JobId) -> int:
        job = self._active.get(job_id)
        return job.gpus if job else 0

    def _clamp(self: _Engine, job: SimJob, gpus: int, what: str) -> int | None:
        rng = gpu_range(job, self.cfg.capacity)
        if rng is None:
            self._note(f"{what} for a job without a GPU range", f"{job.id} -> {gpus}")
            return None
        new = min(max(gpus, rng[0]), rng[1])
        if new != gpus:
            self._note(f"{what} clamped to the job's GPU range", f"{job.id}: {gpus} -> {new}")
        return new

    def _set_gpus(self: _Engine, job: SimJob, gpus: int) -> None:
        new = self._clamp(job, gpus, "GPU count")
        if new is not None and new != job.gpus:
            job.gpus = new
            job.view = None

    def _resize(self: _Engine, job_id: JobId, gpus: int) -> None:
        job = self._active.get(job_id)
        if job is None or job.state is not JobState.RUNNING:
            self._note("resize of a job not running", str(job_id))
            return
        if job.intent is None or not job.intent.elastic:
            self._note("resize of a job that is not elastic", str(job_id))
            return
        new = self._clamp(job, gpus, "resize")
        if new is None or new == job.gpus:
            return
        if self.cfg.restart_rules and (why := self._refused(job, new)):
            self._note(f"resize refused by the restart rules: {why}", f"{job_id} -> {new}")
            return
        self.cluster.give(job.alloc)
        alloc = self.cluster.place(new)
        self.cluster.take(job.alloc)
        if alloc is None:
            self._note("resize does not fit", f"{job_id}: {job.gpus} -> {new}")
            return
        self._requeue(job)
        self._restarted(job)
        del self._pending[job]
        job.gpus = new
        self._start(job, alloc)
        self.resizes += 1

    def _refused(self: _Engine, job: SimJob, gpus: int | None) -> str:
        """Why the daemon would not restart `job` now (a preemption: `gpus` None; a resize to
        `gpus`), or "" if it would."""
        if job.intent is None or not job.intent.elastic:
            return "not elastic"
        log = self._restart_log.setdefault(job.id, [])
        while log and log[0] <= self.now - HOUR_S:
            log.pop(0)
        if len(log) >= self.cfg.max_restarts_per_hour:
            return "max_restarts_per_hour"
        if gpus is not None:
            fresh = job.view_static is None  # the snapshot builder reads that as a new run
            view = running_view(job.run_static(), self.now)
            if fresh:
                job.view_static = None
            if restart_gain(view, gpus, now=self.now, cost_s=self.cfg.restart_delay_s).why:
                # one note kind per rule (the reason's figures vary job by job)
                return ("the predicted gain does not beat the restart delay" if gpus > job.gpus
                        else "finishes within the restart delay (or no prediction)")
        return ""

    def _restarted(self: _Engine, job: SimJob) -> None:
        """A restart made: counted against the hourly cap (only one that happened counts: a
        resize that passed the rules may still not fit)."""
        if self.cfg.restart_rules:
            self._restart_log.setdefault(job.id, []).append(self.now)
