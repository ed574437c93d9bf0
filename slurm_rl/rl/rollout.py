"""Rollouts and validation episodes for the trainer (`rl/train.py`), one function per worker
task: each takes plain data (weights as a state dict, scenarios, a seed) and returns numpy
arrays, so it runs alike in the trainer's process or in a worker process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from slurm_rl.policies.rl.features import FeatureConfig, teacher_column
from slurm_rl.rl.env import Scenario, SchedulingEnv
from slurm_rl.rl.model import JobScorer, ModelConfig

Arrays = dict[str, npt.NDArray[Any]]
_ENVS: dict[tuple[Scenario, ...], SchedulingEnv] = {}  # per process: traces stay loaded


def _env(scenarios: Sequence[Scenario], max_jobs: int) -> SchedulingEnv:
    key = tuple(scenarios)
    env = _ENVS.get(key)
    if env is None or env.fcfg.max_jobs != max_jobs:
        env = _ENVS[key] = SchedulingEnv(scenarios, features_cfg=FeatureConfig(max_jobs=max_jobs),
                                         use_gpu_choice=False)
    return env


def _model(cfg: dict[str, Any], state: dict[str, torch.Tensor]) -> JobScorer:
    torch.set_num_threads(1)
    net = JobScorer(ModelConfig(**cfg))
    net.load_state_dict(state)
    net.eval()
    return net


def _tensors(obs: dict[str, npt.NDArray[Any]]) -> tuple[torch.Tensor, ...]:
    return (torch.from_numpy(obs["jobs"]).unsqueeze(0),
            torch.from_numpy(obs["mask"].astype(np.float32)).unsqueeze(0),
            torch.from_numpy(obs["cluster"]).unsqueeze(0))


def log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
    """Sum over the used slots of the Gaussian's log density: (B, M) -> (B,)."""
    dist = torch.distributions.Normal(mean, log_std.exp())
    return (dist.log_prob(actions) * mask).sum(-1)


def collect(cfg: dict[str, Any], state: dict[str, torch.Tensor], scenarios: Sequence[Scenario],
            steps: int, seed: int) -> Arrays:
    """`steps` decision points with actions sampled from the Gaussian policy, episodes drawn
    with `seed`; the last episode is cut (its value bootstraps it). Returns the batch arrays
    plus `ep_returns` (returns of episodes that ended)."""
    net = _model(cfg, state)
    env = _env(scenarios, net.cfg.max_jobs)
    gen = torch.Generator().manual_seed(seed)
    m = net.cfg.max_jobs
    buf: dict[str, list[Any]] = {k: [] for k in ("jobs", "mask", "cluster", "actions", "logp",
                                                 "values", "rewards", "dones")}
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    ep = 0.0
    with torch.no_grad():
        for _ in range(steps):
            jobs, mask, cluster = _tensors(obs)
            mean, value = net(jobs, mask, cluster)
            noise = torch.randn(mean.shape, generator=gen)
            act = (mean + net.log_std.exp() * noise) * mask
            for k, v in (("jobs", obs["jobs"]), ("mask", obs["mask"]),
                         ("cluster", obs["cluster"])):
                buf[k].append(v)
            buf["actions"].append(act[0].numpy())
            buf["logp"].append(float(log_prob(mean, net.log_std, act, mask)[0]))
            buf["values"].append(float(value[0]))
            a = np.zeros((2, m), np.float32)
            a[0] = act[0].numpy()
            obs, reward, done, _, _ = env.step(a)
            buf["rewards"].append(reward)
            buf["dones"].append(done)
            ep += reward
            if done:
                returns.append(ep)
                ep = 0.0
                obs, _ = env.reset()
        jobs, mask, cluster = _tensors(obs)
        last_value = float(net(jobs, mask, cluster)[1][0])
    out: Arrays = {k: np.asarray(v) for k, v in buf.items()}
    out["mask"] = out["mask"].astype(np.float32)
    out["last_value"] = np.asarray(last_value, np.float32)
    out["ep_returns"] = np.asarray(returns, np.float64)
    return out


def gae(rewards: npt.NDArray[Any], values: npt.NDArray[Any], dones: npt.NDArray[Any],
        last_value: float, gamma: float, lam: float) -> tuple[npt.NDArray[Any], ...]:
    """Generalised advantage estimates and returns (CleanRL's loop); dones[t] ends the episode
    after step t."""
    n = len(rewards)
    adv = np.zeros(n, np.float32)
    last = 0.0
    for t in reversed(range(n)):
        nxt = last_value if t == n - 1 else values[t + 1]
        live = 0.0 if dones[t] else 1.0
        delta = rewards[t] + gamma * nxt * live - values[t]
        last = delta + gamma * lam * live * last
        adv[t] = last
    return adv, adv + values.astype(np.float32)


def evaluate_episode(cfg: dict[str, Any], state: dict[str, torch.Tensor] | None,
                     scenario: Scenario, ranking: str = "net") -> float:
    """Return of one whole episode of `scenario` with deterministic mean scores (`ranking`
    "net"), or with a fixed rule for reference: a teacher column (`features.TEACHERS`, lowest
    first, e.g. "gittins" or "est_work") or "fifo" (oldest first). Return = -(average JCT in
    hours)."""
    m = int(cfg["max_jobs"])
    env = _env((scenario,), m)
    net = _model(cfg, state) if ranking == "net" and state is not None else None
    col = teacher_column(ranking) if ranking not in ("net", "fifo") else 0
    obs, _ = env.reset(seed=0, options={"scenario": 0})
    total, done = 0.0, False
    with torch.no_grad():
        while not done:
            a = np.zeros((2, m), np.float32)
            if net is not None:
                a[0] = net(*_tensors(obs))[0][0].numpy()
            elif ranking != "fifo":
                a[0] = -obs["jobs"][:, col]
            obs, reward, done, _, _ = env.step(a)  # fifo: all ties -> slot (oldest) order
            total += reward
    return total


def imitation_targets(jobs: npt.NDArray[Any], mask: npt.NDArray[Any],
                      teacher: str = "gittins") -> npt.NDArray[Any]:
    """Per state, minus the `teacher` column (`features.TEACHERS`) z-scored over the used
    slots: the scores that rank jobs as that index does (without preemptions)."""
    g = -jobs[..., teacher_column(teacher)].astype(np.float64)
    n = np.maximum(mask.sum(-1, keepdims=True), 1.0)
    mu = (g * mask).sum(-1, keepdims=True) / n
    sd = np.sqrt((((g - mu) * mask) ** 2).sum(-1, keepdims=True) / n) + 1e-3
    return np.asarray(((g - mu) / sd) * mask, np.float32)


def config_dict(cfg: ModelConfig) -> dict[str, Any]:
    return asdict(cfg)


def run_task(args: tuple[Any, ...]) -> Any:
    """One worker task, `(name, *arguments)` with name "collect" or "evaluate_episode": what
    the trainer hands its executor (slurm_rl/executor.py), in-process, to a process or to a Slurm
    job alike."""
    name, *rest = args
    if name not in ("collect", "evaluate_episode"):
        raise ValueError(f"unknown rollout task {name!r}")
    return globals()[name](*rest)
