"""Free GPUs per node, from the snapshot's nodes and its running jobs' placements: where
`elasticflow` checks that a resize or a start holds on real nodes before it asks for it.

Jobs are placed as the simulator and Slurm's cons_tres shape them: at most one node's GPUs on
one node (the tightest that holds them), a wider job over k = ceil(g / node_cap) nodes in an
even split. ElasticFlow places every job afresh each round (`cluster.py:elastic_placement`, a
buddy allocation that always holds power-of-two counts); here only the jobs it resizes or
starts move, so each move is checked against the nodes as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import is_not

from slurm_rl.core import ClusterSnapshot, JobView, NodeName, NodeView

Alloc = tuple[tuple[int, int], ...]
"""(node index, GPUs) of one job."""


@dataclass
class NodeMemo:
    """The last snapshot's nodes and what was read from them: the simulator reuses the views
    of nodes that did not change, so only the others are read again."""

    nodes: tuple[NodeView, ...] = ()
    free: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    """GPUs allocated on each usable node (0 on the others)."""
    index: dict[NodeName, int] = field(default_factory=dict)
    cap: int = 0
    total: int = 0
    """GPUs of the usable nodes."""
    alloc: int = 0
    """GPUs allocated on the usable nodes."""


def _read(n: NodeView) -> tuple[int, int, int]:
    """(free, allocated, total) GPUs of a node as far as starting jobs goes (0s: unusable)."""
    if n.state.usable:
        return max(0, n.gpus_total - n.gpus_alloc), n.gpus_alloc, n.gpus_total
    return 0, 0, 0


class NodeMap:
    __slots__ = ("alloc", "cap", "free", "index", "total", "total_free")

    def __init__(self, snapshot: ClusterSnapshot, memo: NodeMemo | None = None) -> None:
        nodes = snapshot.nodes
        m = memo if memo is not None else NodeMemo()
        changed = ([] if m.nodes is nodes or len(m.nodes) != len(nodes)
                   else list(compress(range(len(nodes)), map(is_not, nodes, m.nodes))))
        if len(m.nodes) != len(nodes) or any(nodes[i].name != m.nodes[i].name
                                             for i in changed):
            m.index = {n.name: i for i, n in enumerate(nodes)}
            read = [_read(n) for n in nodes]
            m.free, m.used = [f for f, _, _ in read], [u for _, u, _ in read]
            m.alloc, m.total = sum(m.used), sum(t for _, _, t in read)
            m.cap = max((t for _, _, t in read), default=0)
        else:
            for i in changed:
                f, u, t = _read(nodes[i])
                _, _, t0 = _read(m.nodes[i])
                m.alloc += u - m.used[i]
                m.total += t - t0
                m.free[i], m.used[i] = f, u
                m.cap = max(m.cap, t)
        m.nodes = nodes
        self.index, self.free, self.cap = m.index, list(m.free), m.cap
        self.alloc, self.total = m.alloc, m.total
        self.total_free = sum(self.free)

    def alloc_of(self, job: JobView) -> Alloc:
        """Where a running job holds its GPUs (`JobView.placement`); a node whose count the
        snapshot does not give gets an even share. A job whose nodes the snapshot does not
        give holds a block of its own (a node of the map that only it can free)."""
        nodes = [(self.index[n], g) for n, g in job.placement if n in self.index]
        if not nodes:
            self.free.append(0)  # the job's own block, freed by release
            return ((len(self.free) - 1, job.gpus),)
        known = sum(g for _, g in nodes if g is not None)
        unknown = [i for i, g in nodes if g is None]
        share = (job.gpus - known) // len(unknown) if unknown else 0
        return tuple((i, g if g is not None else share) for i, g in nodes)

    def release(self, alloc: Alloc) -> None:
        for i, g in alloc:
            self.free[i] += g
            self.total_free += g

    def take(self, alloc: Alloc) -> None:
        for i, g in alloc:
            self.free[i] -= g
            self.total_free -= g

    def place(self, gpus: int) -> Alloc | None:
        """Where a job of `gpus` GPUs would go (best fit); None: it does not fit now."""
        free, cap = self.free, self.cap
        if gpus <= 0 or cap <= 0:
            return None
        if gpus <= cap:
            for f in range(gpus, max(cap, max(free, default=0)) + 1):
                try:  # the tightest node first, ties to the lowest index (a C scan each)
                    return ((free.index(f), gpus),)
                except ValueError:
                    continue
            return None
        k = -(-gpus // cap)
        base, extra = gpus // k, gpus % k
        if len(free) - sum(map(free.count, range(base))) < k:  # (C scans) too few nodes hold
            return None                                         # `base`: no need to sort
        fits = sorted((f, i) for i, f in enumerate(free) if f >= base)
        if len(fits) < k:
            return None
        bigger = [(f, i) for f, i in fits if f > base]
        if len(bigger) < extra:
            return None
        chosen = [(i, base + 1) for _, i in bigger[:extra]]
        used = {i for i, _ in chosen}
        chosen += [(i, base) for _, i in fits if i not in used][: k - extra]
        return tuple(sorted(chosen)) if len(chosen) == k else None

    def move(self, old: Alloc, gpus: int) -> Alloc | None:
        """A running job's new place at `gpus` (its old GPUs given back first, as a requeue
        does); None, with nothing changed, when it does not fit."""
        self.release(old)
        new = self.place(gpus)
        self.take(new if new is not None else old)
        return new
