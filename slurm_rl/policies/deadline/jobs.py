"""`deadline`'s records of one job (policy.py has the rules): what a view alone decides, kept
while a snapshot shows the same view object, and what the plan made of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from slurm_rl.core import JobId, JobState, JobView, ServiceClass, id_key
from slurm_rl.policies.estimates import Estimate, estimate_remaining, remaining_memo
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range


class Fate(Enum):
    """What the plan made of a deadline job."""

    RESERVED = "reserved"
    """Its minimum share fits before its deadline: reserved."""
    UNKNOWN = "unknown"
    """Its duration is unknown (or only bounded by a time limit longer than the time left):
    its first count is held from now until its deadline, unchecked."""
    LATE = "late"
    """No count meets its deadline given the reservations ahead: run best-effort."""
    DEMOTED = "demoted"
    """A hard deadline that no count meets even started now: last."""
    CAPPED = "capped"
    """Over its user's urgent share (urgency.py): best-effort, as a job without a deadline."""
    NONE = "none"
    """No deadline (or held): best-effort."""


@dataclass(slots=True, kw_only=True)
class Job:
    """What a view alone decides (kept while a snapshot shows the same view object)."""

    view: JobView
    counts: list[int]
    est: Estimate | None
    deadline: float | None
    hard: bool
    cls: ServiceClass
    plan_key: tuple[int, float, float, tuple[tuple[int, str], ...]]
    """(class rank: critical 0, else 1; deadline; submit key): the order in which deadline jobs
    reserve their shares (besteffort ones reserve none)."""
    user: str
    """Its user where the urgent share may cap it (a user, a deadline, not besteffort)."""
    ranged: bool
    """An intent GPU range (`gpu_counts.gpu_range`): the policy gives it a count."""
    rems: dict[int, float] = field(default_factory=dict)
    fast: float | None = None
    """The least remaining time over its counts (worked out once)."""
    hopeless: bool = False
    """Pending, and past its deadline even started now at its fastest count (it stays so: the
    clock only moves on)."""
    order: tuple[bool, float, float, tuple[tuple[int, str], ...]] | None = None
    """Its best-effort order (`be_order`, worked out once)."""
    why: tuple[tuple[object, ...], str] | None = None
    """Its last reason once read, with what of the plan it was made from (policy.py
    `_why_key`): the same again gives the same text without formatting it."""

    def rem(self, g: int) -> float:
        """Predicted remaining time at g GPUs (unknown: inf)."""
        return remaining_memo(self.view, self.est, self.rems, g)

    def reserves(self) -> bool:
        """Whether it may reserve a share: a deadline, and not the besteffort class."""
        return self.deadline is not None and self.cls is not ServiceClass.BESTEFFORT

    def fastest(self) -> float:
        f = self.fast
        if f is None:
            f = self.fast = min(self.rem(g) for g in self.counts)
        return f

    def be_order(self) -> tuple[bool, float, float, tuple[tuple[int, str], ...]]:
        """(besteffort class, `be_key`, submit key)."""
        o = self.order
        if o is None:
            o = self.order = (self.cls is ServiceClass.BESTEFFORT, self.be_key(),
                              self.view.submit_time, self.plan_key[3])
        return o

    def be_key(self) -> float:
        """Best-effort order: submit time + predicted remaining time at its first count (a
        virtual deadline: shortest first among jobs of one age, and a job that waits moves ahead
        of every job submitted later by more than its own length: nothing starves)."""
        return self.view.submit_time + min(self.rem(self.counts[0]), 1e12)


def make_job(view: JobView, now: float, node_cap: int, total: int) -> Job:
    rng = gpu_range(view)
    it = view.intent
    cls = it.service_class if it else ServiceClass.STANDARD
    d = it.deadline if it else None
    rank = 0 if cls is ServiceClass.CRITICAL else 1
    return Job(view=view, counts=allowed_counts(*rng, node_cap, total) if rng else [view.gpus],
               est=estimate_remaining(view, now), deadline=d, hard=it is not None and it.hard,
               cls=cls, plan_key=(rank, d if d is not None else math.inf, view.submit_time,
                                  id_key(view.id)),
               ranged=rng is not None,
               user=(view.user if view.user and d is not None
                     and cls is not ServiceClass.BESTEFFORT else ""))


def resizable(j: JobView) -> bool:
    """A running job `deadline` may resize: managed, plainly RUNNING, elastic, with a range."""
    return (j.managed and j.state is JobState.RUNNING and j.intent is not None
            and j.intent.elastic and gpu_range(j) is not None)


Capper = Callable[[list[tuple[Job, int]]], set[JobId]]
"""The reserved pending jobs with a user (job, share) to the ids over their urgent share."""


@dataclass(slots=True)
class Share:
    gpus: int
    start: float
    dur: float | None
