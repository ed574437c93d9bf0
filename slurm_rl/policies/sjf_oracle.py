"""`sjf-oracle`: shortest job first by the TRUE remaining run time. An ORACLE.

Reads `JobView.oracle_remaining_s`, which only the simulator sets: a reference for what perfect
knowledge of durations would buy, not a scheduler for a real cluster. Pending jobs are ranked by
true remaining time (for a job not yet started, its whole duration); jobs without an oracle value
follow in submit order. Non-preemptive; never changes GPU counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies._common import build, fmt_dur, managed_pending, orders, submit_key

NAME = "sjf-oracle"


@dataclass(frozen=True, kw_only=True)
class SjfOracle:
    name: str = field(default=NAME, init=False)
    # Declared for the simulator: it may skip decide() calls that could not change anything.
    preempts: ClassVar[bool] = False
    resizes: ClassVar[bool] = False

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        known = sorted((j for j in jobs if j.oracle_remaining_s is not None),
                       key=lambda j: (j.oracle_remaining_s, submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"oracle: true remaining {fmt_dur(j.oracle_remaining_s or 0.0)}", None)
            for j in known
        ]
        ranked += [(j, "oracle: no true duration known, submit order", None)
                   for j in jobs if j.oracle_remaining_s is None]
        return Decision(policy=self.name, order=orders(ranked))


def new(**options: Any) -> SjfOracle:
    """No options."""
    return build(SjfOracle, options)
