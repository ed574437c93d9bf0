"""Simulator settings: one frozen dataclass per component, built from TOML tables that reject
unknown keys by name and values of the wrong type."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from slurm_rl.sim.cluster import BEST_FIT, PLACEMENTS
from slurm_rl.sim.tsafrir import DEFAULT_BINS, HEAD_SHARE, histogram, uniform


class TimeLimitModel(StrEnum):
    """How a trace job without a time limit of its own gets one."""

    FACTOR = "factor"
    """A multiple of the job's run time, rounded up (the default)."""
    FIXED = "fixed"
    """One limit for every job."""
    TSAFRIR = "tsafrir"
    """Round values as users pick them (Tsafrir, Etsion & Feitelson, JSSPP 2005):
    `sim/tsafrir.py`."""


WEEK_S = 7 * 86400.0


@dataclass(frozen=True, kw_only=True)
class TimeLimitEstimate:
    """The Slurm time limit given to trace jobs that have none (ITP and Philly traces).

    Backfill plans with time limits, as slurmctld does, so the limit matters. `model`:
    - "factor" (the default): twice the run time rounded up to a whole hour: a 40-minute job
      gets 2 h, an 8-hour job 16 h. `factor = 1` and `round_up_s = 0` plan with true
      durations. A limit read this way tells a policy the run time almost exactly.
    - "fixed": `fixed_s` for every job (as the sim-to-real replays do); `fixed_s` alone
      chooses this model.
    - "tsafrir": the round values users ask for, drawn per job with the engine's seed from
      the model of Tsafrir, Etsion & Feitelson (`sim/tsafrir.py`): a fifth of the jobs ask
      for the partition's maximum `max_s`, most of the rest for one of 19 other round values,
      always at least the run time.
    Jobs are never killed at their limit: the trace says how long they ran; a job past its
    limit is planned as ending now.
    """

    model: TimeLimitModel = TimeLimitModel.FACTOR
    """factor, fixed or tsafrir."""
    factor: float = 2.0
    """factor: multiple of the job's run time (at its trace GPU count)."""
    round_up_s: float = 3600.0
    """factor: round the limit up to a multiple of this (0: no rounding)."""
    fixed_s: float | None = None
    """fixed: one limit for every job."""
    min_s: float = 60.0
    """Smallest limit (Slurm's limits are whole minutes)."""
    max_s: float = WEEK_S
    """tsafrir: the partition's maximum limit (whole seconds, at least an hour). A job that
    ran longer asks for its run time rounded up to a whole hour."""
    bins: int = DEFAULT_BINS
    """tsafrir: distinct values users ask for, 20 popular ones included (the paper's count
    for a log of 10,000 jobs)."""
    max_share: float | None = None
    """tsafrir: share of jobs asking for the maximum (None: the model's, 0.217)."""

    KEYS: ClassVar[dict[TimeLimitModel, tuple[str, ...]]] = {
        TimeLimitModel.FACTOR: ("factor", "round_up_s", "min_s"),
        TimeLimitModel.FIXED: ("fixed_s",),
        TimeLimitModel.TSAFRIR: ("max_s", "bins", "max_share", "min_s"),
    }
    """The settings each model reads (besides `model`)."""

    def __post_init__(self) -> None:
        try:
            model = TimeLimitModel(self.model)
        except ValueError:
            raise ValueError(f"model: unknown time-limit model {self.model!r} (valid: "
                             f"{', '.join(m.value for m in TimeLimitModel)})") from None
        if model is TimeLimitModel.FACTOR and self.fixed_s is not None:
            model = TimeLimitModel.FIXED
        object.__setattr__(self, "model", model)
        if self.factor <= 0 or self.round_up_s < 0 or self.min_s < 0:
            raise ValueError(f"bad time-limit estimate {self}")
        if self.fixed_s is not None and self.fixed_s <= 0:
            raise ValueError(f"fixed_s must be positive, got {self.fixed_s}")
        if model is TimeLimitModel.FIXED and self.fixed_s is None:
            raise ValueError("model fixed needs fixed_s (the limit in seconds)")
        if not (math.isfinite(self.max_s) and self.max_s >= 3600
                and float(self.max_s).is_integer()):
            raise ValueError(f"max_s must be whole seconds, at least 3600, got {self.max_s}")
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 1:
            raise ValueError(f"bins must be a whole number of at least 1, got {self.bins!r}")
        if self.max_share is not None and not 0 < self.max_share < HEAD_SHARE:
            raise ValueError(f"max_share must be more than 0 and less than {HEAD_SHARE} (the "
                             f"share of the 20 popular values), got {self.max_share}")

    def for_duration(self, duration: float) -> float:
        """The limit of a job of this run time, for the models that read nothing else
        (factor, fixed)."""
        if self.model is TimeLimitModel.FIXED:
            assert self.fixed_s is not None
            return self.fixed_s
        if self.model is not TimeLimitModel.FACTOR:
            raise ValueError(f"the {self.model.value} model draws per job: use for_job")
        limit = self.factor * duration
        if self.round_up_s > 0:
            limit = math.ceil(limit / self.round_up_s - 1e-9) * self.round_up_s
        return max(limit, self.min_s)

    def for_job(self, duration: float, key: str, seed: int) -> float:
        """The limit of a job of this run time; `key` names the job in its trace and, with
        the seed, draws its value under the tsafrir model (the same in every run)."""
        if self.model is not TimeLimitModel.TSAFRIR:
            return self.for_duration(duration)
        hist = histogram(max_s=int(self.max_s), bins=self.bins, head_share=HEAD_SHARE,
                         max_share=self.max_share, seed=seed)
        limit = hist.draw(duration, uniform(seed, key))
        if limit is None:  # ran longer than the maximum: the partition allowed it
            limit = math.ceil(duration / 3600.0 - 1e-9) * 3600.0
        return max(limit, self.min_s)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """How the simulated cluster and its slurmctld behave."""

    nodes: int
    gpus_per_node: int
    tick_s: float = 60.0
    """Call the policy at least this often while jobs are pending (0: only at events)."""
    idle_ticks: bool = False
    """Also call the policy on ticks when no job is pending. Off by default: with an empty
    queue an order changes nothing, and every arrival and completion calls the policy anyway."""
    decide_on_events: bool = True
    """Call the policy at every arrival/completion (coalesced per timestamp). False models
    the daemon's fixed poll cycle: decisions only on ticks."""
    tick_phase_s: float | None = None
    """Put ticks on a fixed grid, tick_phase_s + k x tick_s (trace seconds), as the daemon's
    fixed-rate cycle falls. None: a tick comes tick_s after the decision or event before it."""
    tick_times_s: tuple[float, ...] = ()
    """Explicit tick instants (trace seconds, ascending), e.g. the daemon's cycles read from
    its log (a fixed-rate cycle moves its phase whenever one cycle overruns); the grid or
    tick_s takes over after the last one."""
    decision_delay_s: float = 0.0
    """Time from the snapshot a decision is made on to the moment Slurm has it (the daemon's
    poll + decide + act). Jobs may start, end or arrive in between; entries that no longer
    apply are ignored (counted in notes)."""
    decision_delays_s: tuple[float, ...] = ()
    """Per explicit tick (as many as tick_times_s), that tick's own decision delay, e.g. each
    of the daemon's cycles as its log times it: a median delay lands some decisions a few ms
    after a Slurm pass they beat live (or before one they missed), and every later decision
    then differs. Other ticks use decision_delay_s."""
    skip_futile: bool = True
    """Skip decide() calls that can not change anything, by what the policy declares it may do
    (slurm_rl.policies.capabilities: not Preempting, not Observing, and Resizing only while a
    running job is one it `may_resize`): see
    Simulator._worth_deciding. Exact for pure policies; a large saving on big traces. Only
    with decide_on_events and no decision_delay_s: on a fixed cycle a skipped call would leave
    the previous ranks in force until the next tick."""
    # A restart's three steps. The defaults are a live restart (docs/sim-to-real.md, "What a
    # restart costs, step by step"; measured by benchmarks/calibrate_restart.py): the daemon's
    # default grace, Slurm's part as measured on the test cluster, and a restore that a real
    # training job's framework start makes longer than the measured toy job's.
    restart_delay_s: float = 30.0
    """The restore step of a restart: once a requeued or resized job runs again, the time it
    holds its GPUs and makes no progress (starting its framework, reading its checkpoint). A
    restart model's `restore_s` (`restart_model.py`). 30 s: the toy job measured 0.06-2.2 s,
    a lower bound for a job that imports a framework and initialises CUDA. With the two steps
    before it at 0 this is the whole restart (the one-step model)."""
    restart_grace_s: float = 60.0
    """The grace step: from the checkpoint signal to the requeue ([resize] grace_s live, 60 s
    by default), the job holds its GPUs and makes no progress (it checkpoints at the signal;
    what it computes after that is lost at the requeue). A preemption or a resize is decided at
    the signal; the requeue follows this much later. 0: the requeue at once."""
    requeue_s: float = 0.9
    """The requeue step: from the requeue (GPUs free) to the moment the job may start again
    (slurmctld's requeue, the daemon's release with StartTime=now+1, the next scheduling pass
    on an empty cluster: 0.8-0.9 s measured). Queueing behind other jobs comes on top, modelled
    as ever; meanwhile the job is shown pending and held, as live. 0: the job is pending (a
    preemption) or restarted at its new count (a resize) at once."""
    restart_rules: bool = True
    """Apply a policy's preemptions and resizes as the daemon does live (daemon/resize.py,
    preempt.py), not every one that fits: only jobs that opted in to restarts are restarted
    (`--rl-elastic` live: a trace's `elastic` column, `elastic_fraction`, `opt_in_fraction`);
    a grow must save more predicted run time than the restart costs (`restart_cost_s`: the
    three steps together; the daemon's restart_cost_s) and a shrink is not made on a job
    predicted to finish within it (`policies/restart_gate.py`, from the view the policy sees:
    no oracle); at most max_restarts_per_hour restarts a job in any hour. Refusals are counted
    in notes. Not modelled: the daemon judging again at the end of the grace step (here a
    signalled restart always goes ahead). On by default: a simulation shows what the daemon
    would do. False ("free restarts"): every running job may be restarted whenever the policy
    asks, which no live cluster does; an evaluation run that way says so."""
    max_restarts_per_hour: int = 2
    """With restart_rules: the daemon's [resize] max_per_hour (resizes and preemptions
    together; 0: never restart a running job)."""
    launch_delay_s: float = 0.0
    """Time from Slurm's start of a job to its first instruction (prolog, slurmd, step launch),
    paid at every start with the GPUs held. About 0.03 s on the test cluster."""
    backfill: bool = True
    """EASY backfill; False: strict priority order (the main scheduler alone)."""
    conservative: bool = False
    """With backfill: give every job that backfill examines a reservation, as slurmctld's
    backfill scheduler does (`sim/conservative.py`), instead of protecting only the top blocked
    job (EASY). This is what reproduced the test cluster's start order (docs/sim-to-real.md)."""
    placement: str = BEST_FIT
    """Node choice: "best-fit" (fewest free GPUs that hold the job; fast) or "cons_tres"
    (Slurm 22.05's select/cons_tres choice, measured on the test cluster; O(nodes) per
    placement). See `sim/cluster.py`."""
    cpus_per_node: int | None = None
    """CPUs per node for "cons_tres" placement (each job takes one per node; default
    2 x gpus_per_node)."""
    bf_max_job_test: int = 500
    """Jobs below the top blocked one that backfill examines per pass (Slurm's default
    bf_max_job_test; 0: no limit)."""
    bf_interval_s: float = 0.0
    """slurmctld's cadence. 0 (the default): a full scheduling pass (main scheduler, then
    backfill) at every event. > 0: backfill, which may start any job that delays no higher
    one, runs only every bf_interval_s, at bf_phase_s + k x bf_interval_s; the main scheduler
    (priority order, stopping at the first job that does not fit) runs on its own cycle
    (sched_interval_s), or at every event if that is 0. Measured on the test cluster
    (slurmctld.log, bf_interval=1, sched_interval=1): new jobs, new priorities and freed GPUs
    all wait for the next cycle of one or the other; nothing starts at submission."""
    bf_phase_s: float = 0.0
    """Where the backfill cycles fall (trace seconds, modulo bf_interval_s)."""
    sched_interval_s: float = 0.0
    """The main scheduler's cycle (with bf_interval_s > 0); 0: at every event."""
    sched_phase_s: float = 0.0
    """Where the main scheduler's cycles fall (trace seconds, modulo sched_interval_s)."""
    will_run_window_s: float = 0.0
    """With conservative backfill: plan a job that cannot start now as slurmctld's will-run
    test does, freeing running jobs in batches (from the first end rounded up to a multiple of
    this window, all that end within it; the window doubling each batch) and starting the job
    at the last end of the batch that makes it fit (`conservative.will_run_batches`). 30 in
    Slurm 22.05; 0 (the default): each running job frees its GPUs at its own end."""
    clock_origin_s: float = 0.0
    """Epoch time of trace second 0, for what slurmctld counts on the wall clock: whole-second
    job end times and the alignment of the will-run windows."""
    bf_times_s: tuple[float, ...] = ()
    sched_times_s: tuple[float, ...] = ()
    """Explicit cycle instants (trace seconds, ascending), e.g. read from a real slurmctld's
    debug log; the grids take over after the last one."""
    time_limit: TimeLimitEstimate = field(default_factory=TimeLimitEstimate)
    elastic_fraction: float = 0.0
    """Share of jobs (drawn with the seed) made elastic with GPU range 1..elastic_max_gpus,
    for traces that carry no range of their own."""
    elastic_max_gpus: int = 64
    opt_in_fraction: float = 0.0
    """Share of jobs (drawn with the seed) that opted in to restarts at their own GPU count
    (`--rl-elastic` without a range: they checkpoint, so the daemon may requeue them). With
    restart_rules only these, the jobs made elastic (`elastic_fraction`) and the jobs a trace
    marks elastic are ever preempted or resized; how many users opt in is a scenario's
    choice. 0 (the default): a trace's own jobs as they are."""
    seed: int = 0
    audit: bool = False
    """Check the whole cluster state after every event (slow; tests turn it on). Cheap
    invariants are always checked."""

    def __post_init__(self) -> None:
        if self.nodes <= 0 or self.gpus_per_node <= 0:
            raise ValueError(f"need nodes and gpus_per_node > 0, got {self.nodes} x "
                             f"{self.gpus_per_node}")
        if not 0 <= self.max_restarts_per_hour <= 60:
            raise ValueError(f"max_restarts_per_hour must be 0..60, got "
                             f"{self.max_restarts_per_hour}")
        if self.tick_s < 0 or self.restart_delay_s < 0 or self.bf_max_job_test < 0:
            raise ValueError("tick_s, restart_delay_s and bf_max_job_test must be >= 0")
        for name in ("restart_delay_s", "restart_grace_s", "requeue_s", "will_run_window_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be >= 0 and finite, got {getattr(self, name)}")
        if not math.isfinite(self.clock_origin_s):
            raise ValueError(f"clock_origin_s must be finite, got {self.clock_origin_s}")
        if not 0 <= self.launch_delay_s < math.inf:
            raise ValueError(f"launch_delay_s must be >= 0, got {self.launch_delay_s}")
        if not 0 <= self.decision_delay_s < math.inf:
            raise ValueError(f"decision_delay_s must be >= 0, got {self.decision_delay_s}")
        if self.decision_delays_s and len(self.decision_delays_s) != len(self.tick_times_s):
            raise ValueError(f"decision_delays_s: {len(self.decision_delays_s)} delays for "
                             f"{len(self.tick_times_s)} tick_times_s")
        if not all(0 <= d < math.inf for d in self.decision_delays_s):
            raise ValueError("decision_delays_s must be >= 0")
        if self.tick_phase_s is not None and self.tick_s <= 0:
            raise ValueError("tick_phase_s needs tick_s > 0")
        if not (0 <= self.bf_interval_s < math.inf and 0 <= self.sched_interval_s < math.inf):
            raise ValueError("bf_interval_s and sched_interval_s must be >= 0")
        if self.tick_times_s and self.tick_s <= 0:
            raise ValueError("tick_times_s needs tick_s > 0 (the ticks after the last instant)")
        for name in ("bf_times_s", "sched_times_s", "tick_times_s"):
            times = tuple(float(t) for t in getattr(self, name))
            if list(times) != sorted(times):
                raise ValueError(f"{name} must be ascending")
            object.__setattr__(self, name, times)
        if self.bf_times_s and self.bf_interval_s <= 0 or (
                self.sched_times_s and self.sched_interval_s <= 0):
            raise ValueError("bf_times_s / sched_times_s need bf_interval_s / sched_interval_s "
                             "> 0 (the grid after the last instant)")
        if self.sched_interval_s > 0 and self.bf_interval_s <= 0:
            raise ValueError("sched_interval_s needs bf_interval_s > 0 (with bf_interval_s = 0 "
                             "every event runs a full pass)")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, "
                             f"got {self.placement!r}")
        if self.cpus_per_node is not None and self.cpus_per_node < self.gpus_per_node:
            raise ValueError(f"cpus_per_node ({self.cpus_per_node}) must be >= gpus_per_node "
                             f"({self.gpus_per_node})")
        if not self.decide_on_events and self.tick_s <= 0:
            raise ValueError("decide_on_events = false needs tick_s > 0")
        if not 0.0 <= self.elastic_fraction <= 1.0:
            raise ValueError(f"elastic_fraction must be in [0, 1], got {self.elastic_fraction}")
        if not 0.0 <= self.opt_in_fraction <= 1.0:
            raise ValueError(f"opt_in_fraction must be in [0, 1], got {self.opt_in_fraction}")
        if self.elastic_max_gpus <= 0:
            raise ValueError("elastic_max_gpus must be positive")

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def restart_cost_s(self) -> float:
        """Run time a restart costs a job: grace, requeue and restore together."""
        return self.restart_grace_s + self.requeue_s + self.restart_delay_s

    @property
    def stepped_restarts(self) -> bool:
        """Whether restarts go through the grace and requeue steps (else they are immediate,
        with the restore delay alone)."""
        return self.restart_grace_s > 0 or self.requeue_s > 0

    def restarts_line(self) -> str:
        """How running jobs are restarted, in one line for a report: whose, how often and at
        what cost."""
        steps = (f"grace {self.restart_grace_s:g} s, requeue {self.requeue_s:g} s, restore "
                 f"{self.restart_delay_s:g} s")
        if not self.restart_rules:
            return (f"restarts free: any running job, whenever the policy asks (not what the "
                    f"daemon does live); {steps}")
        opted = [f"{name} {share:g}" for name, share in (
            ("opt-in share", self.opt_in_fraction), ("elastic share", self.elastic_fraction))
            if share > 0]
        return ("restarts as the daemon makes them: jobs that opted in only (the trace's"
                + (", " + ", ".join(opted) if opted else "; none drawn")
                + f"), at most {self.max_restarts_per_hour} a job an hour; {steps}")


T = TypeVar("T")


def from_table(cls: type[T], table: dict[str, Any], *, where: str = "") -> T:
    """Build a config dataclass from a TOML table; unknown keys raise with the valid ones, a
    value of the wrong type for a bool, int, float or str field (or an optional one) raises
    naming the key and the value. Nested dataclass fields take nested tables."""
    label = f"[{where}] " if where else ""
    if not isinstance(table, dict):
        raise ValueError(f"{label}must be a table, got {describe_value(table)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ValueError(f"{label}unknown key(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(sorted(fields))})")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key == "time_limit" and isinstance(value, dict):
            value = time_limit_from_table(
                value, label=f"[{where}.time_limit] " if where else "[time_limit] ")
        else:
            _check_type(f"{label}{key}", hints.get(key), value)
        kwargs[key] = value
    return cls(**kwargs)


def time_limit_from_table(table: object, *, label: str) -> TimeLimitEstimate:
    """A time_limit table (`{ model = "tsafrir", max_s = 172800 }`), its model's keys only: a
    key another model reads is refused, so that a setting never silently does nothing.
    Errors start with `label` ("[engine.time_limit] ")."""
    if not isinstance(table, dict):
        raise ValueError(f"{label}must be a table, got {describe_value(table)}")
    try:
        est = from_table(TimeLimitEstimate, table)
    except ValueError as exc:
        raise ValueError(f"{label}{exc}") from None
    valid = ("model", *TimeLimitEstimate.KEYS[est.model])
    stray = sorted(set(table) - set(valid))
    if stray:
        raise ValueError(f"{label}{', '.join(stray)} not read by model {est.model.value} "
                         f"(its keys: {', '.join(valid)})")
    return est


_SCALARS: dict[Any, str] = {bool: "true or false", int: "an integer", float: "a number",
                            str: "a string"}


def _check_type(key: str, hint: Any, value: Any) -> None:
    """ValueError unless `value` fits a scalar `hint` (an int is a number; a bool is neither);
    other hints (tuples, nested tables) are the dataclass's to check."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return
        hint = rest[0]
    if hint not in _SCALARS:
        return
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"{key}: expected {_SCALARS[hint]}, got {describe_value(value)}")


def describe_value(value: Any) -> str:
    """A TOML value for an error message: its kind and (a cut) repr, "a string ('ten')"."""
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} ({text if len(text) <= 40 else text[:37] + '...'})"
