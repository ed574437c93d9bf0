"""`edf`: earliest deadline first.

Pending jobs with a deadline (intent.deadline) come first, earliest deadline first; jobs
without one follow in submit order. Ties by submit time, then job id. Non-preemptive; never
changes GPU counts. Reads: intent.deadline, submit_time, id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobView
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

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now = snapshot.time
        jobs = managed_pending(snapshot)
        with_dl = sorted((j for j in jobs if deadline_of(j) is not None),
                         key=lambda j: (deadline_of(j), submit_key(j)))
        without = [j for j in jobs if deadline_of(j) is None]
        ranked: list[tuple[JobView, str, int | None]] = []
        for j in with_dl:
            d = deadline_of(j)
            assert d is not None
            ranked.append((j, f"deadline {fmt_time(d)} (in {fmt_dur(d - now)})", None))
        ranked += [(j, "no deadline: after deadline jobs, submit order", None) for j in without]
        return Decision(policy=self.name, order=orders(ranked))


def new(**options: Any) -> Edf:
    """No options."""
    return build(Edf, options)
