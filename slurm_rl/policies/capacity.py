"""A node-level model of free GPUs (`Capacity`) and how a gang job splits over nodes.

Pure: snapshot values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache

from slurm_rl.core import ClusterSnapshot, JobView, NodeState


@lru_cache(maxsize=4096)
def gang_parts(gpus: int, nodes: int, node_cap: int) -> tuple[int, ...]:
    """`layout` as a tuple (cached: the planners ask for the same few shapes all the time)."""
    if gpus <= 0:
        return ()
    n = min(gpus, max(nodes, 1, math.ceil(gpus / max(node_cap, 1))))
    return tuple(gpus // n + (1 if i < gpus % n else 0) for i in range(n))


def layout(gpus: int, nodes: int, node_cap: int) -> list[int]:
    """GPUs per node for a gang of `gpus` over at least `nodes` nodes (even split)."""
    return list(gang_parts(gpus, nodes, node_cap))


def job_layout(job: JobView, gpus: int | None, node_cap: int) -> list[int]:
    """A job's per-node GPUs at `gpus` (its own count and node count if None)."""
    return list(job_parts(job, gpus, node_cap))


def job_parts(job: JobView, gpus: int | None, node_cap: int) -> tuple[int, ...]:
    """`job_layout` as a tuple, largest part first."""
    if gpus is None or gpus == job.gpus:
        return gang_parts(job.gpus, job.nodes, node_cap)
    return gang_parts(gpus, 1, node_cap)


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
        counts = snapshot.free_counts
        if counts is not None:  # precomputed (the simulator's): nodes per free-GPU count
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

    def release_all(self, other: Capacity) -> None:
        """`release` every node and chunk of `other`."""
        count = self._count
        if len(other._count) > len(count):
            count.extend([0] * (len(other._count) - len(count)))
        for f, k in enumerate(other._count):
            count[f] += k
        self._total += other._total

    def unrelease(self, parts: Iterable[int]) -> None:
        """Undo `release(parts)`."""
        for f in parts:
            self._count[f] -= 1
            self._total -= f


_USABLE = frozenset(s for s in NodeState if s.usable)


def fewest_gpus(job: JobView) -> int:
    """The fewest GPUs a pending job could start with: its range minimum, else its count."""
    g, it = job.gpus, job.intent
    if it is not None:
        if it.gpus_min is not None and it.gpus_min < g:
            g = it.gpus_min
        if it.gpus_max is not None and it.gpus_max < g:
            g = it.gpus_max
    return g


def may_start(pending: Iterable[JobView], most: int, total_free: int, node_cap: int) -> bool:
    """Whether some pending job (of any kind, held ones too) fits the free GPUs at
    `fewest_gpus`: `most` free on one node, `total_free` in all, `node_cap` GPUs per node.
    Conservative: a job wider than a node counts as fitting when the cluster's free GPUs add up
    to it. Where it is False nothing starts whatever an order says, until an event frees GPUs
    (the `Gated` policies' `futile`, capabilities.py)."""
    for j in pending:
        g = fewest_gpus(j)
        if g <= most or (g > node_cap and g <= total_free):
            return True
    return False


def may_place(pending: Iterable[JobView], cap: Capacity) -> bool:
    """`may_start` placed on `cap`'s nodes: some pending job fits at `fewest_gpus`, a job wider
    than a node split evenly over its nodes (`job_parts`, as cons_tres and the simulator
    place it)."""
    node_cap = cap.node_cap
    return any(cap.fits(job_parts(j, fewest_gpus(j), node_cap)) for j in pending)
