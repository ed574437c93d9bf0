"""`rl`: the learned policy (docs/rl.md), behind this narrow front: `NAME`, `new` and the
policy classes. The live side of reinforcement learning, after SB3's learn/predict split: the
daemon and the simulator import this package, never the trainer (`slurm_rl/rl/`, which
imports this one for the observation and the action it trains on).

Inside, by concern (private to the package):
- features.py: the observation of a snapshot (job rows, cluster features), pure numpy;
- action.py: scores (and a GPU choice) -> Decision, the same path the training environment
  takes;
- scorer.py: the network's forward pass in numpy; checkpoint.py: reading a trained checkpoint
  safely, without the trainer;
- order.py: `LearnedOrder` and the order-only `RL`; preempting.py: `RLPreempting`, the default
  (requeues decided by the same network's scores of running jobs).

`new` puts either under the queue-health guard (`policies/guard.py`, on by default): `gittins`
decides while jobs starve.

Deterministic (the Gaussian's mean). GPU counts unchanged. torch is imported only to unpickle a
checkpoint when the policy is built, never when policy names are listed, so `rlsbatch` never
loads it.
"""

from __future__ import annotations

from typing import Any

from slurm_rl.policies.gittins import Gittins
from slurm_rl.policies.guard import GuardConfig, Guarded
from slurm_rl.policies.options import build
from slurm_rl.policies.rl import preempting
from slurm_rl.policies.rl.order import (
    NAME,
    RL,
    LearnedOrder,
    RLPolicyError,
    default_checkpoint,
    preempt_by_work,
    remaining_work,
)
from slurm_rl.policies.rl.preempting import RLPreempting

__all__ = ["NAME", "RL", "LearnedOrder", "RLPolicyError", "RLPreempting", "default_checkpoint",
           "new", "preempt_by_work", "remaining_work"]

_GUARD_OPTIONS = {"guard_mode": "mode", "guard_wait_s": "wait_s",
                  "guard_victim_run_s": "victim_run_s", "guard_hold_s": "hold_s",
                  "guard_check_s": "check_s"}


def new(**options: Any) -> Guarded | LearnedOrder:
    """Options: checkpoint (the shipped one); preempt_margin (default 0: preemptive,
    `RLPreempting`, with its options rescore_s, max_restarts, protect_gpus and protect_run_s;
    none: order-only, the network's order of pending jobs alone); guard (on, the default, or
    off) with guard_mode, guard_wait_s, guard_victim_run_s, guard_hold_s and guard_check_s
    (`policies/guard.py`)."""
    rest = dict(options)
    guard = str(rest.pop("guard", "on")).lower()
    if guard not in ("on", "off", "true", "false", "1", "0"):
        raise ValueError(f"guard must be on or off, got {options['guard']!r}")
    values: dict[str, Any] = {}
    for key, field_name in _GUARD_OPTIONS.items():
        if key in rest:
            v = rest.pop(key)
            if field_name == "mode":
                values[field_name] = str(v)
                continue
            try:
                values[field_name] = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{key} must be a number >= 0, got {v!r}") from None
    if guard in ("off", "false", "0"):
        if values:
            raise ValueError(f"{', '.join(sorted(set(_GUARD_OPTIONS) & set(options)))}: "
                             "not with guard=off")
        return _unguarded(rest)
    config = GuardConfig(**values)
    return Guarded(_unguarded(rest), Gittins(), config)


def _unguarded(options: dict[str, Any]) -> LearnedOrder:
    margin = options.get("preempt_margin", 0.0)
    if margin is None or margin == "none":
        rest = {k: v for k, v in options.items() if k != "preempt_margin"}
        extra = sorted(set(rest) & {"rescore_s", "max_restarts", "protect_gpus", "protect_run_s"})
        if extra:
            raise ValueError(f"{', '.join(extra)}: not with preempt_margin=none (order-only)")
        return build(RL, rest)
    return preempting.new(**{**options, "preempt_margin": margin})
