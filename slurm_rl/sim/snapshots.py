"""What the engine shows a policy: the `ClusterSnapshot` at the current time, built
incrementally (node views of the nodes that changed, free-GPU counts kept up to date, the
running jobs' fixed fields shared while none starts or ends; `views.py` has the types), and the
`Oracle` of true durations that only `OracleReading` policies get.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import suppress
from typing import Any, Protocol

from slurm_rl.core import ClusterSnapshot, JobId, JobView, NodeView
from slurm_rl.sim import views
from slurm_rl.sim.cluster import Cluster
from slurm_rl.sim.jobs import SimJob
from slurm_rl.sim.views import node_view


class SnapshotBuilder:
    """Snapshots of one simulated cluster. The engine marks the nodes whose allocation changed
    (`dirty`); `build` refreshes only those."""

    def __init__(self, cluster: Cluster, nodes: int, gpus_per_node: int) -> None:
        self.cluster, self.gpus_per_node = cluster, gpus_per_node
        self.node_views: list[NodeView] = [node_view(n, gpus_per_node, 0) for n in range(nodes)]
        self.dirty: set[int] = set()
        """Nodes whose allocation changed since the last snapshot."""
        self.stopped: list[JobId] = []
        """Ids of the runs stopped since the running jobs' fixed fields were last built."""
        self._free_counts: list[int] | None = None
        """Nodes per free-GPU count, built at the first snapshot, then kept up to date."""
        self._made_views: dict[tuple[int, int], NodeView] = {}
        """NodeViews are values: one per node and GPU count is enough."""
        self._static = views.RunningSet(())
        self._static_at: int | None = None
        """Cluster version the running jobs' fixed fields (`_static`) were built at."""
        self._before: tuple[frozenset[JobId], views.RunningSet, tuple[dict[str, Any], ...]] \
            | None = None
        """For `running_changes`: the previous RunningSet's ids (if a policy read them), that
        set, and the fixed fields of the runs started since."""

    def build(self, now: float, pending: Iterator[SimJob],
              running: Iterable[SimJob]) -> ClusterSnapshot:
        """`pending` in submit order."""
        G, node_views, free = self.gpus_per_node, self.node_views, self.cluster.free
        counts = self._free_counts
        if counts is None:
            counts = self._free_counts = [0] * (G + 1)
            for v in node_views:
                counts[G - v.gpus_alloc] += 1
        made = self._made_views
        for n in self.dirty:
            counts[G - node_views[n].gpus_alloc] -= 1
            counts[free[n]] += 1
            view = made.get((n, free[n]))
            if view is None:
                view = made[n, free[n]] = node_view(n, G, G - free[n])
            node_views[n] = view
        self.dirty.clear()
        pending_views = tuple([j.view or j.pending_view(G) for j in pending])
        # The running jobs' fixed fields (views.SimSnapshot builds their views only when a
        # policy reads them); every start and stop moves the cluster's version.
        if self._static_at != self.cluster.version:
            # A run's fixed fields are made here only (run_static), and dropped when it starts
            # or stops: those still missing are the runs started since the last set.
            static: list[dict[str, Any] | None] = [j.view_static for j in running]
            started: list[dict[str, Any]] = []
            if None in static:
                jobs, i = list(running), -1
                with suppress(ValueError):
                    while True:
                        i = static.index(None, i + 1)
                        fixed = static[i] = jobs[i].run_static()
                        started.append(fixed)
            before = self._static
            stopped, self.stopped = self.stopped, []
            self._static = views.RunningSet(
                tuple(static),  # type: ignore[arg-type]
                None if before._ids is None else (before._ids, stopped, started))
            self._static_at = self.cluster.version
            since = before._ids  # (None: no policy saw them, so none can ask for changes)
            self._before = None if since is None else (since, before, tuple(started))
        changes = None
        if self._before is not None:
            since, before, started_now = self._before
            changes = RunningChanges(since, before, self._static, started_now, now,
                                     pending_views)
        return views.snapshot(now, pending_views, self._static, tuple(node_views),
                              tuple(counts), changes)


class RunningChanges:
    """`core.RunningChanges` between two of the builder's RunningSets, worked out when read."""

    __slots__ = ("_after", "_before", "_fixed", "_now", "_pending", "_started", "_stopped",
                 "since")

    def __init__(self, since: frozenset[JobId], before: views.RunningSet,
                 after: views.RunningSet, fixed: tuple[dict[str, Any], ...], now: float,
                 pending: tuple[JobView, ...]) -> None:
        self.since, self._before, self._after, self._now = since, before, after, now
        self._fixed, self._pending = fixed, pending
        """The started runs' fixed fields; the snapshot's pending views."""
        self._started: tuple[JobView, ...] | None = None
        self._stopped: tuple[tuple[JobId, JobView | None], ...] | None = None

    @property
    def started(self) -> tuple[JobView, ...]:
        started = self._started
        if started is None:
            now = self._now
            started = self._started = views.running_views(self._fixed, now)
        return started

    @property
    def stopped(self) -> tuple[tuple[JobId, JobView | None], ...]:
        stopped = self._stopped
        if stopped is None:
            before, after = self._before.static, self._after.static
            # Runs that went on are in both sets; unless all of `before` did, some job stopped.
            if len(before) == len(after) - len(self._fixed):
                stopped = ()
            else:
                gone = self.since - self._after.ids()
                ids = ([s["id"] for s in before if s["id"] in gone] if len(gone) > 1
                       else list(gone))
                listed = {v.id: v for v in self._pending if v.id in gone} if gone else {}
                stopped = tuple([(i, listed.get(i)) for i in ids])
            self._stopped = stopped
        return stopped


class _Clock(Protocol):
    @property
    def now(self) -> float: ...


class SimOracle:
    """The engine's `capabilities.Oracle`: true remaining run times of active jobs, at the
    engine's current time (the time of the snapshot being decided). Bound only to
    `OracleReading` policies; never part of a JobView."""

    __slots__ = ("_active", "_clock")

    def __init__(self, active: dict[JobId, SimJob], clock: _Clock) -> None:
        self._active, self._clock = active, clock

    def remaining_s(self, job_id: JobId) -> float | None:
        job = self._active.get(job_id)
        return None if job is None else job.true_remaining(self._clock.now)
