"""Preemption planning: which running jobs to requeue so that higher-priority pending jobs start.

Two planners over one `_Plan` (the commit step they share): `plan_preemptions` with an explicit
victim order and `plan_by_level` for queue-level policies (tiresias).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from slurm_rl.core import ClusterSnapshot, JobId, JobState, JobView, Preempt
from slurm_rl.policies.capacity import Capacity, gang_parts, job_parts

C = TypeVar("C")


class _Plan:
    """What a planner has decided so far, over its own copy of the capacity: the jobs stopped
    (with their Preempts, in order) and the pending jobs expected to start. `commit` is the one
    step both planners end in once they know which victims a pending job needs."""

    __slots__ = ("cap", "out", "starts", "stopped")

    def __init__(self, cap: Capacity) -> None:
        self.cap = cap.copy()
        self.stopped: set[JobId] = set()
        self.out: list[Preempt] = []
        self.starts: set[JobId] = set()

    def start_if_fits(self, p: JobView, parts: tuple[int, ...]) -> bool:
        if self.cap.take(parts):
            self.starts.add(p.id)
            return True
        return False

    def commit(self, p: JobView, parts: tuple[int, ...],
               chosen: Iterable[tuple[JobView, tuple[int, ...]]],
               reason: Callable[[JobView, JobView], str]) -> None:
        """Stop `chosen` (each with its layout) and start p in the GPUs they free."""
        cap = self.cap
        for v, lay in chosen:
            cap.release(lay)
            self.stopped.add(v.id)
            self.out.append(Preempt(job_id=v.id, reason=reason(v, p)))
        cap.take(parts)
        self.starts.add(p.id)

    def result(self) -> tuple[tuple[Preempt, ...], set[JobId]]:
        return tuple(self.out), self.starts


def plan_preemptions(
    cap: Capacity,
    pending: Sequence[JobView],
    victims: Sequence[JobView] | Callable[[], Sequence[JobView]],
    outranks: Callable[[JobView, JobView], bool],
    reason: Callable[[JobView, JobView], str],
) -> tuple[tuple[Preempt, ...], set[JobId]]:
    """Which running jobs to requeue so that higher-priority pending jobs start.

    `pending` in priority order (best first); `victims` the running jobs that may be stopped,
    lowest priority first (or a function returning them, called at most once, and only if some
    pending job does not fit in the free GPUs); `outranks(p, v)`: whether pending p may
    displace running v, true for a prefix of `victims` (the scan stops at the first v that p
    does not outrank). Each pending job takes free GPUs if it fits; otherwise victims it
    outranks are stopped, lowest first, until it fits (then victims it turned out not to need
    are kept). A job that cannot fit even so stops nobody. Returns the preemptions and the ids
    expected to start.
    """
    def prefix(p: JobView, vs: Sequence[JobView]) -> int:
        k = 0
        for v in vs:
            if not outranks(p, v):
                break
            k += 1
        return k

    return plan_preemptions_by_prefix(cap, pending, victims, prefix, reason)


def plan_preemptions_by_prefix(
    cap: Capacity,
    pending: Sequence[JobView],
    victims: Sequence[JobView] | Callable[[], Sequence[JobView]],
    prefix: Callable[[JobView, Sequence[JobView]], int],
    reason: Callable[[JobView, JobView], str],
) -> tuple[tuple[Preempt, ...], set[JobId]]:
    """`plan_preemptions` with `prefix(p, victims)`: how many of the victims, from the first,
    p outranks (what plan_preemptions counts with `outranks`; a policy whose victims are in
    the order of a number can bisect)."""
    plan = _Plan(cap)
    cap, stopped = plan.cap, plan.stopped
    node_cap = cap.node_cap
    vs: Sequence[JobView] | None = None if callable(victims) else victims
    lay: dict[JobId, tuple[int, ...]] = {}
    # Free GPUs only shrink between preemptions, and more free GPUs never make a layout fit
    # less, so until the next preemption: layouts known not to fit in the free GPUs, and for a
    # layout the most victims (a prefix) known not to be enough for it (nor are fewer).
    full: set[tuple[int, ...]] = set()
    hopeless: dict[tuple[int, ...], int] = {}
    # The GPUs of victims[:k] not stopped, as released chunks, by k (until the next preemption).
    pools: dict[int, Capacity] = {}
    for p in pending:
        parts = job_parts(p, None, node_cap)
        if parts not in full:
            if plan.start_if_fits(p, parts):
                continue
            full.add(parts)
        if vs is None:
            vs = victims()  # type: ignore[operator]
        k = prefix(p, vs)
        if not k or k <= hopeless.get(parts, 0):
            continue
        pool = pools.get(k)
        if pool is None:
            pool = pools[k] = _pool(pools, k, vs, stopped, lay, node_cap)
        trial = cap.copy()
        trial.release_all(pool)
        if not trial.fits(parts):  # (also when no victim is eligible: p did not fit in cap)
            hopeless[parts] = k
            continue
        chosen = _choose(cap, [(v, lay[v.id]) for v in vs[:k] if v.id not in stopped], parts)
        assert chosen is not None  # it fits with all of them
        plan.commit(p, parts, chosen, reason)
        full.clear()
        hopeless.clear()
        pools.clear()
    return plan.result()


def _pool(pools: dict[int, Capacity], k: int, vs: Sequence[JobView], stopped: set[JobId],
          lay: dict[JobId, tuple[int, ...]], node_cap: int) -> Capacity:
    """The GPUs of vs[:k] not stopped, as released chunks: from the pool of the nearest k
    already built (the same chunks, counted), else from none."""
    near = min(pools, key=lambda j: abs(j - k), default=None)
    if near is None:
        pool, lo, hi, add = Capacity((), node_cap), 0, k, True
    else:
        pool, lo, hi, add = pools[near].copy(), min(near, k), max(near, k), near < k
    for v in vs[lo:hi]:
        if v.id not in stopped:
            parts = lay.get(v.id)
            if parts is None:
                parts = lay[v.id] = job_parts(v, None, node_cap)
            if add:
                pool.release(parts)
            else:
                pool.unrelease(parts)
    return pool


def _choose(cap: Capacity, eligible: Iterable[tuple[C, tuple[int, ...]]],
            parts: tuple[int, ...]) -> list[tuple[C, tuple[int, ...]]] | None:
    """The victims (each with its layout) to stop so that `parts` fit in `cap`: eligible ones
    in order until it fits, then, latest added first but the last, those it fits without; None
    if it does not fit even with all of them."""
    # A victim whose parts are all smaller than each of p's cannot help it fit (no node that
    # small takes a part): fits() need not be asked when one is added or removed.
    least = min(parts)
    trial = cap.copy()
    chosen: list[tuple[C, tuple[int, ...]]] = []
    for c in eligible:
        lay = c[1]  # layouts are largest part first
        chosen.append(c)
        trial.release(lay)
        if lay and lay[0] >= least and trial.fits(parts):
            break
    else:
        return None
    spared: set[int] = set()
    for i in range(len(chosen) - 2, -1, -1):
        lay = chosen[i][1]
        trial.unrelease(lay)
        if not lay or lay[0] < least or trial.fits(parts):
            spared.add(i)
        else:
            trial.release(lay)
    if spared:
        chosen = [c for i, c in enumerate(chosen) if i not in spared]
    return chosen


def plan_by_level(
    cap: Capacity,
    pending: Sequence[JobView],
    level: Callable[[JobView], int],
    victims: Callable[[], list[JobView]],
    victim_level: Callable[[JobView], int],
    top: int,
    arrange: Callable[[list[JobView]], list[JobView]],
    reason: Callable[[JobView, JobView], str],
) -> tuple[tuple[Preempt, ...], set[JobId]]:
    """`plan_preemptions` where pending job p may displace the victims v with victim_level(v)
    > level(p): highest level first (`top` the highest there can be), in each level in the
    order `arrange` (a stable sort) puts them.

    `victims()` gives the running jobs that may be stopped; it is called at most once, only if
    a pending job below level `top` does not fit in the free GPUs, and victim_level() only for
    victims looked at, in that order, until enough are found. With arrange = lambda vs:
    sorted(vs, key=k, reverse=True), the same plan as plan_preemptions(cap, pending, victims
    sorted by (victim_level, k), descending, outranks=lambda p, v: victim_level(v) > level(p),
    …)."""
    plan = _Plan(cap)
    cap, stopped = plan.cap, plan.stopped
    node_cap = cap.node_cap
    arranged: list[JobView] | None = None
    levels: dict[JobId, int] = {}
    hopeless: set[tuple[int, tuple[int, ...]]] = set()  # as in plan_preemptions

    def eligible(lp: int) -> Iterator[tuple[tuple[JobView, int], tuple[int, ...]]]:
        assert arranged is not None
        for lv in range(top, lp, -1):
            for v in arranged:
                vid = v.id
                if vid in stopped:
                    continue
                lvv = levels.get(vid)
                if lvv is None:
                    lvv = levels[vid] = victim_level(v)
                if lvv == lv:
                    yield (v, lv), gang_parts(v.gpus, v.nodes, node_cap)

    for p in pending:
        parts = job_parts(p, None, node_cap)
        if plan.start_if_fits(p, parts):
            continue
        lp = level(p)
        if lp >= top or (lp, parts) in hopeless:
            continue
        if arranged is None:
            arranged = arrange(victims())
        chosen = _choose(cap, eligible(lp), parts)
        if chosen is None:
            hopeless.add((lp, parts))
            continue
        plan.commit(p, parts, [(v, lay) for (v, _), lay in chosen], reason)
        hopeless.clear()
    return plan.result()


def may_preempt(job: JobView) -> bool:
    """Whether a policy may requeue `job`: managed, plainly RUNNING (not completing, resizing
    or suspended) and restartable (a requeue of it would be carried out: live, it opted in)."""
    return job.managed and job.state is JobState.RUNNING and job.restartable


def preemptable(snapshot: ClusterSnapshot) -> list[JobView]:
    """The running jobs a policy may requeue (`may_preempt`)."""
    return [j for j in snapshot.running if may_preempt(j)]
