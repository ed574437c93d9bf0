"""The discrete-event engine: a trace, a policy and a cluster in; per-job records out.

Events are a heap of (time, priority, seq, ...): at one time, completions come before arrivals
(arrivals stream from the sorted trace), then policy ticks. All events at one time are handled
together, then the policy is asked once (`decide`), its Decision applied, and one scheduling
pass (priority order + EASY backfill, see `backfill.py`) starts what can start.
Nothing here draws random numbers except the choice of jobs made elastic (`elastic_fraction`),
which is seeded.

How a Decision is applied (`apply.py`): preemptions, then resizes, then the order and GPU
counts of pending jobs. The daemon applies only the last of these to Slurm today (priorities
and pending jobs' GPU counts, docs/daemon.md); preemptions and resizes of running jobs are the
simulator's model of what requeueing a checkpointing job would do.
Snapshots and the oracle are built in `snapshots.py`, the scheduling passes in `backfill.py`
and `conservative.py`.

The policy's declared capabilities (`slurm_rl.policies.capabilities`) are checked with
isinstance: a `Stateful` one is `reset()` at the start of a run, an `OracleReading` one gets the
engine's `Oracle` (true durations, never part of a snapshot), and Preempts or Resizes from a
policy that is not `Preempting` or `Resizing` stop the run (`SimulationError`): calls it could
not change anything with are skipped (`skip_futile`), which is exact only if it declares what
it may do. An `Observing` policy is asked at every event.

To compare with a real cluster (docs/sim-to-real.md) the engine can also follow slurmctld's
cadence instead of passing at every event: backfill and the main scheduler on their own cycles
(`bf_interval_s`, `sched_interval_s`, or explicit instants), the policy on the daemon's fixed
grid (`tick_phase_s`) with its decisions landing `decision_delay_s` later (an _APPLY event), and
a launch delay at every start.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterator, Sequence

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobState,
    Policy,
)
from slurm_rl.policies.capabilities import (
    Observing,
    OracleReading,
    Preempting,
    Resizing,
    Stateful,
)
from slurm_rl.sim import backfill, conservative
from slurm_rl.sim.apply import ApplyDecisions
from slurm_rl.sim.cluster import Alloc, Cluster
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.jobs import SimJob, make_jobs
from slurm_rl.sim.results import Interval, JobRecord, SimResult, SimulationError
from slurm_rl.sim.snapshots import SimOracle, SnapshotBuilder
from slurm_rl.sim.trace import TraceJob
from slurm_rl.sim.views import node_name

_FINISH, _APPLY, _TICK, _MAIN, _BF = 0, 1, 2, 3, 4
_MAX_NOTE_SAMPLES = 20


class Simulator(ApplyDecisions):
    def __init__(self, jobs: Sequence[TraceJob], policy: Policy, config: EngineConfig) -> None:
        self.policy, self.cfg = policy, config
        self.cluster = Cluster(config.nodes, config.gpus_per_node,
                               placement=config.placement, cpus_per_node=config.cpus_per_node)
        self.now = -math.inf
        self._jobs, self.dropped = make_jobs(jobs, config)
        self._heap: list[tuple[float, int, int, SimJob | None, int]] = []
        self._seq = itertools.count()
        self._preempts = isinstance(policy, Preempting)
        self._resizes = isinstance(policy, Resizing)
        self._next_arrival = 0
        self._active: dict[JobId, SimJob] = {}
        self._pending: dict[SimJob, None] = {}
        self._pending_sorted = True
        self._running: dict[SimJob, None] = {}
        self._ends: backfill.Ends = []
        self._ranked: list[SimJob] = []
        self._reservations = backfill.ReservationCache()
        self._armed: dict[int, float | None] = {_TICK: None, _MAIN: None, _BF: None}
        """Per timer kind (policy tick, main scheduler, backfill): when it is due next (None:
        not armed). An event of that kind at another time is stale and ignored."""
        # Skipping a futile call is exact only if the next event asks the policy again at once:
        # on a fixed cycle, or with a delay, the ranks of the last call would stay in force.
        self._may_skip = (config.skip_futile and config.decide_on_events
                          and config.decision_delay_s == 0 and not isinstance(policy, Observing))
        self._in_flight: dict[int, Decision] = {}
        """Decisions made but not yet applied (decision_delay_s), by event seq."""
        self._snapshots = SnapshotBuilder(self.cluster, config.nodes, config.gpus_per_node)
        self._records: dict[int, JobRecord] = {}
        self._intervals: list[Interval] = []
        self.decisions = self.preemptions = self.resizes = 0
        self.notes: Counter[str] = Counter()
        self._note_samples: list[str] = []
        self.busy_gpu_s = 0.0

    # -- main loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        wall = time.perf_counter()
        if isinstance(self.policy, Stateful):
            self.policy.reset()
        if isinstance(self.policy, OracleReading):
            self.policy.bind_oracle(SimOracle(self._active, self))
        jobs, heap, cfg = self._jobs, self._heap, self.cfg
        n = len(jobs)
        while True:
            t_arr = jobs[self._next_arrival].trace.submit if self._next_arrival < n else math.inf
            t = min(heap[0][0] if heap else math.inf, t_arr)
            if t == math.inf:
                break
            if t < self.now:
                raise SimulationError(f"clock went back from {self.now} to {t}")
            self.now = t
            changed = False
            while heap and heap[0][0] == t and heap[0][1] == _FINISH:
                _, _, _, job, version = heapq.heappop(heap)
                assert job is not None
                if job.version == version and job.state is JobState.RUNNING:
                    self._finish(job)
                    changed = True
            while self._next_arrival < n and jobs[self._next_arrival].trace.submit == t:
                self._arrive(jobs[self._next_arrival])
                self._next_arrival += 1
                changed = True
            applied = False
            while heap and heap[0][0] == t and heap[0][1] == _APPLY:
                _, _, seq, _, _ = heapq.heappop(heap)
                self._apply(self._in_flight.pop(seq))
                applied = True
            if heap and heap[0][0] == t:
                tick, main, bf = (self._fired(t, _TICK), self._fired(t, _MAIN),
                                  self._fired(t, _BF))
            else:
                tick = main = bf = False
            decided = False
            if ((changed and cfg.decide_on_events) or (
                    tick and (self._pending or (cfg.idle_ticks and self._active)))
                    ) and (not self._may_skip or self._worth_deciding()):
                self._decide()
                decided = True
            if cfg.bf_interval_s <= 0:
                if changed or decided or applied:
                    self._schedule()
            else:
                # slurmctld's cadence: the main scheduler and backfill each run on their own
                # cycle (the main scheduler at events if it has none).
                if bf:
                    self._schedule()
                elif main or (cfg.sched_interval_s <= 0 and (changed or decided or applied)):
                    self._schedule(main_only=True)
                if self._pending:
                    if self._armed[_BF] is None:
                        self._arm(_BF, self._next_cycle(cfg.bf_times_s, cfg.bf_phase_s,
                                                        cfg.bf_interval_s))
                    if cfg.sched_interval_s > 0 and self._armed[_MAIN] is None:
                        self._arm(_MAIN, self._next_cycle(cfg.sched_times_s, cfg.sched_phase_s,
                                                          cfg.sched_interval_s))
            if cfg.tick_s > 0 and self._armed[_TICK] is None and self._active:
                self._arm(_TICK, self._next_tick())
            if cfg.audit:
                self.audit()
            if (self._pending and not self._running and self._next_arrival >= n
                    and cfg.bf_interval_s <= 0):  # with a cadence, the next cycle starts one
                raise SimulationError(f"{len(self._pending)} pending jobs and nothing running "
                                      f"at t={t}: they can never start")
        if self._active:
            raise SimulationError(f"simulation ended with {len(self._active)} active jobs")
        return SimResult(
            policy=self.policy.name, config=cfg,
            jobs=tuple(self._records[j.seq] for j in self._jobs),
            intervals=tuple(self._intervals), dropped=self.dropped, decisions=self.decisions,
            preemptions=self.preemptions, resizes=self.resizes, notes=dict(self.notes),
            note_samples=tuple(self._note_samples), wall_s=time.perf_counter() - wall)

    def _push(self, at: float, kind: int, job: SimJob | None = None, version: int = 0) -> None:
        if not at >= self.now:  # also catches NaN
            raise SimulationError(f"event at {at} scheduled in the past (now {self.now})")
        heapq.heappush(self._heap, (at, kind, next(self._seq), job, version))

    def _arm(self, kind: int, at: float) -> None:
        """Set timer `kind` (tick, main scheduler, backfill) to fire at `at`."""
        self._armed[kind] = at
        self._push(at, kind)

    def _fired(self, t: float, kind: int) -> bool:
        """Pop the events of timer `kind` at time t; whether the armed one was among them."""
        heap, fired = self._heap, False
        while heap and heap[0][0] == t and heap[0][1] == kind:
            heapq.heappop(heap)
            if self._armed[kind] == t:
                self._armed[kind] = None
                fired = True
        return fired

    def _next_tick(self) -> float:
        """The next policy tick after now: tick_s on, or the next point of the fixed grid."""
        tick, phase = self.cfg.tick_s, self.cfg.tick_phase_s
        if phase is None:
            return self.now + tick
        return self._next_on_grid(phase, tick)

    def _next_cycle(self, times: tuple[float, ...], phase: float, period: float) -> float:
        """The next scheduler cycle after now: from the explicit instants while they last,
        then on the grid."""
        i = bisect_right(times, self.now)
        return times[i] if i < len(times) else self._next_on_grid(phase, period)

    def _next_on_grid(self, phase: float, period: float) -> float:
        """The first point of phase + k x period strictly after now."""
        at = phase + (math.floor((self.now - phase) / period) + 1) * period
        return at if at > self.now else at + period

    def _note(self, kind: str, detail: str) -> None:
        self.notes[kind] += 1
        if len(self._note_samples) < _MAX_NOTE_SAMPLES:
            self._note_samples.append(f"t={self.now:.0f}: {kind}: {detail}")

    # -- job life cycle -------------------------------------------------------------------

    def _arrive(self, job: SimJob) -> None:
        if job.submitted:
            raise SimulationError(f"job {job.id} submitted twice")
        job.submitted = True
        self._active[job.id] = job
        self._pending[job] = None

    def _start(self, job: SimJob, alloc: Alloc) -> None:
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
        self._push(finish, _FINISH, job, job.version)
        job.planned_end = now + job.limit_at(job.gpus)
        insort(self._ends, (job.planned_end, job.seq, job))
        self._running[job] = None
        job.view = job.view_static = None

    def _stop(self, job: SimJob) -> None:
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
        i = bisect_left(self._ends, (job.planned_end, job.seq))
        if i >= len(self._ends) or self._ends[i][2] is not job:
            raise SimulationError(f"job {job.id} missing from the running set")
        del self._ends[i]
        del self._running[job]
        job.alloc = ()
        job.view = job.view_static = None

    def _finish(self, job: SimJob) -> None:
        if job.end is not None:
            raise SimulationError(f"job {job.id} finished twice")
        self._stop(job)
        job.done = job.total
        job.state, job.end = JobState.COMPLETED, self.now
        del self._active[job.id]
        assert job.first_start is not None
        self._records[job.seq] = JobRecord(
            job_id=job.trace.id, submit=job.trace.submit, start=job.first_start, end=self.now,
            gpus=job.gpus, restarts=job.restarts, deadline=job.trace.deadline,
            trace_gpus=job.trace.gpus, trace_duration=job.trace.duration)

    def _requeue(self, job: SimJob) -> None:
        job.last_rate, job.last_update = job.rate, self.now
        self._stop(job)
        job.state = JobState.PENDING
        job.restarts += 1
        job.needs_delay = True
        job.version += 1  # its completion event is void
        self._pending[job] = None
        self._pending_sorted = False

    # -- policy ---------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshots.build(self.now, self._queue_in_submit_order(), self._running)

    def _queue_in_submit_order(self) -> Iterator[SimJob]:
        if not self._pending_sorted:
            self._pending = dict.fromkeys(sorted(self._pending, key=lambda j: j.seq))
            self._pending_sorted = True
        return iter(self._pending)

    def _worth_deciding(self) -> bool:
        """False when no decision could change anything, for a policy that declares what it
        may do (`Preempting`, `Resizing`; one that declares neither only orders jobs).

        With nothing pending only a resize can matter. For a policy that only orders jobs, the
        order matters only when at least two jobs are pending (or one with a GPU range) and one
        of them can start now; a pure policy decides the same later, when it does matter.
        """
        if not self.cfg.skip_futile:
            return True
        if not self._pending:
            return self._resizes
        if self._preempts or self._resizes:
            return True
        if self.cluster.free_total == 0:
            return False
        if len(self._pending) == 1 and next(iter(self._pending)).min_gpus is None:
            return False
        tried: set[int] = set()
        for job in self._pending:
            g = job.min_gpus or job.gpus
            if g not in tried:
                if self.cluster.place(g) is not None:
                    return True
                tried.add(g)
        return False

    def _decide(self) -> None:
        decision = self.policy.decide(self.snapshot())
        self.decisions += 1
        if not isinstance(decision, Decision):
            raise SimulationError(f"policy {self.policy.name} returned {type(decision).__name__}")
        if self.cfg.decision_delay_s > 0:
            seq = next(self._seq)
            self._in_flight[seq] = decision
            heapq.heappush(self._heap, (self.now + self.cfg.decision_delay_s, _APPLY, seq,
                                        None, 0))
        else:
            self._apply(decision)
        if self.cfg.tick_s > 0 and self._active:
            self._arm(_TICK, self._next_tick())

    # -- scheduling -----------------------------------------------------------------------

    def _priority_order(self) -> Iterator[SimJob]:
        pending = JobState.PENDING
        for job in self._ranked:
            if job.state is pending:
                yield job
        for job in self._queue_in_submit_order():
            if job.rank is None and job.state is pending:
                yield job

    def _schedule(self, *, main_only: bool = False) -> None:
        """One scheduling pass; `main_only`: slurmctld's main scheduler alone (strict priority
        order, stopping at the first job that does not fit)."""
        if not self._pending or self.cluster.free_total == 0:
            return
        started: list[SimJob] = []

        def start(job: SimJob, alloc: Alloc) -> None:
            self._start(job, alloc)
            started.append(job)

        if main_only:
            backfill.main_pass(self._priority_order(), self.cluster, start)
        elif self.cfg.backfill and self.cfg.conservative:
            conservative.schedule(self.now, self._priority_order(), self.cluster, self._ends,
                                  start, max_test=self.cfg.bf_max_job_test)
        else:
            backfill.schedule(self.now, self._priority_order(), self.cluster, self._ends,
                              start, backfill=self.cfg.backfill,
                              max_test=self.cfg.bf_max_job_test, cache=self._reservations)
        for job in started:
            del self._pending[job]

    # -- invariants -----------------------------------------------------------------------

    def audit(self) -> None:
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
