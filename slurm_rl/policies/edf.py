"""`edf`: earliest deadline first.

Pending jobs with a deadline (intent.deadline) come first, earliest deadline first; jobs
without one follow in submit order. Ties by submit time, then job id. Non-preemptive; never
changes GPU counts. Reads: intent.deadline, submit_time, id, user, gpus.

No buying priority (urgency.py): a user's deadline jobs may hold and ask for at most
`urgent_share` of the cluster's GPUs (running deadline jobs counted first, then the pending ones
earliest deadline first); those beyond it wait with the jobs without a deadline, in submit order.
Only while jobs of two or more users wait; jobs without a user are never capped.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies import urgency
from slurm_rl.policies.formatting import fmt_dur, fmt_time
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key

NAME = "edf"


def deadline_of(job: JobView) -> float | None:
    return job.intent.deadline if job.intent else None


@dataclass(frozen=True, kw_only=True)
class Edf:
    name: str = field(default=NAME, init=False)
    # Declares no capability (capabilities.py): it only orders jobs, so the simulator may
    # skip decide() calls that could not change anything.
    urgent_share: float = urgency.DEFAULT_SHARE
    """A user's deadline jobs hold and ask for at most this share of the cluster's GPUs; the
    rest wait with the jobs without a deadline."""

    def __post_init__(self) -> None:
        urgency.check_share(self.urgent_share)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now = snapshot.time
        jobs = managed_pending(snapshot)
        with_dl = sorted((j for j in jobs if deadline_of(j) is not None),
                         key=lambda j: (deadline_of(j), submit_key(j)))
        without = [j for j in jobs if deadline_of(j) is None]
        capped: set[int] = set()
        if any(map(_user, with_dl)):  # users to cap (none in traces without them)
            capped = set(urgency.capped_in(snapshot, [(j.user, j.gpus) for j in with_dl],
                                           urgency.has_deadline, self.urgent_share,
                                           set(map(_user, jobs))))
        ranked: list[tuple[JobView, str, int | None]] = []
        for j in [j for i, j in enumerate(with_dl) if i not in capped] if capped else with_dl:
            d = deadline_of(j)
            assert d is not None
            ranked.append((j, f"deadline {fmt_time(d)} (in {fmt_dur(d - now)})", None))
        if not capped:
            ranked += [(j, "no deadline: after deadline jobs, submit order", None)
                       for j in without]
            return Decision(policy=self.name, order=orders(ranked))
        late = [j for i, j in enumerate(with_dl) if i in capped]  # with those, in submit order
        for j in sorted(without + late, key=submit_key):
            why = ("no deadline: after deadline jobs, submit order" if deadline_of(j) is None
                   else urgency.capped_reason(j.user, self.urgent_share, _why(j, now)))
            ranked.append((j, why, None))
        return Decision(policy=self.name, order=orders(ranked))


def _why(job: JobView, now: float) -> str:
    d = deadline_of(job)
    assert d is not None
    return f"deadline {fmt_time(d)} (in {fmt_dur(d - now)})"


_user = operator.attrgetter("user")


def new(**options: Any) -> Edf:
    """Options: urgent_share (0.25)."""
    return build(Edf, options)
