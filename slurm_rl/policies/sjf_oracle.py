"""`sjf-oracle`: shortest job first by the TRUE remaining run time. An ORACLE.

Reads true durations through the simulator's `capabilities.Oracle` (`OracleReading`): a
reference for what perfect knowledge of durations would buy, not a scheduler for a real
cluster. Pending jobs are ranked by true remaining time (for a job not yet started, its whole
duration); jobs without a true duration (none anywhere but the simulator) follow in submit
order. Non-preemptive; never changes GPU counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
from slurm_rl.policies.capabilities import Oracle
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders, submit_key

NAME = "sjf-oracle"


def true_remaining(oracle: Oracle | None, jobs: Iterable[JobView]) -> dict[JobId, float]:
    """Each job's true remaining time, for the jobs the oracle knows (none without one)."""
    if oracle is None:
        return {}
    out = {}
    for j in jobs:
        rem = oracle.remaining_s(j.id)
        if rem is not None:
            out[j.id] = rem
    return out


@dataclass(frozen=True, kw_only=True)
class SjfOracle:
    name: str = field(default=NAME, init=False)
    _oracle: list[Oracle | None] = field(default_factory=lambda: [None], init=False,
                                         repr=False, compare=False)
    """The bound oracle (a one-slot list: the dataclass is frozen, binding is not state the
    decisions keep)."""

    def bind_oracle(self, oracle: Oracle | None) -> None:
        """OracleReading (capabilities.py): the simulator binds its true durations."""
        self._oracle[0] = oracle

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = managed_pending(snapshot)
        rem = true_remaining(self._oracle[0], jobs)
        known = sorted((j for j in jobs if j.id in rem), key=lambda j: (rem[j.id], submit_key(j)))
        ranked: list[tuple[JobView, str, int | None]] = [
            (j, f"oracle: true remaining {fmt_dur(rem[j.id])}", None) for j in known
        ]
        ranked += [(j, "oracle: no true duration known, submit order", None)
                   for j in jobs if j.id not in rem]
        return Decision(policy=self.name, order=orders(ranked))


def new(**options: Any) -> SjfOracle:
    """No options."""
    return build(SjfOracle, options)
