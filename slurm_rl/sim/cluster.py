"""GPU placement as Slurm's cons_tres does it for whole-GPU gang jobs.

A job of at most one node's GPUs goes on one node, best fit (the node with the fewest free GPUs
that still holds it; ties to the lowest index). A bigger job spans k = ceil(g / G) nodes with an
even split (g // k each, the remainder one more on some), so 16 GPUs on 4-GPU nodes take 4 whole
nodes; nodes are again chosen tightest first.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

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


class Cluster:
    """Free GPUs per node, bucketed by free count so that best fit costs O(G), not O(nodes)."""

    def __init__(self, nodes: int, per_node: int) -> None:
        self.nodes, self.per_node = nodes, per_node
        self.free = [per_node] * nodes
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
        G, buckets = self.per_node, self._buckets
        if gpus <= G:
            for f in range(gpus, G + 1):
                if buckets[f]:
                    return ((buckets[f][0], gpus),)
            return None
        k, base, extra = split(gpus, G)
        take_exact = buckets[base][: k - extra] if base <= G else []
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

    def take(self, alloc: Alloc) -> None:
        self.version += 1
        for node, g in alloc:
            self._move(node, -g)

    def give(self, alloc: Alloc) -> None:
        self.version += 1
        for node, g in alloc:
            self._move(node, g)

    def audit(self) -> None:
        """Check the buckets against the free map (tests and --audit runs)."""
        assert self.free_total == sum(self.free), "free total drifted"
        for f, bucket in enumerate(self._buckets):
            assert bucket == sorted(bucket), f"bucket {f} unsorted"
            assert all(self.free[n] == f for n in bucket), f"bucket {f} holds a wrong node"
        assert sum(len(b) for b in self._buckets) == self.nodes, "a node is in no bucket"
