"""`edf-elastic`: earliest deadline first, elastic and preemptive: ElasticFlow's `edf` baseline
as its authors ran it (pkusys/ElasticFlow, scheduler.py: `one_queue_edf_sim_jobs` with
`EDF_estimate_all_jobs` / `edf_sim_allocation`).

At every decision the jobs it may move (pending jobs, and running elastic jobs with a GPU range:
`may_resize`) are allotted GPUs afresh, earliest deadline first (jobs without a deadline last;
ties in submit order), from the GPUs free once those running jobs are taken off: each takes its
maximum count where that many are free, else the largest allowed count that is (the original:
the largest measured count not above the free GPUs), else none. A running job given none is
preempted (requeued; it resumes from its checkpoint), one given another count is resized; a
pending job given a count starts at it, the others wait. So jobs with later deadlines shrink or
stop for earlier ones. No admission control and no restart cost in the plan (the original
plans this baseline with overhead 0); every job keeps being tried however late it is.

A job's maximum is its range maximum, at most its batch size (the original's `max_gpu` for
this baseline: its largest measured count, at most 64 and the batch size), not the count where
its throughput peaks (that is `elasticflow`'s cap). Allowed counts are the range's powers of two
that place (`gpu_counts.allowed_counts`), as the original's measured counts (1, 2, 4, ... 64).

What differs: counts are checked on the nodes (one node, or whole nodes, best fit: the
snapshot's free GPUs per node plus those of the running jobs it may move), where the original's
buddy placement always holds; running jobs it may not move (rigid, unmanaged, not elastic)
keep their GPUs; a rigid pending job starts at its own count or waits. Pure and stateless; in
the simulator `Gated`: a call whose allotment would move and start nothing is skipped (the
allotment ignores the clock, so it is the one the last call applied).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobState, JobView, Preempt, Resize
from slurm_rl.policies.capabilities import CycleState, Gated, Preempting, Resizing
from slurm_rl.policies.capacity import Capacity, gang_parts, job_parts
from slurm_rl.policies.formatting import fmt_time
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import Ranked, managed_pending, orders, submit_key

NAME = "edf-elastic"
_CYCLE_KEY = NAME
"""Where `futile` leaves its allotment for `decide` (capabilities.CycleState)."""


def deadline_of(job: JobView) -> float | None:
    return job.intent.deadline if job.intent else None


def _edf_key(job: JobView) -> tuple[float, float, tuple[tuple[int, str], ...]]:
    d = deadline_of(job)
    return (d if d is not None else math.inf, *submit_key(job))


def movable(job: JobView) -> bool:
    """A running job this policy may resize or preempt: managed, plainly RUNNING, elastic,
    with a GPU range."""
    intent = job.intent  # read first: most running jobs are not elastic
    return (intent is not None and intent.elastic and job.managed
            and job.state is JobState.RUNNING and gpu_range(job) is not None)


@dataclass(frozen=True, kw_only=True)
class EdfElastic:
    name: str = field(default=NAME, init=False)

    def may_resize(self, job: JobView) -> bool:
        """Resizing (capabilities.py): `movable` jobs."""
        return movable(job)

    def may_preempt(self, job: JobView) -> bool:
        """Preempting (capabilities.py): the same jobs, when earlier deadlines take every GPU
        they could have."""
        return movable(job)

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> bool:
        """Gated (capabilities.py): True where the allotment moves no running job and starts
        no pending one (then the order changes nothing: nothing it ranks fits); else the
        allotment goes to `decide` on the same snapshot through `cycle`."""
        a = _Allotment(snapshot)
        if a.acts():
            if cycle is not None:
                cycle.write(_CYCLE_KEY, a)
            return False
        return True

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        ready = None if cycle is None else cycle.read(_CYCLE_KEY)
        a = cast(_Allotment, ready) if ready is not None else _Allotment(snapshot)
        moving, pending, given = a.moving, a.pending, a.given
        node_cap, total = a.node_cap, a.total
        resizes: list[Resize] = []
        preempts: list[Preempt] = []
        for j in moving:
            g = given.get(j.id, 0)
            if g == 0:
                preempts.append(Preempt(job_id=j.id, reason=(
                    f"EDF (elastic): {_dl(j)}; earlier deadlines hold every GPU it could "
                    "have")))
            elif g != j.gpus:
                what = "grow" if g > j.gpus else "shrink to what earlier deadlines leave"
                resizes.append(Resize(job_id=j.id, gpus=g, reason=(
                    f"EDF (elastic): {_dl(j)}; {what}: {j.gpus} -> {g} GPUs")))
        waiting = sorted((p for p in pending if not p.held),
                         key=lambda p: (p.id not in given, _edf_key(p)))
        ranked: list[Ranked] = []
        for p in waiting:
            g = given.get(p.id, 0)
            ranked.append((p, _why(p, g), (g or _counts(p, node_cap, total)[0])
                           if gpu_range(p) is not None else None))
        ranked += [(p, "held: not planned", None) for p in pending if p.held]
        return Decision(policy=self.name, order=orders(ranked), resizes=tuple(resizes),
                        preemptions=tuple(preempts))


class _Allotment:
    """The GPUs each job gets now: `given` (job id -> count; a job not in it gets none)."""

    __slots__ = ("given", "moving", "node_cap", "pending", "total")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.moving = moving = [j for j in snapshot.running if movable(j)]
        self.pending = pending = managed_pending(snapshot)
        cap, self.node_cap, self.total = _capacity(snapshot, moving)
        self.given: dict[JobId, int] = {}
        given = self.given
        for j in sorted([*moving, *(p for p in pending if not p.held)], key=_edf_key):
            if cap.total_free <= 0:
                break  # nothing left for the later deadlines
            g = _take(cap, j, self.node_cap, self.total)
            if g:
                given[j.id] = g

    def acts(self) -> bool:
        """Whether it moves a running job or starts a pending one."""
        given = self.given
        return (any(given.get(j.id, 0) != j.gpus for j in self.moving)
                or len(given) > sum(1 for j in self.moving if j.id in given))


def _capacity(snapshot: ClusterSnapshot, moving: list[JobView]) -> tuple[Capacity, int, int]:
    """Free GPUs per usable node with the `moving` jobs' GPUs given back (a job whose nodes
    the snapshot does not give, as a block of its own), the GPUs per node, the usable GPUs.
    With no job to give back, the snapshot's free-GPU counts where it has them (the same
    Capacity, without a pass over the nodes)."""
    counts = snapshot.free_counts
    if not moving and counts is not None and sum(counts) > 0:
        cap = Capacity.of(snapshot)
        return cap, cap.node_cap, cap.node_cap * sum(counts)
    index: dict[str, int] = {}
    free: list[int] = []
    node_cap = total = 0
    for n in snapshot.nodes:
        if n.state.usable:
            index[n.name] = len(free)
            free.append(max(0, n.gpus_total - n.gpus_alloc))
            node_cap, total = max(node_cap, n.gpus_total), total + n.gpus_total
    for j in moving:
        known = [(index[name], g) for name, g in j.placement if name in index and g is not None]
        if known and sum(g for _, g in known) == j.gpus:
            for i, g in known:
                free[i] += g
        else:
            free.append(j.gpus)
    return Capacity(free, max(node_cap, max(free, default=0))), node_cap, total


def _counts(job: JobView, node_cap: int, total: int) -> tuple[int, ...]:
    """The counts it may take, largest first: its allowed counts up to its maximum (range
    maximum, at most its batch size), or its own count for a job without a range."""
    rng = gpu_range(job)
    if rng is None:
        return (job.gpus,)
    lo, hi = rng
    bs = job.intent.batch_size if job.intent is not None else None
    if bs:
        hi = max(lo, min(hi, bs))
    return _descending(lo, hi, node_cap, total)


@lru_cache(maxsize=1024)
def _descending(lo: int, hi: int, node_cap: int, total: int) -> tuple[int, ...]:
    return tuple(reversed(allowed_counts(lo, hi, node_cap, total)))


def _take(cap: Capacity, job: JobView, node_cap: int, total: int) -> int:
    """The largest count of `job` that places on `cap` (taken there), else 0."""
    ranged = gpu_range(job) is not None
    for g in _counts(job, node_cap, total):
        if g > cap.total_free:
            continue
        parts = gang_parts(g, 1, node_cap) if ranged else job_parts(job, None, node_cap)
        if cap.take(parts):
            return g
    return 0


def _dl(job: JobView) -> str:
    d = deadline_of(job)
    return "no deadline" if d is None else f"deadline {fmt_time(d)}"


def _why(job: JobView, g: int) -> Callable[[], str]:
    def why() -> str:
        if g:
            return f"EDF (elastic): {_dl(job)}; start now at {g} GPUs"
        return f"EDF (elastic): {_dl(job)}; waits: earlier deadlines hold the GPUs"

    return why


def new(**options: Any) -> EdfElastic:
    """No options."""
    return build(EdfElastic, options)


# The capabilities it declares (capabilities.py), checked by mypy.
_resizing: type[Resizing] = EdfElastic
_preempting: type[Preempting] = EdfElastic
_gated: type[Gated] = EdfElastic
