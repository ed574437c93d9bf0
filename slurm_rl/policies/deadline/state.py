"""What `DeadlinePolicy` keeps between calls: one object it owns, forgotten by `reset()`.

Nothing in it changes a decision; it saves work. Bounded: one `Job` record per pending job of
the last `decide` (with its last reason read) and one placement shape per pending job of the
last `futile` (those of jobs no longer pending are dropped at every call), the last decision's
JobOrders, the last pending views with their managed ones in submit order, one cluster shape
and one running set's resizable ids and fixed parts of its claims verdicts.
"""

from __future__ import annotations

import operator

from slurm_rl.core import ClusterSnapshot, JobId, JobOrder, JobView
from slurm_rl.policies.capacity import Capacity, fewest_gpus, job_parts
from slurm_rl.policies.deadline.jobs import Job, make_job, resizable
from slurm_rl.policies.estimates import StandingClaims
from slurm_rl.policies.ordering import managed_pending


class DeadlineState:
    """A pending job's `Job` record, kept while snapshots show the same view object (views are
    immutable, a pending job's estimate does not move with the clock, and the clock only moves
    on), for one cluster shape; and the ids of the running jobs the policy may resize, kept with
    the running set (`running_ids` object) they were found in."""

    __slots__ = ("_elastic", "_jobs", "_listed", "_parts", "_parts_cap", "_running_ids",
                 "_shape", "_sorted", "claims", "orders")

    def __init__(self) -> None:
        self._jobs: dict[JobId, Job] = {}
        self._shape: tuple[int, int] | None = None
        self._running_ids: frozenset[JobId] | None = None
        self._elastic: frozenset[JobId] = frozenset()
        self._parts: dict[JobId, tuple[JobView, tuple[int, ...]]] = {}
        self._parts_cap = -1
        self._sorted: tuple[tuple[JobView, ...], list[JobView]] | None = None
        self._listed: tuple[list[JobView], list[Job]] | None = None
        """The last managed pending views (`_sorted`'s list) and their records."""
        self.orders: tuple[JobOrder, ...] = ()
        """The last decision's JobOrders (`ordering.orders` returns one again where it is
        unchanged and its reason was read)."""
        self.claims = StandingClaims()
        """Which running jobs' predictions are their estimates, kept with the running set."""

    def reset(self) -> None:
        self.claims.clear()
        self._jobs.clear()
        self._sorted = self._listed = None
        self.orders = ()
        self._shape = self._running_ids = None
        self._elastic = frozenset()
        self._parts.clear()
        self._parts_cap = -1

    def may_place(self, snapshot: ClusterSnapshot) -> bool:
        """`capacity.may_place(snapshot.pending, Capacity.of(snapshot))`: some pending job
        fits at its fewest GPUs. Each distinct placement (`job_parts` at `fewest_gpus`) is
        tried once; a view's placement is kept while the view is the same object."""
        cap = Capacity.of(snapshot)
        node_cap = cap.node_cap
        if node_cap != self._parts_cap:
            self._parts.clear()
            self._parts_cap = node_cap
        old, kept = self._parts, {}
        for v in snapshot.pending:
            e = old.get(v.id)
            if e is None or e[0] is not v:
                e = (v, job_parts(v, fewest_gpus(v), node_cap))
            kept[v.id] = e
        self._parts = kept
        return any(cap.fits(p) for p in {e[1] for e in kept.values()})

    def pending_jobs(self, snapshot: ClusterSnapshot, node_cap: int, total: int) -> list[Job]:
        """The managed pending jobs' records, in the snapshot's pending order (a record is made
        anew for a new view or another cluster shape)."""
        if self._shape != (node_cap, total):
            self._jobs.clear()
            self._listed = None
            self._shape = (node_cap, total)
        managed = self._managed_pending(snapshot)
        if self._listed is not None and self._listed[0] is managed:
            return list(self._listed[1])  # the same views: the same records
        now, old, jobs = snapshot.time, self._jobs, {}
        for v in managed:
            j = old.get(v.id)
            if j is None or j.view is not v:
                j = make_job(v, now, node_cap, total)
            jobs[v.id] = j
        self._jobs = jobs
        found = list(jobs.values())
        self._listed = (managed, found)
        return list(found)

    def _managed_pending(self, snapshot: ClusterSnapshot) -> list[JobView]:
        """`managed_pending(snapshot)`: the one of the last call again while the snapshot's
        pending views are the same objects in the same order (sorting them is what costs)."""
        pending = snapshot.pending
        last = self._sorted
        if last is not None and (last[0] is pending or (
                len(last[0]) == len(pending) and all(map(operator.is_, last[0], pending)))):
            return last[1]
        found = managed_pending(snapshot)
        self._sorted = (pending, found)
        return found

    def elastic_ids(self, snapshot: ClusterSnapshot) -> frozenset[JobId]:
        """Ids of the running jobs it may resize: kept with the running set they were found in,
        updated from the runs started and stopped since where the snapshot says which
        (`running_changes`), else found in every running view."""
        ids = snapshot.running_ids
        last = self._running_ids
        if last is ids:
            return self._elastic
        changes = snapshot.running_changes
        if last is not None and changes is not None and changes.since is last:
            started = changes.started
            gone = {jid for jid, _ in changes.stopped} | {v.id for v in started}
            found = (self._elastic - gone) | {v.id for v in started if resizable(v)}
        else:
            found = frozenset(v.id for v in snapshot.running if resizable(v))
        self._running_ids, self._elastic = ids, found
        return found

    def elastic(self, snapshot: ClusterSnapshot) -> list[JobView]:
        """The running views it may resize, in running order."""
        ids = self.elastic_ids(snapshot)
        return [v for v in snapshot.running if v.id in ids] if ids else []
