"""The discrete-event engine: a trace, a policy and a cluster in; per-job records out.

Events are a heap of (time, priority, seq, ...): at one time, completions come before arrivals
(arrivals stream from the sorted trace), then policy ticks. All events at one time are handled
together, then the policy is asked once (`decide`), its Decision applied, and one scheduling
pass (priority order + EASY backfill, see `backfill.py`) starts what can start. The loop is
split SimPy-style: `step()` runs to the next decision point and returns it, `apply()` answers
it, `run(until)` is built on the two (a gym environment steps it: slurm_rl/rl/env.py).
Nothing here draws random numbers except the choice of jobs made elastic (`elastic_fraction`),
which is seeded.

How a Decision is applied (`apply.py`): preemptions, then resizes, then the order and GPU
counts of pending jobs. The daemon applies all four too: priorities and pending jobs' GPU
counts, and resizes and preemptions of running jobs that opted in with `--rl-elastic`, by
requeueing them (daemon/resize.py, daemon/preempt.py; docs/daemon.md); here a resize or a
preemption is the model of that requeue (`restart_rules` adds the daemon's own rules).
Snapshots and the oracle are built in `snapshots.py`, the scheduling passes in `backfill.py`
and `conservative.py`, a job's life cycle in `lifecycle.py`, the event heap and timers in
`timers.py`.

The policy's declared capabilities (`slurm_rl.policies.capabilities`) are checked with
isinstance: a `Stateful` one is `reset()` at the start of a run (and by `Simulator.reset`),
an `OracleReading` one gets the engine's `Oracle` (true durations, never part of a snapshot),
and Preempts or Resizes from a policy that is not `Preempting` or `Resizing` stop the run
(`SimulationError`): calls it could not change anything with are skipped (`skip_futile`),
which is exact only if it declares what it may do; there, a `Gated` policy's own `futile` skips
it too. An `Observing` policy is asked at every event.

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
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, Policy
from slurm_rl.policies.capabilities import (
    CycleState,
    Gated,
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
from slurm_rl.sim.lifecycle import FINISH as _FINISH
from slurm_rl.sim.lifecycle import JobLifecycle
from slurm_rl.sim.results import Interval, JobRecord, SimResult, SimulationError
from slurm_rl.sim.snapshots import SimOracle, SnapshotBuilder
from slurm_rl.sim.timers import Timers
from slurm_rl.sim.trace import TraceJob

_APPLY, _TICK, _MAIN, _BF = 1, 2, 3, 4
"""Event kinds after completions (`_FINISH`, 0): the order of events at one time."""
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


class Simulator(ApplyDecisions, JobLifecycle, Timers):
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
                          and config.decision_delay_s == 0 and not isinstance(policy, Observing))
        self._gated: Gated | None = (policy if self._may_skip and isinstance(policy, Gated)
                                     else None)
        self._init_state()

    def _init_state(self) -> None:
        config = self.cfg
        self.cluster = Cluster(config.nodes, config.gpus_per_node,
                               placement=config.placement, cpus_per_node=config.cpus_per_node)
        self.now = -math.inf
        self._jobs, self.dropped = make_jobs(self._trace, config)
        self._heap: list[tuple[float, int, int, SimJob | None, int]] = []
        self._seq = itertools.count()
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
        self._armed: dict[int, float | None] = {_TICK: None, _MAIN: None, _BF: None}
        """Per timer kind (policy tick, main scheduler, backfill): when it is due next (None:
        not armed). An event of that kind at another time is stale and ignored."""
        self._restart_log: dict[JobId, list[float]] = {}
        """With restart_rules: each job's restart times within the last hour (the cap)."""
        self._in_flight: dict[int, Decision] = {}
        """Decisions made but not yet applied (decision_delay_s), by event seq."""
        self._snapshots = SnapshotBuilder(self.cluster, config.nodes, config.gpus_per_node)
        self._records: dict[int, JobRecord] = {}
        self._intervals: list[Interval] = []
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
        return min(self._heap[0][0] if self._heap else math.inf, t_arr)

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
            self._end_instant(changed, applied, main, bf, False)

    def apply(self, decision: Decision) -> None:
        """Answer the decision point `step` returned, and finish its instant (the scheduling
        pass that starts what can start)."""
        instant = self._instant
        if instant is None:
            raise SimulationError("apply() without a decision point (call step() first)")
        self._instant = None
        self._take(decision)
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
            jobs=tuple(self._records[j.seq] for j in self._jobs),
            intervals=tuple(self._intervals), dropped=self.dropped, decisions=self.decisions,
            preemptions=self.preemptions, resizes=self.resizes, notes=dict(self.notes),
            note_samples=tuple(self._note_samples), wall_s=time.perf_counter() - self._wall)

    # -- one instant ----------------------------------------------------------------------

    def _advance(self, t: float) -> tuple[bool, bool, bool, bool, bool]:
        """Move the clock to t and handle its events: completions, arrivals, decisions due
        (decision_delay_s), timers. Returns (changed, applied, main, bf, decide)."""
        jobs, heap, cfg = self._jobs, self._heap, self.cfg
        if t < self.now:
            raise SimulationError(f"clock went back from {self.now} to {t}")
        if self._active:
            self.job_s += len(self._active) * (t - self.now)
        self.now = t
        changed = False
        while heap and heap[0][0] == t and heap[0][1] == _FINISH:
            _, _, _, job, version = heapq.heappop(heap)
            assert job is not None
            if job.version == version and job.state is JobState.RUNNING:
                self._finish(job)
                changed = True
        n = len(jobs)
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
        decide = (((changed and cfg.decide_on_events) or (
            tick and (self._pending or (cfg.idle_ticks and self._active))))
            and (not self._may_skip or self._worth_deciding()))
        return changed, applied, main, bf, bool(decide)

    def _end_instant(self, changed: bool, applied: bool, main: bool, bf: bool,
                     decided: bool) -> None:
        """After any decision: the scheduling pass(es), timers, checks."""
        cfg = self.cfg
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
        if (self._pending and not self._running and self._next_arrival >= len(self._jobs)
                and cfg.bf_interval_s <= 0):  # with a cadence, the next cycle starts one
            raise SimulationError(f"{len(self._pending)} pending jobs and nothing running "
                                  f"at t={self.now}: they can never start")

    def _note(self, kind: str, detail: str) -> None:
        self.notes[kind] += 1
        if len(self._note_samples) < _MAX_NOTE_SAMPLES:
            self._note_samples.append(f"t={self.now:.0f}: {kind}: {detail}")

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
