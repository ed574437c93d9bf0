"""The trainer's hyper-parameters (`[train]` in a scenarios file; `slurm-rl train
--list-params`): a frozen dataclass with a help string per field, checked when built so a bad
value is refused before any work. No torch here: `slurm-rl train --help` and the scenarios
check read it without loading the trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_rl.params import describe, helped
from slurm_rl.policies.rl.features import TEACHERS


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    seed: int = helped("Seeds python, numpy, torch and every rollout.", 1)
    iterations: int = helped("PPO iterations (rollout + update).", 40)
    steps_per_worker: int = helped("Decision points each worker collects per iteration.", 512)
    workers: int = helped("Rollout processes (the batch is workers x steps_per_worker).", 2)
    learning_rate: float = helped("Adam step size (annealed linearly to 0).", 3e-4)
    gamma: float = helped("Discount per decision point.", 0.995)
    gae_lambda: float = helped("GAE lambda.", 0.95)
    update_epochs: int = helped("PPO epochs over each batch.", 4)
    minibatch_size: int = helped("Decision points per minibatch.", 256)
    clip_coef: float = helped("PPO ratio clip.", 0.2)
    ent_coef: float = helped("Entropy bonus (the Gaussian's log-std).", 0.0)
    vf_coef: float = helped("Value loss weight.", 0.5)
    max_grad_norm: float = helped("Gradient norm clip.", 0.5)
    hidden: int = helped("Hidden width of the per-job MLP and the value head.", 64)
    max_jobs: int = helped("Job slots the network sees (the oldest pending jobs).", 64)
    init_log_std: float = helped("Initial log-std of the score Gaussian.", -1.0)
    imitation_epochs: int = helped("Warm start: epochs regressing scores onto the teacher "
                               "column's ranking before PPO (0: none).", 30)
    imitation_teacher: str = helped("Warm start: the job feature whose ranking (lowest first) "
                                "the scores imitate: est_work (stated remaining run time x "
                                "GPUs), est_remaining, limit_work, time_limit, gittins, "
                                "attained_gpu or attained_run.",
                                "est_work")
    imitation_steps: int = helped("Warm start: decision points collected per worker.", 512)
    validate_every: int = helped("Validate (deterministic, whole episodes) every N iterations.", 5)

    def __post_init__(self) -> None:
        if self.imitation_teacher not in TEACHERS:
            raise ValueError(f"[train] imitation_teacher: unknown teacher "
                             f"{self.imitation_teacher!r} (valid: {', '.join(TEACHERS)})")
        # Refused here, before any work: each would otherwise fail (or divide by zero) in the
        # middle of a run.
        for name, low in (("iterations", 0), ("imitation_epochs", 0), ("steps_per_worker", 1),
                          ("workers", 1), ("update_epochs", 1), ("minibatch_size", 1),
                          ("hidden", 1), ("max_jobs", 1), ("imitation_steps", 1),
                          ("validate_every", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"[train] {name}: must be at least {low}, got "
                                 f"{getattr(self, name)!r}")
        for name, ok, want in (("learning_rate", self.learning_rate > 0, "more than 0"),
                               ("clip_coef", self.clip_coef > 0, "more than 0"),
                               ("max_grad_norm", self.max_grad_norm > 0, "more than 0"),
                               ("ent_coef", self.ent_coef >= 0, "at least 0"),
                               ("vf_coef", self.vf_coef >= 0, "at least 0"),
                               ("gamma", 0 < self.gamma <= 1, "in (0, 1]"),
                               ("gae_lambda", 0 <= self.gae_lambda <= 1, "in [0, 1]")):
            value = getattr(self, name)
            if not (ok and math.isfinite(value)):
                raise ValueError(f"[train] {name}: must be a finite number {want}, got "
                                 f"{value!r}")


def list_params() -> str:
    return describe(TrainConfig)
