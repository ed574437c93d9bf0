"""Policy registry: one module per policy, each exporting `NAME` and `new(**options)`.

Modules are imported only when asked for, so that listing names costs nothing and a policy's
heavy dependencies (torch, for the RL policy) load only when that policy is used.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from slurm_rl.core import Policy

_MODULES: dict[str, str] = {
    "fifo": "slurm_rl.policies.fifo",
    "deadline": "slurm_rl.policies.deadline",
    "sjf": "slurm_rl.policies.sjf",
    "sjf-oracle": "slurm_rl.policies.sjf_oracle",
    "srtf-oracle": "slurm_rl.policies.srtf_oracle",
    "edf": "slurm_rl.policies.edf",
    "tiresias": "slurm_rl.policies.tiresias",
    "elasticflow": "slurm_rl.policies.elasticflow",
}

ORACLES = frozenset(n for n in _MODULES if n.endswith("-oracle"))
"""Policies that read true durations (`JobView.oracle_remaining_s`): references, not schedulers."""


def names() -> tuple[str, ...]:
    """Registered policy names that have a module installed."""
    out = []
    for name, module in _MODULES.items():
        if importlib.util.find_spec(module) is not None:
            out.append(name)
    return tuple(out)


def make(name: str, **options: Any) -> Policy:
    """Build a policy by name; unknown names raise ValueError listing the valid ones."""
    if name not in _MODULES or name not in names():
        raise ValueError(f"unknown policy {name!r} (valid: {', '.join(names())})")
    module = importlib.import_module(_MODULES[name])
    policy: Policy = module.new(**options)
    return policy
