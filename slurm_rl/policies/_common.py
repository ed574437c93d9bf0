"""Helpers shared by the policy modules: ordering keys, duration estimates, GPU ranges, a
node-level capacity model, a preemption planner and reason formatting.

Everything here is pure: snapshot values in, values out. Nothing reads a clock.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from itertools import compress, pairwise
from typing import Any, TypeVar

from slurm_rl import perfmodel
from slurm_rl.core import (
    ClusterSnapshot,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeState,
    Preempt,
    id_key,
)

# --- options ---------------------------------------------------------------------------------

T = TypeVar("T")


def build(cls: type[T], options: dict[str, Any]) -> T:
    """Construct a policy dataclass from `new(**options)`, rejecting unknown keys by name."""
    valid = sorted(f.name for f in dataclasses.fields(cls) if f.init)  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} "
                         f"(valid: {', '.join(valid) or 'none'})")
    return cls(**options)


# --- ordering --------------------------------------------------------------------------------

def submit_key(job: JobView) -> tuple[float, tuple[tuple[int, str], ...]]:
    """Slurm's default order: submit time, ties by job id."""
    return (job.submit_time, id_key(job.id))


def managed_pending(snapshot: ClusterSnapshot) -> list[JobView]:
    """Pending jobs the daemon may act on, in submit order."""
    jobs = [j for j in snapshot.pending if j.managed]
    # Often in submit order already (the simulator's are), and then sorting would keep it as
    # it is: seen without building every key.
    for a, b in pairwise(jobs):  # submit_key(b) < submit_key(a), as tuples compare
        ta, tb = a.submit_time, b.submit_time
        if (id_key(b.id) < id_key(a.id)) if tb is ta or tb == ta else tb < ta:
            return sorted(jobs, key=submit_key)
    return jobs


def orders(ranked: Iterable[tuple[JobView, str, int | None]]) -> tuple[JobOrder, ...]:
    """JobOrders with consecutive ranks from (job, reason, gpus or None) in rank order."""
    # Built as JobOrder(job_id=…, rank=…, gpus=…, reason=…) would be, without running the
    # frozen dataclass's __init__ (several times cheaper; checked below at import).
    new, cls = object.__new__, JobOrder
    out = []
    for rank, (job, reason, gpus) in enumerate(ranked):
        order = new(cls)
        d = order.__dict__
        d["job_id"] = job.id
        d["rank"] = rank
        d["gpus"] = gpus
        d["reason"] = reason
        out.append(order)
    return tuple(out)


def _check_orders() -> None:
    job = JobView(id=JobId("1"), state=JobState.PENDING, submit_time=0.0, gpus=1)
    made = orders([(job, "why", 2)])
    if hasattr(JobOrder, "__slots__") or hasattr(JobOrder, "__post_init__") or made != (
            JobOrder(job_id=job.id, rank=0, gpus=2, reason="why"),) or sorted(
            vars(made[0])) != sorted(f.name for f in dataclasses.fields(JobOrder)):
        raise ImportError("slurm_rl.core.JobOrder is no longer a plain frozen dataclass with "
                          "fields job_id, rank, gpus, reason: update _common.orders")


_check_orders()


# --- formatting ------------------------------------------------------------------------------

def fmt_dur(seconds: float) -> str:
    """A short duration: 45s, 12m, 3.5h, 2.0d."""
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 120:
        return f"{sign}{s:.0f}s"
    if s < 7200:
        return f"{sign}{s / 60:.0f}m"
    if s < 172800:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def fmt_time(t: float) -> str:
    """Epoch seconds as UTC wall time (no local zone: policies must not read the environment);
    trace seconds (small numbers) as t=…s."""
    if t >= 1e9:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%MZ")
    return f"t={t:.0f}s"


# --- duration estimates (never the oracle) ---------------------------------------------------

class Source(enum.Enum):
    """Where a remaining-time estimate came from (named in reasons)."""

    PREDICTED = "predicted"
    PROGRESS = "progress"
    PROFILE = "steps at profiled throughput"
    TIME_LIMIT = "time limit"
    HISTORY = "history"
    DEFAULT = "default"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    seconds: float
    """Remaining run time at `gpus`."""
    gpus: int
    source: Source


def estimate_remaining(job: JobView, now: float, *, time_limit: bool = True) -> Estimate | None:
    """What a policy can know about a job's remaining run time at its current GPU count.

    In order: the daemon's/simulator's prediction; the job's own progress (steps left / rate);
    intent.total_steps at the profiled throughput for its model; the Slurm time limit as an upper
    bound (remaining limit if running). Never `oracle_remaining_s`.
    """
    g = max(job.gpus, 1)
    if job.predicted_remaining_s is not None:
        return Estimate(seconds=max(0.0, job.predicted_remaining_s), gpus=g,
                        source=Source.PREDICTED)
    intent, prog = job.intent, job.progress
    total = (prog.steps_total if prog and prog.steps_total is not None
             else intent.total_steps if intent else None)
    done = prog.steps_done if prog else 0
    if total is not None and prog is not None and prog.rate and prog.rate > 0:
        return Estimate(seconds=max(0, total - done) / prog.rate, gpus=g, source=Source.PROGRESS)
    model = intent.model if intent else None
    if total is not None and model and model.lower() in perfmodel.curves():
        rate = perfmodel.curve_for(model, intent.batch_size if intent else None).throughput(g)
        if rate > 0:
            return Estimate(seconds=max(0, total - done) / rate, gpus=g, source=Source.PROFILE)
    if time_limit and job.time_limit_s is not None:
        elapsed = (now - job.start_time if job.state.is_running and job.start_time is not None
                   else 0.0)
        return Estimate(seconds=max(0.0, job.time_limit_s - elapsed), gpus=g,
                        source=Source.TIME_LIMIT)
    return None


def remaining_at(job: JobView, est: Estimate, gpus: int) -> float:
    """The estimate moved to another GPU count along the job's speed-up curve."""
    if gpus == est.gpus or est.seconds == 0:
        return est.seconds
    model = job.intent.model if job.intent else None
    batch = job.intent.batch_size if job.intent else None
    factor = perfmodel.scaled_rate(1.0, est.gpus, gpus, model, batch)
    return est.seconds / factor if factor > 0 else math.inf


# --- GPU ranges ------------------------------------------------------------------------------

def gpu_range(job: JobView) -> tuple[int, int] | None:
    """(min, max) GPUs when the intent gives a range wider than one count, else None."""
    it = job.intent
    if it is None or (it.gpus_min is None and it.gpus_max is None):
        return None
    lo = it.gpus_min if it.gpus_min is not None else min(job.gpus, it.gpus_max or job.gpus)
    hi = it.gpus_max if it.gpus_max is not None else max(lo, job.gpus)
    lo, hi = max(lo, 1), max(hi, 1)
    return (lo, hi) if hi > lo else None


def allowed_counts(lo: int, hi: int, node_cap: int, total: int) -> list[int]:
    """GPU counts a policy may pick in [lo, hi]: the range ends and the powers of two between
    them (as ElasticFlow, DL jobs scale in powers of two), that place as cons_tres would (within
    one node, or whole nodes) and fit the cluster; at least [lo], so a job always has a count."""
    hi = min(hi, total)
    steps = {lo, hi} | {1 << k for k in range(hi.bit_length()) if lo < 1 << k < hi}
    out = [g for g in sorted(steps) if lo <= g <= hi
           and (g <= node_cap or g % max(node_cap, 1) == 0)]
    return out or [lo]


# --- node-level capacity ---------------------------------------------------------------------

@lru_cache(maxsize=4096)
def _layout(gpus: int, nodes: int, node_cap: int) -> tuple[int, ...]:
    if gpus <= 0:
        return ()
    n = min(gpus, max(nodes, 1, math.ceil(gpus / max(node_cap, 1))))
    return tuple(gpus // n + (1 if i < gpus % n else 0) for i in range(n))


def layout(gpus: int, nodes: int, node_cap: int) -> list[int]:
    """GPUs per node for a gang of `gpus` over at least `nodes` nodes (even split)."""
    return list(_layout(gpus, nodes, node_cap))


def job_layout(job: JobView, gpus: int | None, node_cap: int) -> list[int]:
    """A job's per-node GPUs at `gpus` (its own count and node count if None)."""
    return list(_job_layout(job, gpus, node_cap))


def _job_layout(job: JobView, gpus: int | None, node_cap: int) -> tuple[int, ...]:
    if gpus is None or gpus == job.gpus:
        return _layout(job.gpus, job.nodes, node_cap)
    return _layout(gpus, 1, node_cap)


class Capacity:
    """Free GPUs per usable node. GPUs released by stopping a job go into separate chunks,
    because the snapshot does not say which node a job runs on: conservative for placing
    one-node jobs.

    Only how many nodes have each free count matters (which node is which never does), so
    that is what is kept: `fits`, `take` and `copy` cost O(node_cap), not O(nodes). A gang's
    parts go on distinct nodes, largest part first, each on the tightest node that holds it
    (best fit)."""

    __slots__ = ("_count", "_total", "node_cap")

    def __init__(self, free: Iterable[int], node_cap: int) -> None:
        self.node_cap = node_cap
        self._count = [0] * (max(node_cap, 0) + 1)
        """_count[f]: how many nodes (or released chunks) have exactly f GPUs free."""
        self._total = 0
        self.release(free)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Capacity:
        counts = getattr(snapshot, "free_counts", None)
        if counts is not None:  # kept by the simulator's snapshot: nodes per free-GPU count
            new: Capacity = object.__new__(Capacity)
            new._count, new.node_cap = list(counts), len(counts) - 1
            new._total = sum(f * k for f, k in enumerate(counts))
            return new
        cap, free = 0, []
        for n in snapshot.nodes:
            if n.state in _USABLE:
                total = n.gpus_total
                free.append(max(0, total - n.gpus_alloc))
                if total > cap:
                    cap = total
        return cls(free, cap)

    def copy(self) -> Capacity:
        new: Capacity = object.__new__(Capacity)
        new._count, new._total, new.node_cap = list(self._count), self._total, self.node_cap
        return new

    @property
    def free(self) -> list[int]:
        """Free GPUs of each node (and released chunk), ascending."""
        return [f for f, k in enumerate(self._count) for _ in range(k)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Capacity):
            return NotImplemented
        return (self.free, self.node_cap) == (other.free, other.node_cap)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Capacity(free={self.free}, node_cap={self.node_cap})"

    @property
    def total_free(self) -> int:
        return self._total

    def _place(self, parts: Sequence[int], commit: bool) -> bool:
        count = self._count
        top = len(count)
        if len(parts) == 1:
            need = parts[0]
            for f in range(need if need > 0 else 0, top):
                if count[f]:
                    if commit:
                        count[f] -= 1
                        self._add(f - need)
                        self._total -= need
                    return True
            return False
        needs = sorted(parts, reverse=True)
        picks: list[int] = []
        for need in needs:
            for f in range(need if need > 0 else 0, top):
                if count[f]:
                    count[f] -= 1  # taken: the next parts go on other nodes
                    picks.append(f)
                    break
            else:
                for f in picks:
                    count[f] += 1
                return False
        if commit:
            for f, need in zip(picks, needs, strict=True):
                self._add(f - need)
                self._total -= need
        else:
            for f in picks:
                count[f] += 1
        return True

    def fits(self, parts: Sequence[int]) -> bool:
        return self._place(parts, False)

    def take(self, parts: Sequence[int]) -> bool:
        return self._place(parts, True)

    def _add(self, free: int) -> None:
        count = self._count
        if not 0 <= free < len(count):
            if free < 0:
                raise ValueError(f"negative free GPUs: {free}")
            count.extend([0] * (free + 1 - len(count)))
        count[free] += 1

    def release(self, parts: Iterable[int]) -> None:
        for f in parts:
            self._add(f)
            self._total += f

    def _release_all(self, other: Capacity) -> None:
        """`release` every node and chunk of `other`."""
        count = self._count
        if len(other._count) > len(count):
            count.extend([0] * (len(other._count) - len(count)))
        for f, k in enumerate(other._count):
            count[f] += k
        self._total += other._total

    def _unrelease(self, parts: Iterable[int]) -> None:
        """Undo `release(parts)`."""
        for f in parts:
            self._count[f] -= 1
            self._total -= f


_USABLE = frozenset(s for s in NodeState if s.usable)


# --- preemption planning ---------------------------------------------------------------------

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
    cap = cap.copy()
    node_cap = cap.node_cap
    vs: Sequence[JobView] | None = None if callable(victims) else victims
    lay: dict[JobId, tuple[int, ...]] = {}
    stopped: set[JobId] = set()
    out: list[Preempt] = []
    starts: set[JobId] = set()
    # (victims p outranks, p's layout) known not to fit even with all of them stopped. Free
    # GPUs only shrink between preemptions, so such a failure holds until the next one.
    hopeless: set[tuple[int, tuple[int, ...]]] = set()
    # The GPUs of victims[:k] not stopped, as released chunks, by k (until the next preemption).
    pools: dict[int, Capacity] = {}
    for p in pending:
        parts = _job_layout(p, None, node_cap)
        if cap.take(parts):
            starts.add(p.id)
            continue
        if vs is None:
            vs = victims()  # type: ignore[operator]
        k = 0
        for v in vs:
            if not outranks(p, v):
                break
            k += 1
        if not k or (k, parts) in hopeless:
            continue
        pool = pools.get(k)
        if pool is None:
            pool = pools[k] = Capacity((), node_cap)
            for v in vs[:k]:
                if v.id not in stopped:
                    parts_v = lay.get(v.id)
                    if parts_v is None:
                        parts_v = lay[v.id] = _job_layout(v, None, node_cap)
                    pool.release(parts_v)
        trial = cap.copy()
        trial._release_all(pool)
        if not trial.fits(parts):  # (also when no victim is eligible: p did not fit in cap)
            hopeless.add((k, parts))
            continue
        chosen = _choose(cap, [(v, lay[v.id]) for v in vs[:k] if v.id not in stopped], parts)
        assert chosen is not None  # it fits with all of them
        for c, parts_c in chosen:
            cap.release(parts_c)
            stopped.add(c.id)
            out.append(Preempt(job_id=c.id, reason=reason(c, p)))
        cap.take(parts)
        starts.add(p.id)
        hopeless.clear()
        pools.clear()
    return tuple(out), starts


C = TypeVar("C")


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
        trial._unrelease(lay)
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
    cap = cap.copy()
    node_cap = cap.node_cap
    arranged: list[JobView] | None = None
    levels: dict[JobId, int] = {}
    stopped: set[JobId] = set()
    out: list[Preempt] = []
    starts: set[JobId] = set()
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
                    yield (v, lv), _layout(v.gpus, v.nodes, node_cap)

    for p in pending:
        parts = _job_layout(p, None, node_cap)
        if cap.take(parts):
            starts.add(p.id)
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
        for (v, _), lay in chosen:
            cap.release(lay)
            stopped.add(v.id)
            out.append(Preempt(job_id=v.id, reason=reason(v, p)))
        cap.take(parts)
        starts.add(p.id)
        hopeless.clear()
    return tuple(out), starts


def latest_first(jobs: list[JobView]) -> list[JobView]:
    """sorted(jobs, key=submit_key, reverse=True), building the keys only for jobs whose
    submit time another job has too."""
    times = list(map(_submit_time, jobs))
    if any(map(math.isnan, times)):
        return sorted(jobs, key=submit_key, reverse=True)
    out = sorted(jobs, key=_submit_time, reverse=True)
    if len(set(times)) < len(times):  # runs of equal times: by id, stably
        times = list(map(_submit_time, out))
        ties = list(compress(range(len(times) - 1), map(operator.eq, times, times[1:])))
        i = 0
        while i < len(ties):  # out[start:end] is one run
            start = ties[i]
            end = start + 2
            while i + 1 < len(ties) and ties[i + 1] == end - 1:
                end += 1
                i += 1
            out[start:end] = sorted(out[start:end], key=lambda j: id_key(j.id), reverse=True)
            i += 1
    return out


_submit_time = operator.attrgetter("submit_time")


def preemptable(snapshot: ClusterSnapshot) -> list[JobView]:
    """Running jobs a policy may requeue: managed and plainly RUNNING (not completing,
    resizing or suspended)."""
    return [j for j in snapshot.running if j.managed and j.state is JobState.RUNNING]
