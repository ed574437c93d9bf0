"""What the engine shows a policy: the `ClusterSnapshot` at the current time, built
incrementally (node views of the nodes that changed, free-GPU counts kept up to date, the
running jobs' fixed fields shared while none starts or ends; `views.py` has the types), and the
`Oracle` of true durations that only `OracleReading` policies get.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from slurm_rl.core import ClusterSnapshot, JobId, NodeView
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
        self._free_counts: list[int] | None = None
        """Nodes per free-GPU count, built at the first snapshot, then kept up to date."""
        self._made_views: dict[tuple[int, int], NodeView] = {}
        """NodeViews are values: one per node and GPU count is enough."""
        self._static = views.RunningSet(())
        self._static_at: int | None = None
        """Cluster version the running jobs' fixed fields (`_static`) were built at."""

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
            self._static = views.RunningSet(
                tuple([j.view_static or j.run_static() for j in running]))
            self._static_at = self.cluster.version
        return views.snapshot(now, pending_views, self._static, tuple(node_views), tuple(counts))


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
