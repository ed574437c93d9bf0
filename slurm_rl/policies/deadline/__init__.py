"""`deadline`: the deadline-aware heuristic (its rules: policy.py). The package's front: the
modules inside are private to it.

    policy.py      DeadlinePolicy: the rules, the capabilities, the Decision and its reasons
    allocation.py  Allocation: one decision's plan, starts and resizes now, spare GPUs
    profile.py     GPUs reserved over time (the plan's profile)
    jobs.py        one job's records: what its view alone decides, and its fate in the plan
    state.py       DeadlineState: what the policy keeps between calls
"""

from __future__ import annotations

from slurm_rl.policies.capabilities import Gated, Preempting, Resizing, Stateful
from slurm_rl.policies.deadline.policy import NAME, DeadlinePolicy, new

__all__ = ["NAME", "DeadlinePolicy", "new"]

_resizing: type[Resizing] = DeadlinePolicy
_preempting: type[Preempting] = DeadlinePolicy
_gated: type[Gated] = DeadlinePolicy
_stateful: type[Stateful] = DeadlinePolicy
