"""What `elasticflow` keeps from one decision for the next, and the small records of one: all
of it worked out from view objects a later snapshot may show again, so that decisions are the
same with or without it (a cache, not policy state).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import is_not
from typing import Any

from slurm_rl.core import ClusterSnapshot, JobId, JobOrder, JobState, JobView, NodeView
from slurm_rl.policies.estimates import Estimate, remaining_at
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.gpu_counts import gpu_range
from slurm_rl.policies.ordering import Ranked, submit_key


@dataclass(frozen=True, slots=True)
class Share:
    gpus: int
    start: float
    dur: float | None
    """Estimated run time at `gpus` (None: unknown, admitted unchecked)."""

    def why(self, now: float) -> str:
        if self.dur is None:
            return "duration unknown: admitted unchecked"
        when = ("start now" if self.start <= now
                else f"planned start in {fmt_dur(self.start - now)}")
        return f"min share {self.gpus} GPUs (est {fmt_dur(self.dur)}), {when}"


@dataclass(slots=True)
class Known:
    """What a pending job's view gives whatever the clock (a pending view's estimate does not
    move with it), kept while snapshots show the same view object."""

    view: JobView
    est: Estimate | None
    deadline: float | None
    edf: tuple[float, float, tuple[tuple[int, str], ...]]
    ranged: bool
    """Whether the intent gives a GPU range (gpu_counts.gpu_range)."""
    counts_for: tuple[int, int] = (-1, -1)
    """(node_cap, total) that `counts` and `rems` were made for."""
    counts: list[int] = field(default_factory=list)
    rems: dict[int, float] = field(default_factory=dict)
    least: float | None = None
    """The least of rems over counts (None: not worked out, or a NaN among them)."""
    entry_key: tuple[Any, ...] | None = None
    entry: Ranked | None = None
    """Its last (view, reason, gpus), reused while `entry_key` is the same."""


    def rem(self, g: int) -> float:
        """Remaining time at g GPUs (kept in `rems`; unknown: inf)."""
        r = self.rems.get(g)
        if r is None:
            r = self.rems[g] = (remaining_at(self.view, self.est, g) if self.est
                                else math.inf)
        return r

    def fastest(self) -> float:
        """A time that, added to the clock, is past the deadline iff every count's
        remaining time is (float addition is monotone); NaN where that is not so."""
        if self.least is None:
            rems = [self.rem(g) for g in self.counts]
            if any(r != r for r in rems):
                return math.nan  # now + NaN > d is False: the job goes the slow way
            self.least = min(rems)
        return self.least


def by_edf(k: Known) -> tuple[float, float, tuple[tuple[int, str], ...]]:
    return k.edf


@dataclass
class Memory:
    """What one decision leaves for the next: results worked out from view objects and the
    running set that the next snapshot may show again (never anything the snapshot does not
    give: decisions are the same with or without it)."""

    known: dict[JobId, Known] = field(default_factory=dict)
    edf: list[Known] = field(default_factory=list)
    """Pending deadline jobs of the last decision, EDF."""
    running_ids: frozenset[JobId] | None = None
    elastic_ids: frozenset[JobId] = frozenset()
    """Running jobs of `running_ids` that are `resizable`."""
    ranked: list[Ranked] = field(default_factory=list)
    orders: tuple[JobOrder, ...] = ()
    nodes: Sequence[NodeView] | None = None
    alloc: int = 0
    """GPUs allocated on the usable nodes of `nodes` (usable_alloc)."""
    shown_for: frozenset[JobId] | None = None
    shown: int = 0
    """GPUs of the running jobs of the snapshot whose `running_ids` is `shown_for`."""


def usable_alloc(nodes: tuple[NodeView, ...], mem: Memory) -> int:
    """GPUs allocated on usable nodes; recounted only on the nodes whose view is not the same
    object as at the last call (the simulator reuses the views of nodes that did not change)."""
    old = mem.nodes
    if old is None or len(old) != len(nodes):
        alloc = sum(n.gpus_alloc for n in nodes if n.state.usable)
    else:
        alloc = mem.alloc
        for i in compress(range(len(nodes)), map(is_not, nodes, old)):
            alloc += _alloc(nodes[i]) - _alloc(old[i])
    mem.nodes, mem.alloc = nodes, alloc
    return alloc


def _alloc(n: NodeView) -> int:
    return n.gpus_alloc if n.state.usable else 0


def resizable(j: JobView) -> bool:
    """A running job this policy may resize: managed, plainly RUNNING, elastic, with a range."""
    return (j.managed and j.state is JobState.RUNNING and j.intent is not None
            and j.intent.elastic and gpu_range(j) is not None)


def elastic_ids(snapshot: ClusterSnapshot, mem: Memory) -> frozenset[JobId]:
    """Ids of the `resizable` running jobs: from the last call's and the runs started and
    stopped since, where the snapshot says which (`running_changes`), else from every view."""
    changes = snapshot.running_changes
    if changes is not None and mem.running_ids is not None and changes.since is mem.running_ids:
        started = changes.started
        gone = {jid for jid, _ in changes.stopped} | {j.id for j in started}
        return (mem.elastic_ids - gone) | {j.id for j in started if resizable(j)}
    return frozenset(j.id for j in snapshot.running
                     if (it := j.intent) is not None and it.elastic and resizable(j))


def deadline_of(j: JobView) -> float | None:
    return j.intent.deadline if j.intent else None


def edf_key(j: JobView) -> tuple[float, float, tuple[tuple[int, str], ...]]:
    d = deadline_of(j)
    return (d if d is not None else math.inf, *submit_key(j))
