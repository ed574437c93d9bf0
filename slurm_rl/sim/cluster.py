"""GPU placement for whole-GPU gang jobs, two ways.

The shape is the same both ways: a job of at most one node's GPUs goes on one node; a bigger job
spans k = ceil(g / G) nodes with an even split (g // k each, the remainder one more on some), so
16 GPUs on 4-GPU nodes take 4 whole nodes.

`best-fit` (the default, O(G) per placement): the node with the fewest free GPUs that still
holds the job, ties to the lowest index; wide jobs take the tightest nodes too. Packs well.

`cons_tres` (O(nodes)): the node choice of Slurm 22.05's select/cons_tres, measured on the test
cluster (docs/sim-to-real.md). Nodes that can take the job's per-node GPUs and one more CPU form
runs of consecutive node indexes; the run chosen is the first whose free CPUs and node count
suffice and whose free CPU total is the smallest (if none suffices, the one with the most CPUs,
then the next, ...); within the run, the nodes with the fewest free CPUs go first (ties to the
lowest index). So a 1-GPU job goes to the busiest node of the "tightest" run, which is often not
the node with the fewest free GPUs. Every job
takes one CPU on each of its nodes (Slurm's default of one task, one CPU) out of
`cpus_per_node`; free CPUs decide among runs, GPUs only decide which nodes are in one.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

Alloc = tuple[tuple[int, int], ...]
"""(node index, GPUs) pairs of one job."""


def split(gpus: int, per_node: int) -> tuple[int, int, int]:
    """(nodes, base share, nodes that take base + 1) for a job of `gpus` GPUs."""
    k = -(-gpus // per_node)
    base = gpus // k
    return k, base, gpus - base * k


def place_on(free: Sequence[int], gpus: int, per_node: int) -> Alloc | None:
    """Placement on an arbitrary per-node free map (O(nodes)); None when it does not fit."""
    if gpus <= per_node:
        best, best_free = -1, per_node + 1
        for n, f in enumerate(free):
            if gpus <= f < best_free:
                best, best_free = n, f
                if f == gpus:
                    break
        return ((best, gpus),) if best >= 0 else None
    k, base, extra = split(gpus, per_node)
    exact = [n for n, f in enumerate(free) if f == base]
    more = sorted((f, n) for n, f in enumerate(free) if f > base)
    take_exact = exact[: k - extra]
    need = k - len(take_exact)
    if len(more) < need:
        return None
    chosen = [(n, base + 1) for _, n in more[:extra]]
    chosen += [(n, base) for _, n in more[extra:need]]
    chosen += [(n, base) for n in take_exact]
    return tuple(sorted(chosen))


def place_in_buckets(buckets: Sequence[Sequence[int]], gpus: int, per_node: int
                     ) -> Alloc | None:
    """Best fit over nodes bucketed by free GPUs (buckets[f]: the nodes with f free, in index
    order): the same placement as `place_on` on the free map they hold, without a scan of
    every node."""
    G = per_node
    if gpus <= G:
        for f in range(gpus, G + 1):
            if buckets[f]:
                return ((buckets[f][0], gpus),)
        return None
    k, base, extra = split(gpus, G)
    take_exact = list(buckets[base][: k - extra]) if base <= G else []
    need = k - len(take_exact)
    more: list[int] = []
    for f in range(base + 1, G + 1):
        more.extend(buckets[f][: need - len(more)])
        if len(more) >= need:
            break
    if len(more) < need:
        return None
    chosen = [(n, base + 1) for n in more[:extra]]
    chosen += [(n, base) for n in more[extra:need]]
    chosen += [(n, base) for n in take_exact]
    return tuple(sorted(chosen))


BEST_FIT, CONS_TRES = "best-fit", "cons_tres"
PLACEMENTS = (BEST_FIT, CONS_TRES)


def place_cons_tres(free: Sequence[int], cpus_used: Sequence[int], gpus: int, per_node: int,
                    cpus: int) -> Alloc | None:
    """Slurm cons_tres's node choice (module docstring) on a free-GPU map and the CPUs in use
    per node (one per job in the simulator); None when it does not fit. An uneven wide split
    (7 GPUs on 4-GPU nodes), which per-node sbatch requests cannot express, is placed best
    fit."""
    k, base, extra = split(gpus, per_node)
    if extra:
        return place_on(free, gpus, per_node)
    need = base
    runs: list[list[int]] = []  # [first node, nodes, free CPUs]
    run: list[int] | None = None
    for n, f in enumerate(free):
        if f >= need and cpus_used[n] < cpus:
            if run is None:
                run = [n, 0, 0]
                runs.append(run)
            run[1] += 1
            run[2] += cpus - cpus_used[n]
        else:
            run = None
    chosen: list[int] = []
    rem = k
    while rem > 0 and runs:
        best, best_ok = runs[0], runs[0][1] >= rem and runs[0][2] >= rem
        for r in runs[1:]:
            ok = r[1] >= rem and r[2] >= rem
            if (ok and (not best_ok or r[2] < best[2])) or (
                    not ok and not best_ok and r[2] > best[2]):
                best, best_ok = r, ok
        take = min(rem, best[1])
        nodes = range(best[0], best[0] + best[1])
        chosen.extend(sorted(nodes, key=lambda n: (cpus - cpus_used[n], n))[:take])
        rem -= take
        runs.remove(best)
    if rem > 0:
        return None
    return tuple((n, base) for n in sorted(chosen))


class Cluster:
    """Free GPUs per node (bucketed by free count, so that best fit costs O(G), not O(nodes))
    and jobs per node (for `cons_tres` placement)."""

    def __init__(self, nodes: int, per_node: int, *, placement: str = BEST_FIT,
                 cpus_per_node: int | None = None) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, "
                             f"got {placement!r}")
        self.nodes, self.per_node = nodes, per_node
        self.placement = placement
        self.cpus = cpus_per_node if cpus_per_node is not None else 2 * per_node
        if self.cpus < per_node:
            raise ValueError(f"cpus_per_node ({self.cpus}) must be >= gpus_per_node "
                             f"({per_node}): every job takes a CPU on each of its nodes")
        self.free = [per_node] * nodes
        self.jobs_on = [0] * nodes
        """Jobs (one CPU each) per node."""
        self.free_total = nodes * per_node
        # _buckets[f]: sorted indices of nodes with exactly f free GPUs.
        self._buckets: list[list[int]] = [[] for _ in range(per_node + 1)]
        self._buckets[per_node] = list(range(nodes))
        self.version = 0
        """Bumped by every take/give (lets callers cache what depends on the free map)."""

    @property
    def capacity(self) -> int:
        return self.nodes * self.per_node

    def place(self, gpus: int) -> Alloc | None:
        """Where a job of `gpus` GPUs would go now (nothing is taken)."""
        if gpus > self.free_total or gpus <= 0:
            return None
        if self.placement == CONS_TRES:
            return place_cons_tres(self.free, self.jobs_on, gpus, self.per_node, self.cpus)
        return place_in_buckets(self._buckets, gpus, self.per_node)

    def free_counts(self) -> list[int]:
        """[f]: how many nodes have f GPUs free."""
        return [len(b) for b in self._buckets]

    def buckets_with(self, free: Sequence[int], nodes: Iterable[int]) -> list[list[int]]:
        """The buckets of `free`, a free map that differs from this cluster's only on `nodes`:
        the cluster's buckets copied (in C) and the changed nodes moved, with no Python loop
        over every node."""
        buckets = [list(b) for b in self._buckets]
        now = self.free
        for node in set(nodes):
            old, new = now[node], free[node]
            if old != new:
                bucket = buckets[old]
                del bucket[bisect.bisect_left(bucket, node)]
                bisect.insort(buckets[new], node)
        return buckets

    def _move(self, node: int, delta: int) -> None:
        old = self.free[node]
        new = old + delta
        if not 0 <= new <= self.per_node:
            raise AssertionError(f"node {node}: free GPUs would be {new} "
                                 f"(capacity {self.per_node})")
        bucket = self._buckets[old]
        del bucket[bisect.bisect_left(bucket, node)]
        bisect.insort(self._buckets[new], node)
        self.free[node] = new
        self.free_total += delta

    def place_on(self, free: Sequence[int], gpus: int,
                 jobs: Sequence[int] | None = None) -> Alloc | None:
        """This cluster's placement on another free map (a backfill plan); `jobs` per node
        defaults to the jobs running now."""
        if self.placement == CONS_TRES:
            return place_cons_tres(free, self.jobs_on if jobs is None else jobs, gpus,
                                   self.per_node, self.cpus)
        return place_on(free, gpus, self.per_node)

    def take(self, alloc: Alloc) -> None:
        self.version += 1
        for node, g in alloc:
            self._move(node, -g)
            self.jobs_on[node] += 1

    def give(self, alloc: Alloc) -> None:
        self.version += 1
        for node, g in alloc:
            self._move(node, g)
            self.jobs_on[node] -= 1

    def audit(self) -> None:
        """Check the buckets against the free map (tests and --audit runs)."""
        assert self.free_total == sum(self.free), "free total drifted"
        for f, bucket in enumerate(self._buckets):
            assert bucket == sorted(bucket), f"bucket {f} unsorted"
            assert all(self.free[n] == f for n in bucket), f"bucket {f} holds a wrong node"
        assert sum(len(b) for b in self._buckets) == self.nodes, "a node is in no bucket"
        assert all(0 <= j <= self.cpus for j in self.jobs_on), "jobs per node out of range"
