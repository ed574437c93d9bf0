"""`fifo`: Slurm's default order, by submit time (ties by job id). The baseline.

Ranks every managed pending job in submit order, which is the order Slurm already uses, so on
the real cluster the daemon's ranks change nothing. Never resizes or preempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.policies.options import build
from slurm_rl.policies.ordering import managed_pending, orders

NAME = "fifo"


@dataclass(frozen=True, kw_only=True)
class Fifo:
    name: str = field(default=NAME, init=False)
    # Declares no capability (capabilities.py): it only orders jobs, so the simulator may
    # skip decide() calls that could not change anything.

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        ranked = ((j, "submit order", None) for j in managed_pending(snapshot))
        return Decision(policy=self.name, order=orders(ranked))


def new(**options: Any) -> Fifo:
    """No options."""
    return build(Fifo, options)
