"""What a learned policy sees, shared by the training environment (`rl/env.py`) and the live `rl`
policy, so the daemon decides exactly as in training (how its action becomes a Decision:
`policies/rl/action.py`).

Pure numpy over a `ClusterSnapshot`: no gymnasium, no torch, no simulator. Every feature is
something the live daemon observes through Slurm (squeue/sinfo, the job's intent and progress
tags); no JobView carries a true duration, and nothing here reads the simulator's oracle.

Observation, for a snapshot at time `now`:
- `job_feats` (max_jobs x N_JOB_FEATURES, float32): one row per *shown* pending job (below),
  zero rows after them; `mask` (max_jobs, int8) is 1 on the rows in use. Times are log-scaled,
  `_lt(x) = log1p(x / 60 s) / 10` (1 minute -> 0.07, 1 day -> 0.73, 30 days -> 1.07); GPU
  counts `log2(g) / 6` (64 GPUs -> 1). Columns: JOB_FEATURES; `gittins` is the `gittins`
  policy's priority from the shipped training-trace table (a learned prior that reads no true
  duration of the job itself); `est_remaining`/`est_work`/`limit_work` are what `sjf` can know
  (the remaining run time the job states, `estimates.estimate_remaining`, alone and x GPUs; the
  time limit x GPUs). Columns are only appended, so a checkpoint trained with fewer reads the
  leading ones (`rl/model.py`).
- `cluster_feats` (N_CLUSTER_FEATURES, float32): CLUSTER_FEATURES.
Values are clipped to [-FEATURE_BOUND, FEATURE_BOUND].

Which pending jobs are shown, when more than `max_jobs` wait: the oldest (submit time, then
job id): a non-oracle rule that also keeps any job from being hidden for ever. The others
rank after the shown ones, in that same order (`action.decision_from_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from slurm_rl.core import ClusterSnapshot, JobId, JobView, ServiceClass, id_key
from slurm_rl.policies import gittins_table
from slurm_rl.policies.estimates import believed_progress, estimate_remaining

JOB_FEATURES: tuple[str, ...] = (
    "wait",             # _lt(now - submit)
    "gpus",             # log2(gpus asked now) / 6
    "gpus_min",         # log2(range minimum) / 6 (= gpus without a range)
    "gpus_max",         # log2(range maximum) / 6 (= gpus without a range)
    "has_range",        # 1 if the intent gives a GPU range
    "attained_gpu",     # _lt(attained GPU-seconds, across restarts)
    "attained_run",     # _lt(attained GPU-seconds / gpus): run time received
    "restarts",         # log1p(restarts)
    "progress",         # steps done / steps total, as the job reported them (0: none)
    "has_progress",     # 1 if the job reported progress with a total
    "critical",         # service class critical
    "besteffort",       # service class besteffort
    "has_deadline",     # 1 if the intent gives a deadline
    "slack",            # sign(d - now) * _lt(|d - now|), d the deadline (0: none)
    "hard",             # 1 for a hard deadline
    "time_limit",       # _lt(Slurm time limit) (0: unlimited)
    "elastic",          # 1 if the job may be resized while running
    "fits_now",         # 1 if its GPU count (range minimum) fits the free GPUs now
    "gittins",          # _lt(GPUs / Gittins index at its attained run time): lower first
    "est_remaining",    # _lt(remaining run time the job states, see `estimate`) (0: none)
    "est_work",         # _lt(that remaining time x GPUs): remaining GPU-seconds
    "limit_work",       # _lt(remaining Slurm time limit x GPUs) (0: unlimited)
)
N_JOB_FEATURES = len(JOB_FEATURES)
TEACHERS: tuple[str, ...] = ("gittins", "est_remaining", "est_work", "limit_work", "time_limit",
                             "attained_gpu", "attained_run")
"""Job feature columns whose ranking (lowest first) the trainer may imitate or report as a
reference: each is a non-clairvoyant index policy without preemption (`attained_gpu`: least
attained GPU service first, as tiresias; `attained_run`: least attained run time)."""


def teacher_column(name: str) -> int:
    """The column of JOB_FEATURES a teacher ranks by (lowest first); ValueError if unknown."""
    if name not in TEACHERS:
        raise ValueError(f"unknown teacher {name!r} (valid: {', '.join(TEACHERS)})")
    return JOB_FEATURES.index(name)

SHAPE_MAX = 8
"""Nodes are counted by free GPUs 0..SHAPE_MAX (more free GPUs count as SHAPE_MAX)."""
CLUSTER_FEATURES: tuple[str, ...] = (
    "gpus_total",       # log2(usable GPUs) / 10
    "free_share",       # free GPUs / usable GPUs
    "queue_len",        # log1p(pending jobs) / 10
    "shown_share",      # shown / pending (1 when all are shown)
    "pending_gpus",     # log1p(GPUs asked by all pending jobs / usable GPUs)
    "running_jobs",     # log1p(running jobs) / 10
    "busy_share",       # GPUs in use / usable GPUs
    "max_free_node",    # most free GPUs on one node / SHAPE_MAX
) + tuple(f"nodes_free_{k}" for k in range(SHAPE_MAX + 1))  # share of nodes with k free GPUs
N_CLUSTER_FEATURES = len(CLUSTER_FEATURES)

FEATURE_BOUND = 10.0
GITTINS_RESTART_COST_S = 30.0
"""Seconds per restart taken off a job's attained run time for the `gittins` column (as the
`gittins` policy does by default)."""
_GPUS = attrgetter("gpus")


@dataclass(frozen=True, kw_only=True)
class FeatureConfig:
    """How many pending jobs the network sees at once."""

    max_jobs: int = 64
    """Job slots in the observation; pending jobs beyond it are not shown (oldest first)."""

    def __post_init__(self) -> None:
        if self.max_jobs <= 0:
            raise ValueError(f"max_jobs must be positive, got {self.max_jobs}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Features:
    job_feats: npt.NDArray[np.float32]
    """(max_jobs, N_JOB_FEATURES)."""
    mask: npt.NDArray[np.int8]
    """(max_jobs,): 1 for a slot holding a shown job."""
    cluster_feats: npt.NDArray[np.float32]
    """(N_CLUSTER_FEATURES,)."""
    shown_ids: tuple[JobId, ...]
    """The jobs in the slots, in slot order."""


def _lt(seconds: float) -> float:
    return math.log1p(seconds / 60.0) / 10.0 if seconds > 0 else 0.0


def _lg(gpus: float) -> float:
    return math.log2(gpus) / 6.0 if gpus >= 1 else 0.0


def gpu_range(job: JobView, capacity: int) -> tuple[int, int] | None:
    """(min, max) GPU counts a range job may be given (its intent, capped by the cluster's
    usable GPUs); None for a job without a range."""
    it = job.intent
    if it is None or (it.gpus_min is None and it.gpus_max is None):
        return None
    lo = it.gpus_min if it.gpus_min is not None else min(job.gpus, it.gpus_max or job.gpus)
    hi = it.gpus_max if it.gpus_max is not None else max(lo, job.gpus)
    hi = max(1, min(hi, capacity)) if capacity > 0 else max(hi, 1)
    return min(max(lo, 1), hi), hi


def _submit_key(j: JobView) -> tuple[float, tuple[tuple[int, str], ...]]:
    return j.submit_time, id_key(j.id)


def pending_in_order(snapshot: ClusterSnapshot) -> list[JobView]:
    """Managed pending jobs oldest first (submit time, then job id): the order slots are
    filled in. Unmanaged jobs are never ranked (policies.md); the daemon leaves them to Slurm."""
    jobs = [j for j in snapshot.pending if j.managed]
    # Often in that order already (the simulator's): then sorting would keep it as it is,
    # seen without building every key (a NaN submit time fails both tests: sorted as before).
    for a, b in pairwise(jobs):
        ta, tb = a.submit_time, b.submit_time
        if not (ta < tb or (ta == tb and id_key(a.id) <= id_key(b.id))):
            return sorted(jobs, key=_submit_key)
    return jobs


def _free_shape(snapshot: ClusterSnapshot) -> tuple[list[int], int, int, int, int, int]:
    """Nodes per free-GPU count (0..SHAPE_MAX), usable nodes, the most free GPUs on one
    node, the most GPUs of one node, and the usable GPUs and free GPUs (snapshot.gpus_total
    and gpus_free, in the same pass)."""
    shape = [0] * (SHAPE_MAX + 1)
    if snapshot.free_counts is not None:
        counts = snapshot.free_counts
        for k, n in enumerate(counts):
            shape[min(k, SHAPE_MAX)] += n
        most = max((k for k, n in enumerate(counts) if n), default=0)
        usable = sum(counts)
        free = sum(k * n for k, n in enumerate(counts))
        return shape, usable, most, len(counts) - 1, (len(counts) - 1) * usable, free
    usable = most = per_node = total = free = 0
    for node in snapshot.nodes:
        if node.state.usable:
            usable += 1
            f = node.gpus_free
            shape[min(f, SHAPE_MAX)] += 1
            most = max(most, f)
            per_node = max(per_node, node.gpus_total)
            total += node.gpus_total
            free += f
    return shape, usable, most, per_node, total, free


def gittins_column(job: JobView) -> float:
    """`_lt(gpus / G(a))`: the inverse of the `gittins` policy's priority (index / GPUs) on the
    log-time scale, a the job's attained run time; from the shipped table, built from the
    TRAINING traces only (`gittins_table`). A non-clairvoyant prior: lower ranks first."""
    g = max(job.gpus, 1)
    a = job.attained_gpu_s / g - job.restarts * GITTINS_RESTART_COST_S
    index, _ = gittins_table.shipped().lookup(g, a if a > 0.0 else 0.0)
    return _lt(g / index) if index > 0 else FEATURE_BOUND


_WAIT, _SLACK, _FITS = (JOB_FEATURES.index(c) for c in ("wait", "slack", "fits_now"))
_CACHE_MAX = 20_000
"""Rows a RowCache holds in each store; it starts again empty when one would grow past it."""


class RowCache:
    """The columns of job rows that do not move with the clock or the free GPUs, kept between
    calls by whoever owns it (a policy, a training environment): only a cache, so the rows are
    the same with or without it, or with another one.

    - `static`: a shown pending job's, per JobView object (views are immutable; the simulator
      keeps a pending job's view until it changes), checked by identity and the cluster's
      usable GPUs: (view, usable GPUs, its row of `store`, GPU range minimum, deadline). The
      daemon builds new views each cycle: there it only grows until it starts again.
    - `store`: the cached rows: entry i of `static` (in insertion order) holds row i, so that
      the rows of the shown jobs are one gather (`store[slots]`), not a list of arrays.
    - `running`: a running job's, by (id, submit time, GPUs, restarts, usable GPUs): the submit
      time tells apart jobs of two traces with the same id; (its row of `run_store`, its
      deadline).
    """

    __slots__ = ("run_store", "running", "static", "store")

    def __init__(self) -> None:
        self.static: dict[int, tuple[JobView, int, int, int, float | None]] = {}
        self.store = np.empty((_CACHE_MAX, N_JOB_FEATURES), dtype=np.float64)
        self.running: dict[tuple[JobId, float, int, int, int], tuple[int, float | None]] = {}
        self.run_store = np.empty((_CACHE_MAX, N_JOB_FEATURES), dtype=np.float64)

    def clear(self) -> None:
        self.static.clear()
        self.running.clear()


def _static_row(j: JobView, total: int, running: bool = False,
                ) -> tuple[tuple[float, ...], int, float | None]:
    """(the row with zero wait and slack, fits_now 0 — 1 if `running`; the GPU range minimum;
    the deadline). `running`: for `running_rows`, which writes the _DYN columns over it (the
    remaining estimate and gittins are not worked out here)."""
    rng = gpu_range(j, total)
    lo, hi = rng if rng is not None else (j.gpus, j.gpus)
    it = j.intent
    p = believed_progress(j)
    frac = (min(1.0, p.steps_done / p.steps_total)
            if p is not None and p.steps_total else None)
    deadline = it.deadline if it is not None else None
    cls = it.service_class if it is not None else ServiceClass.STANDARD
    est = None if running else estimate_remaining(j, j.submit_time)
    left = est.seconds if est is not None else 0.0
    limit = j.time_limit_s or 0.0
    row = (
        0.0, _lg(j.gpus), _lg(lo), _lg(hi), rng is not None,
        _lt(j.attained_gpu_s), _lt(j.attained_gpu_s / max(j.gpus, 1)),
        math.log1p(j.restarts), frac or 0.0, frac is not None,
        cls is ServiceClass.CRITICAL, cls is ServiceClass.BESTEFFORT,
        deadline is not None, 0.0, bool(it and it.hard and deadline is not None),
        _lt(limit), bool(it and it.elastic), running, 0.0 if running else gittins_column(j),
        _lt(left), _lt(left * j.gpus), _lt(limit * j.gpus))
    return row, lo, deadline  # (numpy reads the bools as 0.0 and 1.0)


def _pending_rows(jobs: Sequence[JobView], now: float, total: int, max_free: int,
                  per_node: int, free: int, rc: RowCache) -> npt.NDArray[np.float64]:
    """The pending `jobs`' rows (float64, not clipped): the static columns from the cache,
    then wait, slack and fits_now (the values `_lt` gives, inlined)."""
    log1p, copysign = math.log1p, math.copysign
    cache, store = rc.static, rc.store
    if len(cache) + len(jobs) > _CACHE_MAX:
        cache.clear()
    slots: list[int] = []
    waits: list[float] = []
    slacks: list[float] = []
    fits: list[bool] = []
    for j in jobs:
        hit = cache.get(id(j))
        if hit is None or hit[0] is not j or hit[1] != total:
            slot = len(cache) if hit is None else hit[2]
            static, lo, deadline = _static_row(j, total)
            store[slot] = static
            hit = cache[id(j)] = (j, total, slot, lo, deadline)
        _, _, slot, lo, deadline = hit
        slack = 0.0
        if deadline is not None:
            d = deadline - now
            a = abs(d)
            slack = copysign(log1p(a / 60.0) / 10.0 if a > 0 else 0.0, d)
        w = now - j.submit_time
        slots.append(slot)
        waits.append(log1p(w / 60.0) / 10.0 if w > 0 else 0.0)
        slacks.append(slack)
        # fits_now: one node's worth must fit on one node; a wider job is judged by the total
        fits.append(lo <= max_free or (lo > per_node and lo <= free))
    rows = store[slots]
    if slots:  # (a column at a time: several times cheaper than a list of tuples)
        rows[:, _WAIT] = waits
        rows[:, _SLACK] = slacks
        rows[:, _FITS] = fits
    return rows


def _cluster_row(shape: list[int], usable_nodes: int, max_free: int, total: int, free: int,
                 n_pending: int, n_shown: int, pending_gpus: int,
                 running: int) -> npt.NDArray[np.float32]:
    cap = max(total, 1)
    cluster = [
        math.log2(cap) / 10.0, free / cap, math.log1p(n_pending) / 10.0,
        n_shown / n_pending if n_pending else 1.0, math.log1p(pending_gpus / cap),
        math.log1p(running) / 10.0, (total - free) / cap, min(max_free, SHAPE_MAX) / SHAPE_MAX,
    ] + [n / max(usable_nodes, 1) for n in shape]
    return _clipped(np.array(cluster, dtype=np.float64)).astype(np.float32)


def _clipped(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """np.clip(a, -FEATURE_BOUND, FEATURE_BOUND) in place: the same values (NaN stays NaN),
    without np.clip's Python-level dispatch (a cost at the 100,000 small calls of a run)."""
    return np.minimum(np.maximum(a, -FEATURE_BOUND, out=a), FEATURE_BOUND, out=a)


def features(snapshot: ClusterSnapshot, cfg: FeatureConfig,
             pending: list[JobView] | None = None, *, cache: RowCache | None = None,
             ) -> Features:
    """The observation of `snapshot` (see the module docstring); `pending`: its
    `pending_in_order`, where the caller has it; `cache`: the caller's RowCache (None: a new
    one, for this call only)."""
    now, m = snapshot.time, cfg.max_jobs
    if pending is None:
        pending = pending_in_order(snapshot)
    shown = pending[:m]
    shape, usable_nodes, max_free, per_node, total, free = _free_shape(snapshot)

    rows = np.zeros((m, N_JOB_FEATURES), dtype=np.float64)
    rows[:len(shown)] = _pending_rows(shown, now, total, max_free, per_node, free,
                                      RowCache() if cache is None else cache)
    mask = np.zeros(m, dtype=np.int8)
    mask[:len(shown)] = 1
    bound = FEATURE_BOUND
    return Features(
        job_feats=np.clip(rows, -bound, bound).astype(np.float32),
        mask=mask,
        cluster_feats=_cluster_row(shape, usable_nodes, max_free, total, free, len(pending),
                                   len(shown), sum(map(_GPUS, pending)),
                                   len(snapshot.running_ids)),
        shown_ids=tuple(j.id for j in shown))


def some_rows(snapshot: ClusterSnapshot, jobs: Sequence[JobView], n_pending: int,
              pending_gpus: int, cfg: FeatureConfig, *, cache: RowCache | None = None,
              ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """(rows of the pending `jobs`, the cluster features): the values `features` gives them
    (a job's row and the cluster's, so the network's scores of them are the same), without
    building the rows of every shown job. `n_pending` and `pending_gpus`: the managed pending
    jobs and the GPUs they ask (what `features` counts); `cache` as in `features`."""
    now = snapshot.time
    shape, usable_nodes, max_free, per_node, total, free = _free_shape(snapshot)
    rows = _pending_rows(jobs, now, total, max_free, per_node, free,
                         RowCache() if cache is None else cache)
    cluster = _cluster_row(shape, usable_nodes, max_free, total, free, n_pending,
                           min(n_pending, cfg.max_jobs), pending_gpus,
                           len(snapshot.running_ids))
    return _clipped(rows).astype(np.float32), cluster


def shown_rows(snapshot: ClusterSnapshot, cfg: FeatureConfig, pending: list[JobView], *,
               cache: RowCache | None = None,
               ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], tuple[JobId, ...]]:
    """`features` without its empty slots and mask, for a policy: (the shown jobs' rows, the
    first len(shown_ids) rows of job_feats, the same values; the cluster features; shown_ids).
    `pending`: the snapshot's `pending_in_order`; `cache` as in `features`."""
    shown = pending[:cfg.max_jobs]
    rows, cluster = some_rows(snapshot, shown, len(pending), sum(map(_GPUS, pending)), cfg,
                              cache=cache)
    return rows, cluster, tuple(j.id for j in shown)


_DYN = tuple(JOB_FEATURES.index(c) for c in (
    "attained_gpu", "attained_run", "progress", "has_progress", "gittins", "est_remaining",
    "est_work"))
_RUN_COLS = [*_DYN, _WAIT, _SLACK]
"""The columns `running_rows` writes over the static row, in its order."""


def running_rows(snapshot: ClusterSnapshot, jobs: Sequence[JobView], *,
                 cache: RowCache | None = None) -> npt.NDArray[np.float32]:
    """Rows in the JOB_FEATURES layout for running jobs (what the `rl` policy scores to decide
    preemptions): the same columns as a pending job's, from what a live cluster shows of a
    running one (remaining estimate at the snapshot's time: progress, prediction or the time
    limit minus the time run; attained service; restarts), `wait` the time since submission
    and `fits_now` 1 (it holds its GPUs); `cache` as in `features`."""
    now = snapshot.time
    total = _free_shape(snapshot)[4]
    rc = RowCache() if cache is None else cache
    kept, store = rc.running, rc.run_store
    if len(kept) + len(jobs) > _CACHE_MAX:
        kept.clear()
    log1p, copysign, gittins = math.log1p, math.copysign, gittins_column
    slots: list[int] = []
    cols: list[tuple[float, ...]] = []
    for j in jobs:  # (_lt inlined: log1p(x / 60) / 10 for x > 0, else 0)
        gpus = j.gpus
        key = (j.id, j.submit_time, gpus, j.restarts, total)
        hit = kept.get(key)
        if hit is None:
            slot = len(kept)
            static, _, deadline = _static_row(j, total, running=True)
            store[slot] = static
            hit = kept[key] = (slot, deadline)
        slot, deadline = hit
        att = j.attained_gpu_s
        run = att / max(gpus, 1)
        p = believed_progress(j)
        est = estimate_remaining(j, now)
        left = est.seconds if est is not None else 0.0
        work = left * gpus
        waited = now - j.submit_time
        frac = p.steps_done / p.steps_total if p is not None and p.steps_total else None
        slack = 0.0
        if deadline is not None:
            d = deadline - now
            a = abs(d)
            slack = copysign(log1p(a / 60.0) / 10.0 if a > 0 else 0.0, d)
        slots.append(slot)
        cols.append((log1p(att / 60.0) / 10.0 if att > 0 else 0.0,
                     log1p(run / 60.0) / 10.0 if run > 0 else 0.0,
                     min(1.0, frac) if frac is not None else 0.0, frac is not None, gittins(j),
                     log1p(left / 60.0) / 10.0 if left > 0 else 0.0,
                     log1p(work / 60.0) / 10.0 if work > 0 else 0.0,
                     log1p(waited / 60.0) / 10.0 if waited > 0 else 0.0, slack))
    if not slots:
        return np.zeros((0, N_JOB_FEATURES), dtype=np.float32)
    rows = store[slots]
    for c, col in zip(_RUN_COLS, zip(*cols, strict=True), strict=True):
        rows[:, c] = col  # (a column at a time: several times cheaper than the tuples)
    return _clipped(rows).astype(np.float32)
