"""Building the core views cheaply: snapshots are rebuilt at every event for every active job,
which is the simulator's hottest path.

The speed tricks of the simulator live here, behind the public types (a policy sees a
`ClusterSnapshot` of `JobView`s and `NodeView`s and can not tell), each checked at import
against the real constructors (`_probe`) and kept because removing it costs measurable time
(benchmarks/bench_sim.py):
- `fast` fills a frozen dataclass's __dict__ without running its generated __init__ (about 6x
  cheaper; views are built for every active job at every event);
- a running job's view is a `RunningView`, a JobView whose time-dependent fields are properties
  computed on first read from the run's parameters frozen at snapshot time (a policy that never
  reads them never pays);
- running views are made in bulk (`running_views`: the __dict__ and slot descriptors mapped
  over the run set in C, no Python loop);
- `SimSnapshot` builds the running jobs' views only when a policy reads them, and shares one
  `RunningSet` (with its ids, worked out once) among the snapshots taken while nothing starts
  or ends.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, NamedTuple

from slurm_rl.core import ClusterSnapshot, JobId, JobState, JobView, NodeState, NodeView, Progress

_new = object.__new__
_set = object.__setattr__


def fast(cls: type, values: dict[str, Any]) -> Any:
    """Build a plain frozen dataclass from `values`, which must name every field."""
    obj: Any = _new(cls)
    obj.__dict__.update(values)
    return obj


def defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


JOB_DEFAULTS = defaults(JobView)
NODE_DEFAULTS = defaults(NodeView)
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobView))


class Run(NamedTuple):
    """A run's parameters, fixed from its start to its end."""

    run_start: float
    progress_from: float
    """run_start plus any restart delay: no progress before this."""
    rate: float
    """Steps per second."""
    done: float
    """Steps done at the run's start."""
    attained: float
    """GPU-seconds received before this run."""
    gpus: int
    total: float
    steps_total: int | None
    """The trace's iteration count (None: the job reports no progress)."""


def _done(run: Run, now: float) -> float:
    if now > run.progress_from:
        return min(run.total, run.done + (now - run.progress_from) * run.rate)
    return run.done


def _attained(run: Run, now: float) -> float:
    return run.attained + run.gpus * (now - run.run_start)


def _progress(run: Run, now: float) -> Progress | None:
    if not run.steps_total:
        return None
    return fast(Progress, {"steps_done": int(_done(run, now)), "steps_total": run.steps_total,  # type: ignore[no-any-return]
                           "rate": run.rate, "updated_at": now})


def _predicted(run: Run, now: float) -> float | None:
    if not run.steps_total or run.rate <= 0:
        return None
    return (run.total - _done(run, now)) / run.rate


def _get_attained(self: RunningView) -> Any:
    """_lazy's getter for attained_gpu_s with _attained inlined (policies read it a lot)."""
    d = self.__dict__
    if "attained_gpu_s" in d:
        return d["attained_gpu_s"]
    run = d["_run"]
    return run.attained + run.gpus * (self._now - run.run_start)


def _get_predicted(self: RunningView) -> Any:
    """_lazy's getter for predicted_remaining_s with _predicted and _done inlined (the same
    operations in the same order: the same floats; elasticflow reads it for every running job
    at most decisions)."""
    d = self.__dict__
    if "predicted_remaining_s" in d:
        return d["predicted_remaining_s"]
    run = d["_run"]
    rate = run.rate
    if not run.steps_total or rate <= 0:
        return None
    now = self._now
    if now > run.progress_from:
        total = run.total
        done = run.done + (now - run.progress_from) * rate
        return (total - (done if done < total else total)) / rate
    return (run.total - run.done) / rate


def _lazy(name: str, compute: Callable[[Run, float], Any]) -> property:
    def get(self: RunningView) -> Any:
        d = self.__dict__
        if name in d:  # set explicitly (dataclasses.replace builds through __init__)
            return d[name]
        return compute(d["_run"], self._now)

    if compute is _attained:
        get = _get_attained
    elif compute is _predicted:
        get = _get_predicted

    def put(self: RunningView, value: Any) -> None:  # reached only from JobView.__init__
        if "_run" in self.__dict__:
            raise AttributeError(f"cannot assign to field {name!r}")
        self.__dict__[name] = value

    return property(get, put, doc=f"{name} at the snapshot's time, computed when read")


class RunningView(JobView):
    """A running job's JobView, cheap to build: every view of one run shares that run's dict of
    fixed fields (never written), and the snapshot time sits in a slot. attained_gpu_s,
    progress and predicted_remaining_s are computed from the run's parameters when read (the
    properties below stand in for those dataclass fields). Compares equal to a plain JobView
    with the same values."""

    __slots__ = ("_now",)
    _now: float

    attained_gpu_s = _lazy("attained_gpu_s", _attained)  # type: ignore[assignment]
    progress = _lazy("progress", _progress)  # type: ignore[assignment]
    predicted_remaining_s = _lazy("predicted_remaining_s", _predicted)  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobView):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _JOB_FIELDS)

    __hash__ = JobView.__hash__


# The descriptors object.__setattr__ would find, called directly (and mapped over a whole
# running set in C: about 30 % cheaper than a Python loop of __setattr__ calls).
_set_dict = next(c.__dict__["__dict__"] for c in RunningView.__mro__
                 if "__dict__" in c.__dict__).__set__
_set_now = RunningView.__dict__["_now"].__set__


def running_view(static: dict[str, Any], now: float) -> JobView:
    """`static`: the run's fixed fields plus '_run' (a Run); shared, never copied."""
    view = _new(RunningView)
    _set_dict(view, static)
    _set_now(view, now)
    return view  # type: ignore[no-any-return]


def running_views(statics: tuple[dict[str, Any], ...], now: float) -> tuple[JobView, ...]:
    """running_view(s, now) for each of `statics`."""
    views = list(map(_new, repeat(RunningView, len(statics))))
    deque(map(_set_dict, views, statics), 0)
    deque(map(_set_now, views, repeat(now)), 0)
    return tuple(views)


class SimSnapshot(ClusterSnapshot):
    """A ClusterSnapshot whose `pending` is the tuple the engine already has (the base class
    filters every job through JobState.is_pending on each call) and whose running jobs' views
    are built on first read of `running` or `jobs` (from the runs' fixed fields, captured when
    the snapshot is taken): a policy that never looks at running jobs never pays for them.
    (`jobs` is a property over the dataclass field: set only through __init__, as by
    dataclasses.replace, which builds a plain-behaving copy.)"""

    __slots__ = ("_pending", "_running", "_set")
    _pending: tuple[JobView, ...]
    _running: tuple[JobView, ...] | None
    _set: RunningSet

    @property
    def pending(self) -> tuple[JobView, ...]:
        try:
            return self._pending
        except AttributeError:  # built through __init__ (dataclasses.replace)
            return super().pending

    @property
    def running(self) -> tuple[JobView, ...]:
        try:
            running = self._running
        except AttributeError:
            return super().running
        if running is None:
            running = running_views(self._set.static, self.time)
            _set(self, "_running", running)
        return running

    @property
    def running_ids(self) -> frozenset[JobId]:
        try:
            running = self._set
        except AttributeError:
            return super().running_ids
        return running.ids()

    @property
    def running_predicted(self) -> tuple[float | None, ...]:
        try:
            running = self._set
        except AttributeError:
            return super().running_predicted
        return running.predicted(self.time)

    @property
    def running_gpus(self) -> tuple[int, ...]:
        try:
            running = self._set
        except AttributeError:
            return super().running_gpus
        return running.gpus()

    @property
    def running_attained(self) -> tuple[float, ...]:
        try:
            running = self._set
        except AttributeError:
            return super().running_attained
        return running.attained(self.time)

    @property
    def running_steps(self) -> tuple[tuple[int, float | None] | None, ...]:
        try:
            running = self._set
        except AttributeError:
            return super().running_steps
        return running.steps(self.time)

    @property
    def finished(self) -> tuple[JobView, ...]:
        if hasattr(self, "_running"):
            return ()
        return super().finished

    def _get_jobs(self) -> tuple[JobView, ...]:
        d = self.__dict__
        jobs = d.get("jobs")
        if jobs is None:
            jobs = d["jobs"] = self._pending + self.running
        return jobs  # type: ignore[no-any-return]

    def _set_jobs(self, value: tuple[JobView, ...]) -> None:  # only from __init__
        if "jobs" in self.__dict__ or hasattr(self, "_running"):
            raise AttributeError("cannot assign to field 'jobs'")
        self.__dict__["jobs"] = value

    jobs = property(_get_jobs, _set_jobs)  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterSnapshot):
            return NotImplemented
        return (self.time, self.jobs, self.nodes) == (other.time, other.jobs, other.nodes)

    __hash__ = ClusterSnapshot.__hash__


_get_id = operator.itemgetter("id")
_get_run = operator.itemgetter("_run")
_get_gpus = operator.itemgetter("gpus")


class _Moving(NamedTuple):
    """The fields of a running set's views that move with the clock, at `now`."""

    now: float
    predicted: tuple[float | None, ...]
    steps: tuple[tuple[int, float] | None, ...]
    attained: tuple[float, ...]


class RunningSet:
    """The running jobs' fixed fields (each plus '_run', see `running_view`; shared, never
    written), as the engine has them between two starts or ends, and their ids once asked.

    `derive` (optional): the previous set's ids, the ids stopped since and the fixed fields of
    the runs started since; then the ids are that set less the stopped plus the started (a copy
    of a set, about 3x cheaper than hashing every id again)."""

    __slots__ = ("_derive", "_gpus", "_ids", "_moving", "_runs", "static")

    def __init__(self, static: tuple[dict[str, Any], ...],
                 derive: tuple[frozenset[JobId], list[JobId], list[dict[str, Any]]] | None = None
                 ) -> None:
        self.static = static
        self._ids: frozenset[JobId] | None = None
        self._derive = derive
        self._runs: tuple[Run, ...] | None = None
        self._gpus: tuple[int, ...] | None = None
        self._moving: _Moving | None = None

    def predicted(self, now: float) -> tuple[float | None, ...]:
        """predicted_remaining_s of each run's view at `now` (_get_predicted's operations, in
        its order: the same floats)."""
        return self._at(now).predicted

    def steps(self, now: float) -> tuple[tuple[int, float] | None, ...]:
        """(steps_done, rate) of each run's view's progress at `now` (_progress's operations),
        None where it reports none."""
        return self._at(now).steps

    def attained(self, now: float) -> tuple[float, ...]:
        """attained_gpu_s of each run's view at `now` (_get_attained's operations)."""
        return self._at(now).attained

    def _at(self, now: float) -> _Moving:
        """The moving fields of every run at `now`, worked out in one pass and kept for the
        latest `now` (a decision reads them several times at one instant)."""
        at = self._moving
        if at is not None and at.now == now:
            return at
        runs = self._runs
        if runs is None:
            runs = self._runs = tuple(map(_get_run, self.static))
        predicted: list[float | None] = []
        steps: list[tuple[int, float] | None] = []
        attained: list[float] = []
        put_p, put_s, put_a = predicted.append, steps.append, attained.append
        for rs, pf, rate, done, att, g, total, n in runs:
            put_a(att + g * (now - rs))
            if now > pf:
                done = done + (now - pf) * rate
                if not (done < total):
                    done = total
            if not n:
                put_s(None)
                put_p(None)
                continue
            put_s((int(done), rate))
            put_p(None if rate <= 0 else (total - done) / rate)
        at = self._moving = _Moving(now, tuple(predicted), tuple(steps), tuple(attained))
        return at

    def gpus(self) -> tuple[int, ...]:
        if self._gpus is None:
            self._gpus = tuple(map(_get_gpus, self.static))
        return self._gpus

    def ids(self) -> frozenset[JobId]:
        if self._ids is None:
            if self._derive is None:
                self._ids = frozenset(map(_get_id, self.static))
            else:
                before, stopped, started = self._derive
                ids = set(before)
                ids.difference_update(stopped)
                ids.update(map(_get_id, started))
                self._ids = frozenset(ids)
                self._derive = None
        return self._ids


def snapshot(time: float, pending: tuple[JobView, ...], running: RunningSet,
             nodes: tuple[NodeView, ...], free_counts: tuple[int, ...],
             running_changes: Any = None) -> ClusterSnapshot:
    """`free_counts`: nodes per free-GPU count (every simulated node is usable and has
    len(free_counts) - 1 GPUs), consistent with `nodes` by construction; `running_changes`:
    the snapshot's `core.RunningChanges` (None: not known), set here, at construction, like
    every other field."""
    snap = _new(SimSnapshot)
    fields: dict[str, Any] = {"time": time, "nodes": nodes, "free_counts": free_counts}
    if running_changes is not None:
        fields["running_changes"] = running_changes
    _set(snap, "__dict__", fields)
    _set(snap, "_pending", pending)
    _set(snap, "_running", None)
    _set(snap, "_set", running)
    return snap  # type: ignore[no-any-return]


def node_view(index: int, gpus_total: int, gpus_alloc: int) -> NodeView:
    state = (NodeState.IDLE if gpus_alloc == 0 else
             NodeState.ALLOCATED if gpus_alloc >= gpus_total else NodeState.MIXED)
    return fast(NodeView, {  # type: ignore[no-any-return]
        **NODE_DEFAULTS, "name": node_name(index), "state": state,
        "gpus_total": gpus_total, "gpus_alloc": gpus_alloc})


def node_name(index: int) -> str:
    """node1, node2, ... as in the test cluster's NodeName=node[1-4]."""
    return f"node{index + 1}"


def _probe() -> None:
    """Fail loudly if the core types stop being plain frozen dataclasses."""
    samples: list[tuple[type, dict[str, Any]]] = [
        (Progress, {"steps_done": 1, "steps_total": 2, "rate": 0.5, "updated_at": 3.0}),
        (JobView, {**JOB_DEFAULTS, "id": JobId("1"), "state": JobState.RUNNING,
                   "submit_time": 0.0, "gpus": 1}),
        (NodeView, {**NODE_DEFAULTS, "name": "node1", "state": NodeState.IDLE,
                    "gpus_total": 4}),
    ]
    samples.append((ClusterSnapshot, {"time": 0.0, "jobs": (), "nodes": (),
                                      "free_counts": None}))
    # Progress.__post_init__ only checks bounds (hostile comments), ClusterSnapshot's that
    # free_counts agrees with the nodes; the simulator's own values satisfy both, so fast()
    # may skip them.
    validate_only = (Progress, ClusterSnapshot)
    for cls, values in samples:
        if hasattr(cls, "__slots__") or (hasattr(cls, "__post_init__")
                                         and cls not in validate_only) or \
                fast(cls, values) != cls(**values):
            raise ImportError(f"slurm_rl.core.{cls.__name__} is no longer a plain frozen "
                              "dataclass; slurm_rl.sim.views must be updated")


_probe()
