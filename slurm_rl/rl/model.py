"""The network of the `rl` policy and its checkpoint format (docs/rl.md, "Agent").

`JobScorer`: one small MLP with shared weights scores every job slot from that job's features
and the cluster's (so any queue length works); the mean score is the deterministic action, a
state-independent log-std makes it a Gaussian policy for PPO. A value head reads the masked mean
of the per-job hidden vectors plus the cluster features.

Checkpoint: `{"config": constructor args, "state_dict": ..., "meta": {...}}`, saved with
`torch.save` and loaded with `torch.load(..., weights_only=True)` (plain tensors, dicts, lists,
numbers and strings only). Imports torch: only the trainer and the `rl` policy (lazily) import
this module.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from slurm_rl.checkpoint_errors import CheckpointError, load_error, one_line
from slurm_rl.policies.rl.features import N_CLUSTER_FEATURES, N_JOB_FEATURES


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Constructor arguments, stored in the checkpoint."""

    job_features: int = N_JOB_FEATURES
    cluster_features: int = N_CLUSTER_FEATURES
    hidden: int = 64
    max_jobs: int = 64
    """The observation's job slots (FeatureConfig.max_jobs) the network was trained with."""
    init_log_std: float = -0.5


class JobScorer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.embed = nn.Sequential(
            nn.Linear(cfg.job_features + cfg.cluster_features, h), nn.Tanh(),
            nn.Linear(h, h), nn.Tanh())
        self.score = nn.Linear(h, 1)
        self.value = nn.Sequential(nn.Linear(h + cfg.cluster_features, h), nn.Tanh(),
                                   nn.Linear(h, 1))
        self.log_std = nn.Parameter(torch.tensor(float(cfg.init_log_std)))
        nn.init.orthogonal_(self.score.weight, 0.01)  # CleanRL: small initial policy output
        nn.init.zeros_(self.score.bias)

    def _hidden(self, jobs: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
        jobs = jobs[..., :self.cfg.job_features]  # a checkpoint from before later columns
        c = cluster.unsqueeze(-2).expand(*jobs.shape[:-1], cluster.shape[-1])
        out: torch.Tensor = self.embed(torch.cat([jobs, c], dim=-1))
        return out

    def forward(self, jobs: torch.Tensor, mask: torch.Tensor, cluster: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """jobs (B, M, F), mask (B, M) 0/1, cluster (B, C) -> (mean scores (B, M), value (B,))."""
        h = self._hidden(jobs, cluster)
        mean = self.score(h).squeeze(-1)
        m = mask.to(h.dtype).unsqueeze(-1)
        pooled = (h * m).sum(-2) / m.sum(-2).clamp(min=1.0)
        value = self.value(torch.cat([pooled, cluster], dim=-1)).squeeze(-1)
        return mean, value

    def scores(self, jobs: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
        """Mean scores only (the deterministic policy): jobs (N, F) of the shown jobs,
        cluster (C,) -> (N,)."""
        out: torch.Tensor = self.score(self._hidden(jobs, cluster)).squeeze(-1)
        return out


def save(model: JobScorer, path: str | Path, meta: dict[str, Any] | None = None) -> None:
    """Write the checkpoint (constructor args with the weights); creates the folder."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": asdict(model.cfg), "state_dict": model.state_dict(),
                "meta": dict(meta or {})}, p)


def load(path: str | Path) -> tuple[JobScorer, dict[str, Any]]:
    """Read a checkpoint with weights_only=True; returns (model in eval mode, meta). Raises
    CheckpointError (one line: the path and why) for any file that is not one."""
    p = Path(path)
    try:
        with warnings.catch_warnings():  # (torch warns about some pickle protocols)
            warnings.simplefilter("ignore")
            blob = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (torch raises many kinds; all mean the same)
        raise load_error(p, exc) from None
    if not isinstance(blob, dict) or "config" not in blob or "state_dict" not in blob:
        raise CheckpointError(p, "not a slurm-rl checkpoint (no 'config' and 'state_dict')")
    try:
        model = JobScorer(ModelConfig(**blob["config"]))
        model.load_state_dict(blob["state_dict"])
    except (TypeError, ValueError, RuntimeError) as exc:  # (a config or weights of another net)
        raise CheckpointError(p, f"not a slurm-rl checkpoint ({one_line(str(exc))})") from None
    model.eval()
    meta = blob.get("meta", {})
    return model, dict(meta) if isinstance(meta, dict) else {}
