"""Core types shared by the daemon, the simulator and every policy.

Everything here is a frozen, keyword-only dataclass holding tuples: a policy gets a
`ClusterSnapshot` and returns a `Decision`, and can not tell whether the snapshot was built
from Slurm, from a trace, or from stored rows. Times are seconds as floats: epoch seconds on a
real cluster, trace seconds in the simulator. The state enums live in `states.py` and are
imported from here like everything else.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NewType, Protocol

from slurm_rl.checks import MAX_EPOCH, MAX_INT, check_int, check_number
from slurm_rl.states import JobState, NodeState, ServiceClass

JobId = NewType("JobId", str)
NodeName = NewType("NodeName", str)

_DIGITS = re.compile(r"(\d+)")


@lru_cache(maxsize=1 << 16)
def id_key(job_id: str) -> tuple[tuple[int, str], ...]:
    """Natural sort key for Slurm job ids: "9" < "10" < "10_2" < "10_10".

    Cached: the same ids are sorted every daemon cycle and every simulator decision."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in _DIGITS.split(job_id) if p)


@dataclass(frozen=True, kw_only=True)
class Intent:
    """What the user asked for at submission (rlsbatch), beyond plain sbatch.

    The typed definition of the intent's fields. `submit/tags.py`'s `INTENT_KEYS` names the
    same fields in the same order with the same defaults, for the code that must import
    nothing (the comment codec, rlsbatch); the database derives its columns' names and JSON
    from `dataclasses.fields(Intent)`. tests/submit/test_intent_fields.py keeps them equal: a
    new field goes here, in INTENT_KEYS (with its comment key) and in db/models.py's `Job`
    (with a migration)."""

    deadline: float | None = None
    """Epoch (or trace) seconds by which the job should end; None: no deadline."""
    hard: bool = False
    """A hard deadline makes the job worthless after it; a soft one is still worth finishing."""
    service_class: ServiceClass = ServiceClass.STANDARD
    gpus_min: int | None = None
    """Smallest total GPU count the job can run with (None: the count sbatch asked for)."""
    gpus_max: int | None = None
    elastic: bool = False
    """May be resized while running (the job checkpoints on requeue)."""
    total_steps: int | None = None
    model: str | None = None
    batch_size: int | None = None
    inference: str | None = None
    """An inference job's model (`rlsbatch --rl-inference`; `slurm-rl plan` places it)."""

    def __post_init__(self) -> None:
        # Bounds only (ValueError), so that no hostile comment or row can build an intent that
        # overflows SQLite, a timestamp or scontrol; deadlines may be trace seconds (>= 0).
        if self.deadline is not None:
            check_number("deadline", self.deadline, 0, MAX_EPOCH)
        for name in ("gpus_min", "gpus_max"):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, 1, MAX_INT)
        for name in ("total_steps", "batch_size"):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value)


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Progress a job reported about itself (steps done of total, and its rate)."""

    steps_done: int
    steps_total: int | None = None
    rate: float | None = None
    """Steps per second at the job's current GPU count."""
    updated_at: float | None = None

    def __post_init__(self) -> None:
        # Bounds only (ValueError); the simulator builds these without __init__ (sim/views.py).
        check_int("steps_done", self.steps_done)
        if self.steps_total is not None:
            check_int("steps_total", self.steps_total)
        if self.rate is not None:
            check_number("rate", self.rate)
        if self.updated_at is not None:
            check_number("updated_at", self.updated_at, 0, MAX_EPOCH)


@dataclass(frozen=True, kw_only=True)
class JobView:
    id: JobId
    user: str = ""
    name: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    state: JobState
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: float | None = None
    """Slurm's time limit (None: unlimited). Backfill plans with it, as slurmctld does."""
    gpus: int
    """Total GPUs the job asks for now (or holds, if running)."""
    nodes: int = 1
    priority: int = 0
    held: bool = False
    managed: bool = True
    """Whether the daemon may act on this job (scope from config)."""
    intent: Intent | None = None
    progress: Progress | None = None
    predicted_remaining_s: float | None = None
    """Remaining run time at the job's current GPU count, predicted from progress or history."""
    attained_gpu_s: float = 0.0
    """GPU-seconds the job has received so far (for least-attained-service policies)."""
    restarts: int = 0
    restartable: bool = True
    """Whether a requeue or resize of this running job would be carried out: the daemon sets
    it to whether the job opted in to restarts (`--rl-elastic`), the one rule of its own that
    a policy can know in advance (daemon/preempt.py checks the rest when it acts); the
    simulator to the same under its restart rules, True for every job with free restarts. A
    policy that plans requeues for a job whose requeue would be refused gains nothing by it."""
    claim_ratio: float = 1.0
    """The owner's record, by which the sizes this job claims are stretched: how many times
    longer than claimed their recent jobs ran (1: no record, or claims that held; inf: claims
    not believed). Set by the daemon from its database (policies/estimates.py)."""
    claim_overrun: bool = False
    """A running job that has run past the end its own claims stated (by more than the daemon's
    allowance): its claims are no longer believed."""
    placement: tuple[tuple[NodeName, int | None], ...] = ()
    """A running job's nodes, each with the GPUs the job holds there; () when the job is not
    running (or Slurm showed no node list). From Slurm the per-node count is known only when
    it is: `--gres=gpu:K` (TresPerNode) means K on every node, and a one-node job holds all its
    GPUs there; a multi-node job that asked per job (`--gpus=N`) has None on each node (Slurm's
    squeue does not say how it split them; NodeView.gpus_alloc bounds them)."""


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    index: int
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None


@dataclass(frozen=True, kw_only=True)
class NodeView:
    name: NodeName
    state: NodeState
    gpus_total: int
    gpus_alloc: int = 0
    cpus_total: int = 0
    cpus_alloc: int = 0
    partitions: tuple[str, ...] = ()
    samples: tuple[GpuSample, ...] = ()
    sampled_at: float | None = None

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_total - self.gpus_alloc) if self.state.usable else 0


@dataclass(frozen=True, kw_only=True)
class ClusterSnapshot:
    time: float
    jobs: tuple[JobView, ...]
    nodes: tuple[NodeView, ...]
    free_counts: tuple[int, ...] | None = None
    """Optional, precomputed where it is cheap (the simulator keeps it up to date): [f] is how
    many usable nodes have exactly f GPUs free, every usable node having len - 1 GPUs. None:
    policies derive it from `nodes`. Checked against `nodes` when given to the constructor."""
    running_changes: RunningChanges | None = field(default=None, init=False, compare=False,
                                                   repr=False)
    """Optional, set where the builder knows it cheaply (the simulator): which jobs started and
    stopped running since an earlier snapshot. None (always after __init__, so also after
    `dataclasses.replace`): not known."""

    def __post_init__(self) -> None:
        if self.free_counts is not None:
            counts = [0] * len(self.free_counts)
            for n in self.nodes:
                if n.state.usable:
                    if n.gpus_total != len(counts) - 1:
                        raise ValueError("free_counts needs nodes of one GPU count")
                    counts[n.gpus_free] += 1
            if tuple(counts) != tuple(self.free_counts):
                raise ValueError(f"free_counts {self.free_counts} disagree with the nodes")

    @property
    def pending(self) -> tuple[JobView, ...]:
        """The pending jobs, in `jobs` order (found once per snapshot: the daemon and the
        policies read it several times a cycle, and `jobs` never changes)."""
        d = self.__dict__
        found: tuple[JobView, ...] | None = d.get("_pending_jobs")
        if found is None:
            found = d["_pending_jobs"] = tuple(j for j in self.jobs if j.state.is_pending)
        return found

    @property
    def running(self) -> tuple[JobView, ...]:
        """The running jobs, in `jobs` order (found once per snapshot, as `pending`)."""
        d = self.__dict__
        found: tuple[JobView, ...] | None = d.get("_running_jobs")
        if found is None:
            found = d["_running_jobs"] = tuple(j for j in self.jobs if j.state.is_running)
        return found

    @property
    def running_ids(self) -> frozenset[JobId]:
        """Ids of the running jobs. The same object as an earlier snapshot's (`is`) means that
        no job started, stopped or began a new run in between (`running`: the same jobs and runs
        in the same order, each with the fields that do not move with the clock as they were:
        all but attained_gpu_s, progress and predicted_remaining_s). The simulator's
        snapshots share it while no job starts or ends; a plain snapshot makes a new one at
        every read, so never rely on getting the same one."""
        return frozenset(j.id for j in self.running)

    @property
    def running_predicted(self) -> tuple[float | None, ...]:
        """Each running job's predicted_remaining_s, in `running` order. (The simulator's
        snapshots work them out for all running jobs at once, without building their views.)"""
        return tuple(j.predicted_remaining_s for j in self.running)

    @property
    def running_gpus(self) -> tuple[int, ...]:
        """Each running job's GPUs, in `running` order (the same shortcut)."""
        return tuple(j.gpus for j in self.running)

    @property
    def running_attained(self) -> tuple[float, ...]:
        """Each running job's attained_gpu_s, in `running` order (the same shortcut)."""
        return tuple(j.attained_gpu_s for j in self.running)

    @property
    def running_steps(self) -> tuple[tuple[int, float | None] | None, ...]:
        """Each running job's progress as (steps_done, rate), None where it reports none, in
        `running` order (the same shortcut: a policy that checks every running job's progress
        need not build a `Progress` per job)."""
        return tuple(None if p is None else (p.steps_done, p.rate)
                     for p in (j.progress for j in self.running))

    @property
    def finished(self) -> tuple[JobView, ...]:
        """Jobs neither pending nor running (a finished job Slurm still lists)."""
        return tuple(j for j in self.jobs if j.state.is_finished)

    @property
    def gpus_total(self) -> int:
        return sum(n.gpus_total for n in self.nodes if n.state.usable)

    @property
    def gpus_free(self) -> int:
        return sum(n.gpus_free for n in self.nodes)


class RunningChanges(Protocol):
    """`ClusterSnapshot.running_changes`: how its running jobs differ from those of the
    snapshot whose `running_ids` is the object `since` (valid only for who saw that object)."""

    @property
    def since(self) -> frozenset[JobId]: ...
    @property
    def started(self) -> tuple[JobView, ...]:
        """Views of the jobs in a run that was not running then (started, restarted or
        resized since), in `running` order."""
    @property
    def stopped(self) -> tuple[tuple[JobId, JobView | None], ...]:
        """Jobs running then and not now, in the earlier `running` order, each with its view
        here (pending again, or finished and listed) or None where this snapshot lists it not."""


class _Reason:
    """`JobOrder.reason`: a str, or a function that makes it, called once on first read.

    A policy ranks every pending job at every decision but the reason of a job is read only
    where someone looks (the daemon's records, `slurm-rl explain`): a policy may pass a
    function and so format only those. A dataclass field whose default is a descriptor (the
    dataclasses documentation, "Descriptor-typed fields"): __init__ stores the value through
    __set__; equality, repr, hashing and pickling read it as a str."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._key = name

    def __get__(self, obj: object | None, owner: type | None = None) -> str:
        if obj is None:
            return ""  # the field's default
        d = obj.__dict__
        value = d[self._key]
        if type(value) is not str:
            value = d[self._key] = value()
        return value  # type: ignore[no-any-return]

    def __set__(self, obj: object, value: str | Callable[[], str]) -> None:
        obj.__dict__[self._key] = value


@dataclass(frozen=True, kw_only=True)
class JobOrder:
    """Rank of one pending job (0 runs first) and, optionally, the GPU count to give it."""

    job_id: JobId
    rank: int
    gpus: int | None = None
    reason: _Reason = _Reason()
    """Why (a str when read; may be given as a function that makes it, see `_Reason`)."""

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "reason": self.reason}

    @staticmethod
    def fast(job_id: JobId, rank: int, gpus: int | None,
             reason: str | Callable[[], str]) -> JobOrder:
        """`JobOrder(job_id=…, rank=…, gpus=…, reason=…)`, without the frozen dataclass's
        generated __init__ (which sets each field through object.__setattr__): about 4x
        cheaper, for the policies that rank every pending job at every decision.

        The value is the one the constructor makes: JobOrder validates nothing, so nothing is
        skipped (tests/test_core_values.py compares the two, and fails if JobOrder gains a
        __post_init__, slots or a field)."""
        order = _new(JobOrder)
        d = order.__dict__
        d["job_id"] = job_id
        d["rank"] = rank
        d["gpus"] = gpus
        d["reason"] = reason
        return order


_new = object.__new__


@dataclass(frozen=True, kw_only=True)
class Resize:
    """New GPU count for a running elastic job."""

    job_id: JobId
    gpus: int
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Preempt:
    """Stop a running job and put it back in the queue (it resumes from a checkpoint)."""

    job_id: JobId
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What a policy wants. Jobs it does not mention keep what they have."""

    policy: str
    order: tuple[JobOrder, ...] = ()
    resizes: tuple[Resize, ...] = ()
    preemptions: tuple[Preempt, ...] = ()
    notes: tuple[str, ...] = field(default=())


class Policy(Protocol):
    """A scheduling policy. `decide` does no I/O: no clock, no subprocess, no database, no
    global torch state. Most shipped policies are pure (the same snapshot gives the same
    decision); those that keep state between calls declare it (`capabilities.Stateful`, with
    a `reset()` the simulator calls at every run or episode): `tiresias` (when each job was
    last seen running, its service at its last promotion) and `sjf` (run-time history,
    `Observing`). What a policy does beyond ordering it declares the same way."""

    name: str

    def decide(self, snapshot: ClusterSnapshot) -> Decision: ...
