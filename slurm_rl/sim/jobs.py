"""A simulated job's mutable state, its speed model and its `JobView`.

Work is counted in steps: the trace's iteration count when it has one, else the job's duration
in seconds at its trace GPU count (so one "step" is one second of the original run). The rate at
n GPUs follows `perfmodel.scaled_rate` from the trace GPU count along the model's curve.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from slurm_rl import perfmodel
from slurm_rl.core import Intent, JobId, JobState, JobView, Progress
from slurm_rl.sim.cluster import Alloc
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.trace import TraceJob
from slurm_rl.sim.views import JOB_DEFAULTS, Run, fast, node_name


@dataclass(frozen=True, kw_only=True, slots=True)
class Restart:
    """A restart in progress (EngineConfig's per-step model): in `GRACE` the job holds its GPUs
    and makes no progress; in `REQUEUE` its GPUs are free and it may not start yet."""

    GRACE: ClassVar[str] = "grace"
    REQUEUE: ClassVar[str] = "requeue"
    step: str
    gpus: int | None
    """The count a resize restarts the job at (None: a preemption, the job keeps its count and
    queues)."""


class SimJob:
    """Engine-side state of one job. Identity-hashed; ids are Slurm-like sequence numbers."""

    __slots__ = (
        "seq", "trace", "id", "gpus", "limit0", "total", "base_rate", "intent",
        "state", "submitted", "first_start", "end", "run_start", "progress_from", "rate",
        "alloc", "done", "attained", "restarts", "needs_delay", "version", "rank",
        "planned_end", "last_rate", "last_update", "view", "view_static", "_rates", "min_gpus",
        "restart", "restart_done", "restartable",
    )

    def __init__(self, seq: int, trace: TraceJob, *, limit: float, intent: Intent | None) -> None:
        self.seq = seq
        self.trace = trace
        self.id = JobId(str(seq + 1))
        self.gpus = trace.gpus
        self.limit0 = limit
        """Time limit at the trace GPU count."""
        self.total = float(trace.total_steps) if trace.total_steps else trace.duration
        self.base_rate = self.total / trace.duration if trace.duration > 0 else 0.0
        self.intent = intent
        self.state = JobState.PENDING
        self.submitted = False
        self.first_start: float | None = None
        self.end: float | None = None
        self.run_start = 0.0
        self.progress_from = 0.0
        """When the current run starts making progress (run_start + any restart delay)."""
        self.rate = 0.0
        self.alloc: Alloc = ()
        self.done = 0.0
        self.attained = 0.0
        self.restarts = 0
        self.needs_delay = False
        self.version = 0
        self.rank: tuple[int, int] | None = None
        self.planned_end = 0.0
        self.last_rate: float | None = None
        self.last_update: float | None = None
        self.view: JobView | None = None
        """Cached pending view (None: stale)."""
        self.view_static: dict[str, Any] | None = None
        """Fields of the running view that are fixed for the current run (None: stale)."""
        self._rates: dict[int, float] = {}
        self.min_gpus: int | None = None
        self.restartable = True
        """Whether the engine would restart the job (its restart rules: it opted in)."""
        """Smallest count of the job's GPU range (None: no range)."""
        self.restart: Restart | None = None
        """A restart under way in the per-step model (EngineConfig.restart_grace_s,
        requeue_s): its step and the count it restarts at."""
        self.restart_done = 0.0
        """Steps done when the checkpoint signal came: all that survives the restart."""

    def rate_at(self, gpus: int) -> float:
        r = self._rates.get(gpus)
        if r is None:
            t = self.trace
            r = perfmodel.scaled_rate(self.base_rate, t.gpus, gpus, t.model, t.batch_size)
            self._rates[gpus] = r
        return r

    def limit_at(self, gpus: int) -> float:
        """Time limit for a run at `gpus`: the trace-count limit scaled by the slow-down, as the
        daemon must set it when it changes a job's count (else Slurm would kill the job)."""
        if gpus == self.trace.gpus or self.base_rate == 0:
            return self.limit0
        r = self.rate_at(gpus)
        return self.limit0 * self.rate_at(self.trace.gpus) / r if r > 0 else self.limit0

    def remaining_at(self, gpus: int) -> float:
        left = self.total - self.done
        if left <= 0 or self.base_rate == 0:  # done, or a zero-length trace job
            return 0.0
        r = self.rate_at(gpus)
        return left / r if r > 0 else float("inf")

    def true_remaining(self, now: float) -> float:
        """True remaining run time at `now` at the current count, restart delay included (the
        simulator's `Oracle`: never part of a JobView)."""
        if self.state is not JobState.RUNNING:
            return self.remaining_at(self.gpus)
        left = self.total - self.done_at(now)
        delay_left = max(0.0, self.progress_from - now)
        return delay_left + (left / self.rate if self.rate > 0 else 0.0)

    def done_at(self, now: float) -> float:
        """Steps done by `now` (running jobs progress at `rate` after `progress_from`)."""
        if self.state is JobState.RUNNING and now > self.progress_from:
            return min(self.total, self.done + (now - self.progress_from) * self.rate)
        return self.done

    # -- views ---------------------------------------------------------------------------

    def pending_view(self, per_node: int) -> JobView:
        if self.view is None:
            t = self.trace
            progress = None
            predicted = None
            if t.total_steps and self.last_rate is not None:
                progress = fast(Progress, {
                    "steps_done": int(self.done), "steps_total": t.total_steps,
                    "rate": self.last_rate, "updated_at": self.last_update})
                predicted = self.remaining_at(self.gpus)
            self.view = fast(JobView, {
                **JOB_DEFAULTS, "id": self.id, "name": t.id, "user": t.user,
                "state": JobState.PENDING, "submit_time": t.submit,
                "time_limit_s": self.limit_at(self.gpus), "gpus": self.gpus,
                "nodes": -(-self.gpus // per_node), "intent": self.intent,
                "progress": progress, "predicted_remaining_s": predicted,
                "attained_gpu_s": self.attained, "restarts": self.restarts,
                "held": self.restart is not None and self.restart.step == Restart.REQUEUE})
        return self.view

    def run_static(self) -> dict[str, Any]:
        """The running view's fields that do not move during the current run, plus '_run'
        (see views.RunningView); built once per run."""
        static = self.view_static
        if static is None:
            t = self.trace
            static = self.view_static = {
                **JOB_DEFAULTS, "id": self.id, "name": t.id, "user": t.user,
                "state": JobState.RUNNING, "submit_time": t.submit, "start_time": self.run_start,
                "time_limit_s": self.limit_at(self.gpus), "gpus": self.gpus,
                "nodes": len(self.alloc), "intent": self.intent, "restarts": self.restarts,
                "restartable": self.restartable,
                "placement": tuple([(node_name(n), g) for n, g in self.alloc]),
                "_run": Run(self.run_start, self.progress_from, self.rate, self.done,
                            self.attained, self.gpus, self.total, t.total_steps)}
            for lazy in ("attained_gpu_s", "progress", "predicted_remaining_s"):
                del static[lazy]
        return static


def gpu_range(job: SimJob, capacity: int) -> tuple[int, int] | None:
    """(min, max) GPUs the job may run at (its intent's range, capped by the cluster), or None
    when it has no range."""
    it = job.intent
    if it is None or (it.gpus_min is None and it.gpus_max is None):
        return None
    g = job.trace.gpus
    lo = it.gpus_min if it.gpus_min is not None else min(g, it.gpus_max or g)
    hi = it.gpus_max if it.gpus_max is not None else max(lo, g)
    return max(lo, 1), min(max(hi, 1), capacity)


def _intent(t: TraceJob, elastic: bool, opted: bool, cfg: EngineConfig) -> Intent | None:
    """The job's intent: `elastic` gives it a GPU range (and opts it in), `opted` opts it in to
    restarts at its own count."""
    lo, hi = t.gpus_min, t.gpus_max
    if elastic:
        lo, hi = 1, max(t.gpus, min(cfg.elastic_max_gpus, cfg.capacity))
    opted = elastic or opted or t.elastic
    if (t.deadline is None and lo is None and hi is None and not opted
            and t.total_steps is None and t.model is None):
        return None
    if hi is not None:
        hi = min(hi, cfg.capacity)
    return Intent(deadline=t.deadline, gpus_min=lo, gpus_max=hi, elastic=opted,
                  total_steps=t.total_steps, model=t.model, batch_size=t.batch_size)


def make_jobs(trace: Sequence[TraceJob], cfg: EngineConfig) -> tuple[list[SimJob], int]:
    """The trace's jobs in submit order, with intents, time limits and GPU counts that the
    cluster can hold; and how many were dropped as wider than the cluster. The seed picks the
    jobs made elastic (`elastic_fraction`) and opted in to restarts (`opt_in_fraction`) and,
    under the tsafrir time-limit model, the limit of each job (from its id and submit time,
    whatever the window)."""
    rng = random.Random(cfg.seed)
    jobs: list[SimJob] = []
    dropped = 0
    for t in sorted(trace, key=lambda j: j.submit):
        elastic = cfg.elastic_fraction > 0 and rng.random() < cfg.elastic_fraction
        opted = cfg.opt_in_fraction > 0 and rng.random() < cfg.opt_in_fraction
        limit = t.time_limit_s or cfg.time_limit.for_job(t.duration, f"{t.id}@{t.submit!r}",
                                                         cfg.seed)
        job = SimJob(len(jobs), t, limit=limit, intent=_intent(t, elastic, opted, cfg))
        if cfg.restart_rules:  # as the daemon shows it: whether the job opted in
            job.restartable = job.intent is not None and job.intent.elastic
        rng_gpus = gpu_range(job, cfg.capacity)
        if (rng_gpus[0] if rng_gpus else t.gpus) > cfg.capacity:
            dropped += 1  # could never run here
            continue
        if rng_gpus:  # asks for a count in its range that the cluster has
            job.min_gpus = rng_gpus[0]
            job.gpus = min(max(job.gpus, rng_gpus[0]), rng_gpus[1])
        jobs.append(job)
    return jobs, dropped
