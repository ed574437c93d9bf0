"""What `elasticflow` knows of each job (estimate, allowed counts, remaining time per count) and
what it keeps between decisions: the admission verdicts, which are sticky (ElasticFlow's
`JOBS.move_to_declined` / `num_accepted_job`), and a cache of pending jobs' estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from slurm_rl import perfmodel
from slurm_rl.core import ClusterSnapshot, JobId, JobState, JobView
from slurm_rl.policies.elasticflow.nodes import NodeMemo
from slurm_rl.policies.elasticflow.plan import Reuse
from slurm_rl.policies.estimates import (
    Estimate,
    StandingClaims,
    estimate_remaining,
    remaining_memo,
)
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.ordering import submit_key


@lru_cache(maxsize=256)
def model_cap(model: str | None, batch_size: int | None) -> int | None:
    """The most GPUs worth giving a model: the smallest measured count at which its throughput
    curve peaks (ElasticFlow's per-model maximum; beyond it the job runs no faster). None: no
    measured curve for the model."""
    if not model or model.lower() not in perfmodel.curves():
        return None
    c = perfmodel.curve_for(model, batch_size)
    best = max(c.iters_per_s)
    return next(g for g, r in zip(c.gpus, c.iters_per_s, strict=True) if r >= best)


@dataclass(slots=True)
class Info:
    view: JobView
    est: Estimate | None
    counts: list[int]
    """Allowed counts, ascending: the range's powers of two that place, up to the model's cap;
    [gpus] for a job without a range."""
    ranged: bool
    rems: dict[int, float] = field(default_factory=dict)
    reuse: Reuse | None = None
    """The last rigid plan made for the job and what it read (`plan_rigid`)."""

    def rem(self, g: int) -> float:
        """Remaining time at g GPUs (unknown: inf)."""
        return remaining_memo(self.view, self.est, self.rems, g)


def make_info(j: JobView, now: float, node_cap: int, total: int) -> Info:
    rng = gpu_range(j)
    if rng is None:
        counts = [j.gpus]
    else:
        lo, hi = rng
        it = j.intent
        cap = model_cap(it.model, it.batch_size) if it is not None else None
        if cap is not None:
            hi = max(lo, min(hi, cap))
        counts = allowed_counts(lo, hi, node_cap, total)
    return Info(view=j, est=estimate_remaining(j, now), counts=counts, ranged=rng is not None)


@dataclass
class Sticky:
    """Admission verdicts, kept until the job leaves (never revised), and the infos of pending
    views (a pending view's estimate does not move with the clock)."""

    admitted: set[JobId] = field(default_factory=set)
    declined: set[JobId] = field(default_factory=set)
    declined_total: int = 0
    drop: bool = False
    """Declined jobs are dropped (`declined="drop"`): each is also listed in `to_drop`."""
    to_drop: list[JobId] = field(default_factory=list)
    """Jobs declined to be dropped that nobody has taken yet (`ElasticFlow.take_dropped`; the
    daemon never takes them, so `prune` keeps only live ones)."""
    cache: dict[JobId, tuple[JobView, int, int, Info]] = field(default_factory=dict)
    nodes: NodeMemo = field(default_factory=NodeMemo)
    running_ids: frozenset[JobId] | None = None
    elastic_ids: frozenset[JobId] = frozenset()
    """Running jobs of `running_ids` that are `resizable`."""
    order: list[int] = field(default_factory=list)
    """The order that sorted the last base profile's ends (elasticflow.base.of_ends)."""
    claims: StandingClaims = field(default_factory=StandingClaims)
    """Which running jobs' predictions are their estimates, kept with the running set."""

    def clear(self) -> None:
        self.admitted.clear()
        self.declined.clear()
        self.cache.clear()
        self.nodes = NodeMemo()
        self.running_ids, self.elastic_ids = None, frozenset()
        self.order = []
        self.claims.clear()
        self.declined_total = 0
        self.to_drop = []

    def decline(self, jid: JobId) -> None:
        self.declined.add(jid)
        self.declined_total += 1
        if self.drop:
            self.to_drop.append(jid)

    def prune(self, live: set[JobId]) -> None:
        """Forget jobs that ended (or left the daemon's scope)."""
        self.admitted &= live
        self.declined &= live
        if self.to_drop:
            self.to_drop = [j for j in self.to_drop if j in live]
        if len(self.cache) > 2 * len(live):
            self.cache = {k: v for k, v in self.cache.items() if k in live}

    def info(self, j: JobView, now: float, node_cap: int, total: int) -> Info:
        if j.state is not JobState.PENDING:
            return make_info(j, now, node_cap, total)
        hit = self.cache.get(j.id)
        if hit is not None and hit[0] is j and hit[1] == node_cap and hit[2] == total:
            return hit[3]
        i = make_info(j, now, node_cap, total)
        self.cache[j.id] = (j, node_cap, total, i)
        return i


def elastic_ids(snapshot: ClusterSnapshot, sticky: Sticky) -> frozenset[JobId]:
    """Ids of the `resizable` running jobs: from the last call's and the runs started and
    stopped since, where the snapshot says which (`running_changes`), else from every view."""
    ids = snapshot.running_ids
    if ids is sticky.running_ids:  # the same object: no run started or ended since
        return sticky.elastic_ids
    changes = snapshot.running_changes
    if (changes is not None and sticky.running_ids is not None
            and changes.since is sticky.running_ids):
        started = changes.started
        gone = {jid for jid, _ in changes.stopped} | {j.id for j in started}
        out = (sticky.elastic_ids - gone) | {j.id for j in started if resizable(j)}
    else:
        out = frozenset(j.id for j in snapshot.running
                        if (it := j.intent) is not None and it.elastic and resizable(j))
    sticky.running_ids, sticky.elastic_ids = ids, out
    return out


def resizable(j: JobView) -> bool:
    """A running job this policy may resize: managed, plainly RUNNING, elastic, with a range."""
    return (j.managed and j.state is JobState.RUNNING and j.intent is not None
            and j.intent.elastic and gpu_range(j) is not None)


def deadline_of(j: JobView) -> float | None:
    return j.intent.deadline if j.intent else None


def edf_key(j: JobView) -> tuple[float, float, tuple[tuple[int, str], ...]]:
    d = deadline_of(j)
    return (d if d is not None else math.inf, *submit_key(j))
