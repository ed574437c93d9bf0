"""`rl`: the learned policy (docs/rl.md). Orders pending jobs by the mean score a trained
`rl.model.JobScorer` gives each, from `rl/features.py`'s observation, through the same
`decision_from_scores` the training environment uses, so the simulator and the daemon decide as
training did.

Deterministic (the Gaussian's mean, under `torch.no_grad`), stateless, order-only (declares no
capability: no preemption, GPU counts unchanged). torch is imported when the policy is built,
never when policy names are listed, so `rlsbatch` never loads it.

A checkpoint that does not load, or a network that returns a non-finite score, raises
`RLPolicyError` with one line saying why: the daemon catches it and decides with its fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.policies.options import build
from slurm_rl.rl.features import FeatureConfig, decision_from_scores, features

NAME = "rl"


class RLPolicyError(RuntimeError):
    """The learned policy can not decide (its checkpoint does not load, or its network
    returned NaN or infinity); the message is one line."""


def default_checkpoint() -> Path:
    """The checkpoint shipped in the package (docs/rl.md: how it was trained)."""
    return Path(str(resources.files("slurm_rl") / "data" / "rl" / "default.pt"))


@dataclass(frozen=True, kw_only=True)
class RL:
    name: str = field(default=NAME, init=False)
    checkpoint: str | None = None
    """Path of a checkpoint (`slurm-rl train --out`); None: the shipped one."""
    _model: Any = field(init=False, repr=False, compare=False)
    _fcfg: FeatureConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        path = Path(self.checkpoint) if self.checkpoint else default_checkpoint()
        try:
            import torch

            from slurm_rl.rl import model as rl_model

            torch.set_num_threads(1)  # a 64-slot MLP: threads only add overhead
            net, _ = rl_model.load(path)
        except Exception as exc:  # noqa: BLE001 (any load failure is the same to the daemon)
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise RLPolicyError(f"rl: checkpoint {path} does not load: {why}") from exc
        object.__setattr__(self, "_model", net)
        object.__setattr__(self, "_fcfg", FeatureConfig(max_jobs=net.cfg.max_jobs))

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        import torch

        f = features(snapshot, self._fcfg)
        n = len(f.shown_ids)
        if n == 0:
            return decision_from_scores(snapshot, f.shown_ids, [], policy=self.name)
        with torch.no_grad():
            s = self._model.scores(torch.from_numpy(f.job_feats[:n]),
                                   torch.from_numpy(f.cluster_feats)).numpy()
        if not np.isfinite(s).all():
            bad = int((~np.isfinite(s)).sum())
            raise RLPolicyError(f"rl: the network returned a non-finite score at "
                                f"t={snapshot.time:.0f} ({bad} of {n} jobs)")
        return decision_from_scores(snapshot, f.shown_ids, s, policy=self.name)


def new(**options: Any) -> RL:
    """Options: checkpoint (the shipped one)."""
    return build(RL, options)
