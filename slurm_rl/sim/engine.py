"""The discrete-event engine: a trace, a policy and a cluster in; per-job records out.

Events are a heap of (time, priority, seq, ...): at one time, completions come before arrivals
(arrivals stream from the sorted trace), then policy ticks. All events at one time are handled
together, then the policy is asked once (`decide`), its Decision applied, and one scheduling
pass (priority order + EASY backfill, see `backfill.py`) starts what can start. The loop is
split SimPy-style: `step()` runs to the next decision point and returns it, `apply()` answers
it, `run(until)` is built on the two (a gym environment steps it: slurm_rl/rl/env.py).
Nothing here draws random numbers except the choice of jobs made elastic (`elastic_fraction`)
or opted in to restarts (`opt_in_fraction`), which is seeded.

How a Decision is applied (`Simulator._apply`, the model of what Slurm would do with the
daemon's actions):
- preemptions first: the job is requeued with its progress kept; its next start pays
  `restart_delay_s` (the restore step);
- resizes next, shrinks before grows: the job is requeued and restarted at once at the new
  count ahead of the queue, paying the restart delay; a count that does not fit even in the
  job's own GPUs is refused;
- with the per-step restart model (`restart_grace_s`, `requeue_s` > 0; a restart model file,
  `restart_model.py`) a preemption or a resize is the checkpoint signal: the job keeps its
  GPUs and makes no progress for the grace step, is then requeued (GPUs free) and may start
  again requeue_s later (a resize: at its new count ahead of the queue if that fits then),
  paying the restore step when it does. A job in the requeue step is shown pending and held
  (live, requeue-held until the daemon releases it); one in the grace step is seen running,
  and a second restart of it is ignored (noted);
- with `restart_rules` (the default), only the restarts the daemon would make live: jobs that
  opted in, the gain and the hourly cap (EngineConfig); without, every one that fits;
- order last: ranks for pending jobs (lower first, ties in submit order); pending jobs the
  decision does not mention rank after all mentioned ones, in submit order. A JobOrder's GPU
  count applies to jobs with an intent GPU range (clamped into it and to the cluster).
Anything invalid is ignored and counted in `SimResult.notes`. The daemon applies all four
too: priorities and pending jobs' GPU counts, and resizes and preemptions of running jobs that
opted in with `--rl-elastic`, by requeueing them (daemon/resize.py, daemon/preempt.py;
docs/daemon.md); here a resize or a preemption is the model of that requeue, and
`restart_rules` the daemon's own rules for it.

The engine owns its parts: the cluster's free map (`cluster.py`), the snapshot builder
(`snapshots.py`, which also builds the oracle), the event heap with its timers
(`events.py`) and, with `restart_rules`, the daemon's restart rules with their hourly log
(`restart_rules.py`); the scheduling passes are `backfill.py` and `conservative.py`. A job's life
cycle (arrive, start, stop, finish, requeue) and applying a decision are the engine's own
methods: they change its state throughout.

The policy's declared capabilities (`slurm_rl.policies.capabilities`) are checked with
isinstance: a `Stateful` one is `reset()` at the start of a run (and by `Simulator.reset`),
an `OracleReading` one gets the engine's `Oracle` (true durations, never part of a snapshot),
and Preempts or Resizes from a policy that is not `Preempting` or `Resizing` stop the run
(`SimulationError`): calls it could not change anything with are skipped (`skip_futile`),
which is exact only if it declares what it may do; there, a `Gated` policy's own `futile` skips
it too. An `Observing` policy is asked at every event. The jobs a `Dropping` policy declines
are taken from it after each decision point (after its `futile` too) and removed from the
queue before the scheduling pass: they never run (`SimResult.declined_dropped`).

To compare with a real cluster (docs/sim-to-real.md) the engine can also follow slurmctld's
cadence instead of passing at every event: backfill and the main scheduler on their own cycles
(`bf_interval_s`, `sched_interval_s`, or explicit instants), the policy on the daemon's fixed
grid (`tick_phase_s`) with its decisions landing `decision_delay_s` later (an _APPLY event), and
a launch delay at every start.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, Policy
from slurm_rl.policies.capabilities import (
    CycleState,
    Dropping,
    Gated,
    Guarding,
    Observing,
    OracleReading,
    Preempting,
    Resizing,
    Stateful,
)
from slurm_rl.sim import backfill, conservative
from slurm_rl.sim.cluster import Alloc, Cluster
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.events import APPLY, BF, FINISH, MAIN, TICK, Events, next_cycle, next_tick
from slurm_rl.sim.jobs import Restart, SimJob, gpu_range, make_jobs
from slurm_rl.sim.restart_rules import RestartRules
from slurm_rl.sim.results import DroppedJob, Interval, JobRecord, SimResult, SimulationError
from slurm_rl.sim.snapshots import SimOracle, SnapshotBuilder
from slurm_rl.sim.trace import TraceJob
from slurm_rl.sim.views import node_name, running_view

_MAX_NOTE_SAMPLES = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionPoint:
    """A moment at which the engine asks for a Decision (`Simulator.step`): the snapshot the
    policy would see. Answer it with `Simulator.apply`."""

    time: float
    snapshot: ClusterSnapshot
    cycle: CycleState | None = None
    """For a `Gated` policy: the scratch space its `futile` was given at this point, for its
    `decide` (`Simulator.decide`)."""


class Simulator:
    """The engine, stepped SimPy-style: `step()` runs events up to the next decision point
    and returns it (None when the trace is done); `apply(decision)` answers it and finishes
    that instant; `run(until)` is that loop with the engine's own policy deciding. `reset()`
    starts the same trace over (the policy's `reset()` too, if `Stateful`)."""

    def __init__(self, jobs: Sequence[TraceJob], policy: Policy, config: EngineConfig) -> None:
        self.policy, self.cfg = policy, config
        self._trace = tuple(jobs)
        self._preempts = isinstance(policy, Preempting)
        self._resizer: Resizing | None = policy if isinstance(policy, Resizing) else None
        # Skipping a futile call is exact only if the next event asks the policy again at once:
        # on a fixed cycle, or with a delay, the ranks of the last call would stay in force.
        self._may_skip = (config.skip_futile and config.decide_on_events
                          and config.decision_delay_s == 0 and not config.decision_delays_s
                          and not isinstance(policy, Observing))
        self._gated: Gated | None = (policy if self._may_skip and isinstance(policy, Gated)
                                     else None)
        self._dropper: Dropping | None = policy if isinstance(policy, Dropping) else None
        self._init_state()

    def _init_state(self) -> None:
        config = self.cfg
        self.cluster = Cluster(config.nodes, config.gpus_per_node,
                               placement=config.placement, cpus_per_node=config.cpus_per_node)
        self.now = -math.inf
        self._jobs, self.dropped = make_jobs(self._trace, config)
        self._events = Events()
        self._next_arrival = 0
        self._active: dict[JobId, SimJob] = {}
        self._pending: dict[SimJob, None] = {}
        self._pending_sorted = True
        self._running: dict[SimJob, None] = {}
        self._resizable: set[SimJob] | None = set() if self._resizer is not None else None
        """Running jobs the policy may resize (`Resizing.may_resize` when they started)."""
        self._ends: backfill.Ends = []
        self._ranked: list[SimJob] = []
        self._reservations = backfill.ReservationCache()
        self._requeuing: dict[SimJob, None] = {}
        """Jobs in a restart's requeue step: GPUs free, not pending yet (stepped restarts)."""
        self._rules = (RestartRules(self.cfg.max_restarts_per_hour, self.cfg.restart_cost_s)
                       if self.cfg.restart_rules else None)
        """The daemon's restart rules (restart_rules.py), or None: restarts are free."""
        self._restart_wants: dict[SimJob, int] = {}
        """With restart_rules: the count the last decision asked of each job in its grace step
        (the daemon restarts it at that count if that passes the rules at the grace's end)."""
        self._in_flight: dict[int, Decision] = {}
        """Decisions made but not yet applied (decision_delay_s), by event seq."""
        self._snapshots = SnapshotBuilder(self.cluster, config.nodes, config.gpus_per_node)
        self._records: dict[int, JobRecord] = {}
        self._intervals: list[Interval] = []
        self._declined: list[DroppedJob] = []
        """Jobs the policy declined and dropped (`Dropping`), in the order dropped."""
        self.decisions = self.preemptions = self.resizes = 0
        self.notes: Counter[str] = Counter()
        self._note_samples: list[str] = []
        self.busy_gpu_s = 0.0
        self.job_s = 0.0
        """Job-seconds in the system so far: the integral of the number of active (pending or
        running) jobs over time. At the end it is the sum of all JCTs (Little's law)."""
        self.completed = self.deadlines_met = 0
        """Jobs finished so far, and those of them that had a deadline and ended by it."""
        self._started = False
        self._done = False
        self._wall = 0.0
        self._instant: tuple[bool, bool, bool, bool] | None = None
        """(changed, applied, main, bf) of the instant awaiting a decision (`apply`)."""

    # -- stepping -------------------------------------------------------------------------

    def reset(self) -> None:
        """Start over: the same trace, config and policy (which is `reset()` if `Stateful`)."""
        self._init_state()
        self._begin()

    def _begin(self) -> None:
        self._started = True
        self._wall = time.perf_counter()
        if isinstance(self.policy, Stateful):
            self.policy.reset()
        if isinstance(self.policy, OracleReading):
            self.policy.bind_oracle(SimOracle(self._active, self))

    @property
    def done(self) -> bool:
        """Whether every job has been submitted and has ended."""
        return self._done

    def peek(self) -> float:
        """Time of the next instant (inf: none left)."""
        jobs = self._jobs
        t_arr = (jobs[self._next_arrival].trace.submit if self._next_arrival < len(jobs)
                 else math.inf)
        heap = self._events.heap
        return min(heap[0][0] if heap else math.inf, t_arr)

    def step(self, until: float = math.inf) -> DecisionPoint | None:
        """Run instants (all events at one time) until one asks for a decision, and return it;
        `apply` must answer it before the next step. None when the next instant is at or
        after `until` (with the default: the trace is done, `done` is set).

        A policy is asked at every arrival/completion and on ticks while jobs wait, except
        where the engine's skip rule (`_worth_deciding`) shows it could change nothing."""
        if self._instant is not None:
            raise SimulationError("step() before the last decision point was answered (apply)")
        if self._done:
            return None
        if not self._started:
            self._begin()
        while True:
            t = self.peek()
            if t >= until:
                if t == math.inf:
                    if self._active:
                        raise SimulationError(
                            f"simulation ended with {len(self._active)} active jobs")
                    self._done = True
                return None
            changed, applied, main, bf, decide = self._advance(t)
            if decide:
                snap = self.snapshot()  # (a Gated policy's futile call is skipped too)
                gated, cycle, futile = self._gated, None, False
                if gated is not None:
                    cycle = CycleState()
                    futile = gated.futile(snap, cycle)
                if not futile:
                    self._instant = (changed, applied, main, bf)
                    return DecisionPoint(time=t, snapshot=snap, cycle=cycle)
                if self._dropper is not None:  # (futile may have judged an arrival)
                    self._drop_declined()
            self._end_instant(changed, applied, main, bf, False)

    def apply(self, decision: Decision) -> None:
        """Answer the decision point `step` returned, and finish its instant (the scheduling
        pass that starts what can start)."""
        instant = self._instant
        if instant is None:
            raise SimulationError("apply() without a decision point (call step() first)")
        self._instant = None
        self._take(decision)
        if self._dropper is not None:
            self._drop_declined()
        self._end_instant(*instant, True)

    @overload
    def run(self, until: None = None) -> SimResult: ...

    @overload
    def run(self, until: float) -> SimResult | None: ...

    def run(self, until: float | None = None) -> SimResult | None:
        """Step to the end (or to `until`: instants before it), the engine's policy deciding
        at every decision point; the result when the trace is done, else None."""
        step, apply, decide = self.step, self.apply, self.decide
        limit = math.inf if until is None else until
        while (point := step(limit)) is not None:
            apply(decide(point))
        return self.result() if self._done else None

    def decide(self, point: DecisionPoint) -> Decision:
        """The engine's policy's Decision at a point `step` returned (a `Gated` policy gets the
        point's `CycleState`, the one its `futile` saw)."""
        gated = self._gated
        if gated is not None and point.cycle is not None:
            return gated.decide(point.snapshot, point.cycle)
        return self.policy.decide(point.snapshot)

    def result(self) -> SimResult:
        """The finished run's result (a SimulationError before the trace is done)."""
        if not self._done:
            raise SimulationError("result() before the simulation is done")
        return SimResult(
            policy=self.policy.name, config=self.cfg,
            jobs=tuple(self._records[j.seq] for j in self._jobs
                       if j.state is not JobState.CANCELLED),  # (not the dropped ones)
            intervals=tuple(self._intervals), dropped=self.dropped,
            declined_dropped=tuple(self._declined), decisions=self.decisions,
            preemptions=self.preemptions, resizes=self.resizes, notes=dict(self.notes),
            note_samples=tuple(self._note_samples), wall_s=time.perf_counter() - self._wall,
            guard_switches=(self.policy.guard_status().switches
                            if isinstance(self.policy, Guarding) else None))

    # -- one instant ----------------------------------------------------------------------

    def _advance(self, t: float) -> tuple[bool, bool, bool, bool, bool]:
        """Move the clock to t and handle its events: completions, arrivals, decisions due
        (decision_delay_s), timers. Returns (changed, applied, main, bf, decide)."""
        jobs, events, cfg = self._jobs, self._events, self.cfg
        heap = events.heap
        if t < self.now:
            raise SimulationError(f"clock went back from {self.now} to {t}")
        if self._active:
            self.job_s += len(self._active) * (t - self.now)
        self.now = t
        changed = False
        while heap and heap[0][0] == t and heap[0][1] == FINISH:
            _, _, _, job, version = heapq.heappop(heap)
            assert job is not None
            if job.version != version:
                continue
            if job.restart is not None:
                self._restart_step(job)
                changed = True
            elif job.state is JobState.RUNNING:
                self._finish(job)
                changed = True
        n = len(jobs)
        while self._next_arrival < n and jobs[self._next_arrival].trace.submit == t:
            self._arrive(jobs[self._next_arrival])
            self._next_arrival += 1
            changed = True
        applied = False
        while heap and heap[0][0] == t and heap[0][1] == APPLY:
            _, _, seq, _, _ = heapq.heappop(heap)
            self._apply(self._in_flight.pop(seq))
            applied = True
        if heap and heap[0][0] == t:
            tick, main, bf = events.fired(t, TICK), events.fired(t, MAIN), events.fired(t, BF)
        else:
            tick = main = bf = False
        decide = (((changed and cfg.decide_on_events) or (
            tick and (self._pending or (cfg.idle_ticks and self._active))))
            and (not self._may_skip or self._worth_deciding()))
        return changed, applied, main, bf, bool(decide)

    def _end_instant(self, changed: bool, applied: bool, main: bool, bf: bool,
                     decided: bool) -> None:
        """After any decision: the scheduling pass(es), timers, checks."""
        cfg, events, now = self.cfg, self._events, self.now
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
                if not events.armed(BF):
                    events.arm(now, BF, next_cycle(now, cfg.bf_times_s, cfg.bf_phase_s,
                                                   cfg.bf_interval_s))
                if cfg.sched_interval_s > 0 and not events.armed(MAIN):
                    events.arm(now, MAIN, next_cycle(now, cfg.sched_times_s, cfg.sched_phase_s,
                                                     cfg.sched_interval_s))
        if cfg.tick_s > 0 and not events.armed(TICK) and self._active:
            events.arm(now, TICK,
                       next_tick(now, cfg.tick_s, cfg.tick_phase_s, cfg.tick_times_s))
        if cfg.audit:
            self.audit()
        # (with a cadence, the next cycle starts one; a job in a requeue step comes back)
        if (self._pending and not self._running and self._next_arrival >= len(self._jobs)
                and not self._requeuing and cfg.bf_interval_s <= 0):
            raise SimulationError(f"{len(self._pending)} pending jobs and nothing running "
                                  f"at t={self.now}: they can never start")

    def _note(self, kind: str, detail: str) -> None:
        self.notes[kind] += 1
        if len(self._note_samples) < _MAX_NOTE_SAMPLES:
            self._note_samples.append(f"t={self.now:.0f}: {kind}: {detail}")

    # -- policy ---------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """The snapshot now. Jobs in a restart's requeue step are among the pending ones, held
        (as live: requeued with a hold until the daemon releases them)."""
        queue = self._queue_in_submit_order()
        if self._requeuing:
            queue = iter(sorted([*queue, *self._requeuing], key=lambda j: j.seq))
        return self._snapshots.build(self.now, queue, self._running)

    def _queue_in_submit_order(self) -> Iterator[SimJob]:
        if not self._pending_sorted:
            self._pending = dict.fromkeys(sorted(self._pending, key=lambda j: j.seq))
            self._pending_sorted = True
        return iter(self._pending)

    def _worth_deciding(self) -> bool:
        """False when no decision could change anything, for a policy that declares what it
        may do (`Preempting`, `Resizing`; one that declares neither only orders jobs).

        With nothing pending only a resize can matter, and only of a running job the policy
        `may_resize` (a Resizing policy with none such only orders jobs). For one that only
        orders jobs, the
        order matters only when at least two jobs are pending (or one with a GPU range) and one
        of them can start now; a pure policy decides the same later, when it does matter.
        """
        if not self.cfg.skip_futile:
            return True
        if not self._pending:
            return bool(self._resizable)
        if self._preempts or self._resizable:
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

    def _take(self, decision: Decision) -> None:
        """Count a decision and apply it now, or when it reaches Slurm (decision_delay_s)."""
        self.decisions += 1
        if not isinstance(decision, Decision):
            raise SimulationError(f"policy {self.policy.name} returned {type(decision).__name__}")
        cfg, now = self.cfg, self.now
        delay = cfg.decision_delay_s
        if cfg.decision_delays_s:
            i = bisect_left(cfg.tick_times_s, now)
            if i < len(cfg.tick_times_s) and cfg.tick_times_s[i] == now:
                delay = cfg.decision_delays_s[i]
        if delay > 0:
            self._in_flight[self._events.push_apply(now + delay)] = decision
        else:
            self._apply(decision)
        if cfg.tick_s > 0 and self._active:
            self._events.arm(now, TICK,
                             next_tick(now, cfg.tick_s, cfg.tick_phase_s, cfg.tick_times_s))

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
                                  start, max_test=self.cfg.bf_max_job_test,
                                  window_s=self.cfg.will_run_window_s,
                                  origin_s=self.cfg.clock_origin_s)
        else:
            backfill.schedule(self.now, self._priority_order(), self.cluster, self._ends,
                              start, backfill=self.cfg.backfill,
                              max_test=self.cfg.bf_max_job_test, cache=self._reservations)
        for job in started:
            del self._pending[job]

    # -- a job's life cycle --------------------------------------------------------------

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
        self._events.push(now, finish, FINISH, job, job.version)
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

    def _finish(self, job: SimJob) -> None:
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

    def _drop_declined(self) -> None:
        """Remove the pending jobs the policy declined and drops (`Dropping.take_dropped`),
        before the scheduling pass: they never run and never finish."""
        assert self._dropper is not None
        for jid in self._dropper.take_dropped():
            job = self._active.get(jid)
            if job is None or job.state is not JobState.PENDING:
                self._note("drop of a job not pending", str(jid))
                continue
            del self._pending[job], self._active[jid]
            job.state, job.end = JobState.CANCELLED, self.now
            self._declined.append(DroppedJob(job_id=job.trace.id, submit=job.trace.submit,
                                              at=self.now, deadline=job.trace.deadline))

    def _requeue(self, job: SimJob) -> None:
        job.last_rate, job.last_update = job.rate, self.now
        self._stop(job)
        job.state = JobState.PENDING
        job.restarts += 1
        job.needs_delay = True
        job.version += 1  # its completion event is void
        self._pending[job] = None
        self._pending_sorted = False

    # -- a restart in steps (EngineConfig.restart_grace_s, requeue_s) -------------------

    def _signal(self, job: SimJob, gpus: int | None) -> None:
        """The checkpoint signal of a preemption (`gpus` None) or of a resize to `gpus`: the
        job keeps its GPUs and what it has done now is what survives; its requeue comes
        restart_grace_s later. Its view runs on meanwhile, as the daemon sees a signalled
        job still running and reporting progress."""
        now = self.now
        job.restart_done = job.done_at(now)
        job.restart = Restart(step=Restart.GRACE, gpus=gpus)
        job.version += 1  # its completion event is void
        # A job whose work is done before its grace is over completes then: no restart.
        at = min(now + self.cfg.restart_grace_s, self._natural_finish(job))
        i = bisect_left(self._ends, (job.planned_end, job.seq))
        del self._ends[i]  # backfill plans with the GPUs free at the requeue
        job.planned_end = at
        insort(self._ends, (at, job.seq, job))
        self._events.push(now, at, FINISH, job, job.version)

    def _restart_step(self, job: SimJob) -> None:
        """The end of a restart's grace step (the requeue: GPUs free) or of its requeue step
        (the job may start again: a preemption's queues, a resize's starts at its new count
        ahead of the queue if that fits now, else queues)."""
        restart = job.restart
        assert restart is not None
        if restart.step == Restart.GRACE:
            if self.now >= self._natural_finish(job):
                self._void_restart(job)
                self._note("restart void: the job finished in its grace step", str(job.id))
                self._finish(job)
                return
            if restart.gpus is not None and self._rules is not None:
                gpus = self._after_grace(job, restart.gpus)
                if gpus is None:
                    return
                restart = Restart(step=Restart.GRACE, gpus=gpus)
            self._requeue(job)
            job.done = job.restart_done  # no progress in the grace step
            if self.cfg.requeue_s > 0:
                del self._pending[job]
                self._requeuing[job] = None
                job.restart = Restart(step=Restart.REQUEUE, gpus=restart.gpus)
                self._events.push(self.now, self.now + self.cfg.requeue_s, FINISH, job,
                                  job.version)
                return
        else:
            del self._requeuing[job]
            self._pending[job] = None
            self._pending_sorted = False
            job.view = None  # (it was shown held)
        job.restart = None
        if restart.gpus is None:
            return
        job.gpus = restart.gpus
        job.view = None
        alloc = self.cluster.place(job.gpus)
        if alloc is None:
            self._note("resized job waits for its new GPUs", f"{job.id} -> {job.gpus}")
            return
        del self._pending[job]
        self._start(job, alloc)

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
        for job in self._requeuing:
            assert job.state is JobState.PENDING and not job.alloc, f"{job.id} bad requeue state"
            assert job not in self._pending, f"{job.id} pending while requeued"
        assert len(self._pending) + len(self._running) + len(self._requeuing) == len(
            self._active), "active set drift"

    # -- applying a decision --------------------------------------------------------------

    def _apply(self, d: Decision) -> None:
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
            if job.restart is not None:
                self._note("preempt of a job already restarting", str(p.job_id))
                continue
            if self._rules is not None and (why := self._rules.refused(job, None, self.now)):
                self._note(f"preempt refused by the restart rules: {why}", str(p.job_id))
                continue
            self._restarted(job)
            self.preemptions += 1
            if self.cfg.stepped_restarts:
                self._signal(job, None)
            else:
                self._requeue(job)
        self._restart_wants.clear()  # what this decision asks of jobs in their grace step
        for r in sorted(d.resizes, key=lambda r: (r.gpus - self._gpus_of(r.job_id), r.job_id)):
            self._resize(r.job_id, r.gpus)
        for old in self._ranked:
            old.rank = None
        ranked: list[SimJob] = []
        for o in d.order:
            job = active.get(o.job_id)
            if job is None or job.state is not JobState.PENDING or job in self._requeuing:
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

    def _gpus_of(self, job_id: JobId) -> int:
        job = self._active.get(job_id)
        return job.gpus if job else 0

    def _clamp(self, job: SimJob, gpus: int, what: str) -> int | None:
        rng = gpu_range(job, self.cfg.capacity)
        if rng is None:
            self._note(f"{what} for a job without a GPU range", f"{job.id} -> {gpus}")
            return None
        new = min(max(gpus, rng[0]), rng[1])
        if new != gpus:
            self._note(f"{what} clamped to the job's GPU range", f"{job.id}: {gpus} -> {new}")
        return new

    def _set_gpus(self, job: SimJob, gpus: int) -> None:
        new = self._clamp(job, gpus, "GPU count")
        if new is not None and new != job.gpus:
            job.gpus = new
            job.view = None

    def _resize(self, job_id: JobId, gpus: int) -> None:
        job = self._active.get(job_id)
        if job is None or job.state is not JobState.RUNNING:
            self._note("resize of a job not running", str(job_id))
            return
        if job.intent is None or not job.intent.elastic:
            self._note("resize of a job that is not elastic", str(job_id))
            return
        if job.restart is not None:
            self._note("resize of a job already restarting", str(job_id))
            if self._rules is not None and job.restart.step == Restart.GRACE:
                self._restart_wants[job] = gpus
            return
        new = self._clamp(job, gpus, "resize")
        if new is None or new == job.gpus:
            return
        if self._rules is not None and (why := self._rules.refused(job, new, self.now)):
            self._note(f"resize refused by the restart rules: {why}", f"{job_id} -> {new}")
            return
        self.cluster.give(job.alloc)
        alloc = self.cluster.place(new)
        self.cluster.take(job.alloc)
        if alloc is None:
            self._note("resize does not fit", f"{job_id}: {job.gpus} -> {new}")
            return
        self._restarted(job)
        self.resizes += 1
        if self.cfg.stepped_restarts:
            self._signal(job, new)
            return
        self._requeue(job)
        del self._pending[job]
        job.gpus = new
        self._start(job, alloc)

    def _natural_finish(self, job: SimJob) -> float:
        """When the running `job` completes if nothing stops it."""
        left = job.total - job.done
        return job.progress_from + (left / job.rate if left > 0 and job.rate > 0 else 0.0)

    def _void_restart(self, job: SimJob) -> None:
        """A restart in its grace step that does not happen after all: no longer counted."""
        restart = job.restart
        assert restart is not None
        if self._rules is not None:
            self._rules.unmade(job.id)
        if restart.gpus is None:
            self.preemptions -= 1
        else:
            self.resizes -= 1
        job.restart = None

    def _after_grace(self, job: SimJob, signalled: int) -> int | None:
        """A resize at the end of its grace step, judged again as the daemon does then (the
        GPUs or the gain may have gone): the count the policy asks for now if that passes the
        rules, else the signalled one if that still does; None when neither does, and then
        the restart is dropped: the job runs on, with the steps it made meanwhile (it only
        checkpointed)."""
        rules = self._rules
        assert rules is not None  # (only the rules judge a resize again)
        rules.unmade(job.id)  # this restart: judged again as if not made
        want = self._restart_wants.pop(job, None)
        reasons: list[str] = []
        for gpus in ([want] if want is not None and want != signalled else []) + [signalled]:
            new = self._clamp(job, gpus, "resize")
            if new is None or new == job.gpus:
                reasons.append("already at that count")
                continue
            self.cluster.give(job.alloc)
            fits = self.cluster.place(new) is not None
            self.cluster.take(job.alloc)
            why = rules.refused(job, new, self.now) if fits else "does not fit"
            if not why:
                self._restarted(job)
                return new
            reasons.append(why)
        self._note(f"resize dropped after the signal: {reasons[0]}", f"{job.id} -> {signalled}")
        self.resizes -= 1  # not made (the cap's log lost it above)
        job.restart = None
        i = bisect_left(self._ends, (job.planned_end, job.seq))
        del self._ends[i]
        job.planned_end = job.run_start + job.limit_at(job.gpus)
        insort(self._ends, (job.planned_end, job.seq, job))
        job.version += 1
        self._events.push(self.now, max(self.now, self._natural_finish(job)), FINISH, job,
                          job.version)
        return None

    def _restarted(self, job: SimJob) -> None:
        """A restart made: counted against the hourly cap (only one that happened counts: a
        resize that passed the rules may still not fit)."""
        if self._rules is not None:
            self._rules.made(job.id, self.now)
