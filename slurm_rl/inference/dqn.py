"""DRM-DQL and vanilla DQL (imports torch): the Q-network, its checkpoint, the greedy scheduler
and the trainer, docs/inference.md "Agents". `train` reads as CleanRL's dqn.py does: config
-> seeding -> env -> `_Trainer` (networks, optimiser, buffers, RNG) -> warm start -> loop; the
per-decision step, the update and the validation are `_Trainer` methods over its own state.

`QNet` scores every device from that device's feature row (features.py) and the masked mean of
all rows' hidden vectors, plus a linear term of the row, with shared weights: any device count
works. Double DQN with a target
network, a Huber loss and epsilon-greedy exploration over feasible devices.

The one difference between the two agents is what reward a layer decision is stored with.
Both hold every transition until its task has finished (its latency is not known before):
- DRM-DQL (`matching=True`): each decision gets minus its matched share of the task's latency
  (sim.py: how far that layer's finish pushed out the task's finish frontier), over the task's
  reference time; the shares sum to the latency.
- vanilla DQL (`matching=False`): the task's last decision gets minus the whole latency (same
  scale), every other decision 0 — the plain delayed reward.
Same network, same budget, same scenarios, same seeds.

Checkpoint: `{"config": QConfig fields, "state_dict": ..., "meta": {...}}`, torch.save; loaded
with `weights_only=True`. The scheduler runs the network in numpy (a placement is many tiny
forward passes; torch's per-call overhead would dominate).
"""

from __future__ import annotations

import functools
import math
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from slurm_rl.checkpoint_errors import CheckpointError, load_error, one_line
from slurm_rl.inference.env import (
    InferenceEnv,
    Obs,
    Scenario,
    randomised_scenarios,
    training_scenarios,
)
from slurm_rl.inference.features import (
    BASE_FEATURES,
    BASES,
    EFT_COLUMN,
    INPUT_FEATURES,
    N_FEATURES,
    candidate_mask,
    device_features,
    eft_gap,
    plan_gap,
)
from slurm_rl.inference.planner import for_base
from slurm_rl.inference.schedulers import (
    EarliestFinish,
    Lookahead,
    Scheduler,
    WholeModel,
    metrics,
    run_episode,
)
from slurm_rl.inference.sim import InferenceSim
from slurm_rl.params import describe, helped


@dataclass(frozen=True, kw_only=True)
class QConfig:
    features: int = BASE_FEATURES
    """How many of the feature columns (features.py) the network reads, from the first."""
    hidden: int = 64
    candidates: int = 0
    """Action set per layer (features.candidate_mask): the k earliest-finish feasible devices
    plus the input's; 0: every feasible device (checkpoints without the field)."""
    residual: float = 0.0
    """0: the plain Q-network. > 0: the HEFT-residual form, Q(s, d) = V(s) - gap(d) +
    residual * tanh(g(s, d)): gap is HEFT's score (features.EFT_COLUMN: how much later than
    the earliest the layer would finish on d, over the reference time), V a state value that
    does not change the choice, g the learned correction, its last layer zero at the start,
    so an untrained network places exactly as HEFT does and a trained one may deviate from
    HEFT's device only where the learned term outweighs the gap (at most 2 * residual)."""
    base: str = "heft"
    """What the residual form corrects: "heft" (gap = features.eft_gap), "plan" or "stream"
    (gap = features.plan_gap around the request or stream plan's device, planner.py: an
    untrained network places as schedulers.RequestPlan or StreamPlan does)."""


class QNet(nn.Module):
    def __init__(self, cfg: QConfig) -> None:
        super().__init__()
        if cfg.base not in BASES:
            raise ValueError(f"base: {cfg.base!r}, not one of {', '.join(BASES)}")
        self.cfg = cfg
        h = cfg.hidden
        self.embed = nn.Sequential(nn.Linear(cfg.features, h), nn.ReLU(), nn.Linear(h, h),
                                   nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * h, h), nn.ReLU(), nn.Linear(h, 1))
        # a linear path from the features: rules such as "earliest finish" are one step away
        self.skip = nn.Linear(cfg.features, 1)
        if cfg.residual > 0:  # HEFT plus a correction that starts at zero
            self.value = nn.Linear(h, 1)
            last = self.head[2]
            assert isinstance(last, nn.Linear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, D, N_FEATURES), mask (B, D) 0/1 -> Q (B, D) (masked entries are
        meaningless)."""
        gap = x[..., EFT_COLUMN] if self.cfg.residual > 0 else None
        x = x[..., : self.cfg.features]
        h = self.embed(x)
        m = mask.unsqueeze(-1)
        ctx = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1.0)
        g = self.head(torch.cat([h, ctx.expand_as(h)], -1))
        if gap is not None:
            q: torch.Tensor = (self.value(ctx).squeeze(-1) - gap
                               + self.cfg.residual * torch.tanh(g.squeeze(-1)))
            return q
        return (g + self.skip(x)).squeeze(-1)


def save(net: QNet, path: str | Path, meta: dict[str, Any]) -> None:
    torch.save({"config": asdict(net.cfg), "state_dict": net.state_dict(), "meta": meta},
               str(path))


def load(path: str | Path) -> tuple[QNet, dict[str, Any]]:
    """(the network in eval mode, meta); CheckpointError (one line: the path and why) for any
    file that is not a DRM-DQL checkpoint."""
    try:
        with warnings.catch_warnings():  # (torch warns about some pickle protocols)
            warnings.simplefilter("ignore")
            ck = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (torch raises many kinds; all mean the same)
        raise load_error(path, exc, kind="DRM-DQL") from None
    if not isinstance(ck, dict) or "config" not in ck or "state_dict" not in ck:
        raise CheckpointError(path, "not a DRM-DQL checkpoint (no 'config' and 'state_dict')")
    try:
        net = QNet(QConfig(**ck["config"]))
        net.load_state_dict(ck["state_dict"])
    except (TypeError, ValueError, RuntimeError) as exc:  # (a config or weights of another net)
        raise CheckpointError(path, f"not a DRM-DQL checkpoint ({one_line(str(exc))})") from None
    meta = ck.get("meta", {})
    return net.eval(), dict(meta) if isinstance(meta, dict) else {}


class QScheduler:
    """Greedy placement by a trained QNet (numpy forward pass)."""

    def __init__(self, net: QNet, name: str = "drm-dql") -> None:
        self.name = name
        self.features = net.cfg.features
        self.candidates = net.cfg.candidates
        self.residual = net.cfg.residual
        self.planner = for_base(net.cfg.base) if self.residual > 0 else None
        sd = {k: v.detach().numpy().astype(np.float64) for k, v in net.state_dict().items()}
        self.w = [(sd[f"{p}.weight"].T, sd[f"{p}.bias"])
                  for p in ("embed.0", "embed.2", "head.0", "head.2", "skip")]
        if self.residual > 0:
            self.w.append((sd["value.weight"].T, sd["value.bias"]))

    def q_values(self, f: np.ndarray, ok: np.ndarray,
                 gap: np.ndarray | None = None) -> np.ndarray:
        """Q of every device from its feature rows `f` (N_FEATURES columns); the residual
        form's HEFT gap is `gap` when given (float64, from the simulator), else f's column."""
        (w0, b0), (w1, b1), (w2, b2), (w3, b3), (ws, bs) = self.w[:5]
        x = f[:, : self.features]
        h = np.maximum(np.maximum(x @ w0 + b0, 0.0) @ w1 + b1, 0.0)
        n = int(ok.sum())
        ctx = (ok.astype(np.float64) @ h) / max(n, 1)
        k = h.shape[1]  # head.0 reads [h, ctx]: split its weight instead of concatenating
        z = np.maximum(h @ w2[:k] + (ctx @ w2[k:] + b2), 0.0)
        g = (z @ w3 + b3)[:, 0]
        if self.residual > 0:
            wv, bv = self.w[5]
            base = f[:, EFT_COLUMN] if gap is None else gap
            qr: np.ndarray = float((ctx @ wv + bv)[0]) - base + self.residual * np.tanh(g)
            return qr
        q: np.ndarray = g + (x @ ws + bs)[:, 0]
        return q

    def choose(self, sim: InferenceSim) -> int:
        planned = self.planner.device(sim) if self.planner is not None else None
        f, _ = device_features(sim, planned)
        ok = candidate_mask(sim, self.candidates, planned)
        gap = None
        if planned is not None:  # the plan's score in float64: an untrained net is the plan
            gap = plan_gap(sim.options().finish, planned, sim.task.t.ref_s)
        elif self.residual > 0:  # HEFT's own score in float64, so an untrained net is HEFT
            opts = sim.options()
            best = float(opts.finish[opts.feasible].min()) if opts.feasible.any() else 0.0
            gap = eft_gap(opts.finish, best, sim.task.t.ref_s)
        return int(np.argmax(np.where(ok, self.q_values(f, ok, gap), -np.inf)))


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    seed: int = helped("Seeds python, numpy, torch and the scenario draws.", 1)
    matching: bool = helped("True: DRM-DQL (matched per-layer rewards); False: vanilla DQL.", True)
    episodes: int = helped("Training episodes (one scenario each).", 40)
    scenarios: int = helped("Distinct random training scenarios (env.training_scenarios).", 64)
    hidden: int = helped("Hidden width of the Q-network.", 64)
    learning_rate: float = helped("Adam step size.", 3e-4)
    lr_end: float = helped(
        "Adam step size at the last episode, as a share of `learning_rate` (linear decay over "
        "the episodes; 1: constant).", 1.0)
    gamma: float = helped("Discount per layer decision.", 0.97)
    buffer: int = helped("Replay buffer transitions.", 30_000)
    batch: int = helped("Minibatch transitions.", 64)
    train_every: int = helped("Decisions between gradient steps.", 4)
    learning_starts: int = helped("Decisions before the first gradient step.", 1_000)
    target_every: int = helped("Decisions between target-network copies.", 1_000)
    eps_start: float = helped("Initial exploration rate.", 0.3)
    eps_end: float = helped("Final exploration rate.", 0.02)
    eps_fraction: float = helped("Share of the episodes over which epsilon decays.", 0.3)
    validate_every: int = helped("Episodes between greedy validations (learning curve).", 5)
    demo_episodes: int = helped(
        "Warm start: demonstration episodes put into the replay buffer (0: none).", 8)
    pretrain_steps: int = helped("Warm start: gradient steps on them before acting.", 1500)
    margin: float = helped("Warm start: large-margin loss on the demonstrated actions.", 0.2)
    demo_weight_end: float = helped(
        "Weight of the demonstration loss after `demo_decay` (1: the anchor never weakens).", 1.0)
    demo_decay: float = helped(
        "Share of the episodes over which that weight goes linearly from 1 to its end.", 0.5)
    demonstrator: str = helped(
        "Warm start: 'heft', or 'best': per demonstration episode the one of heft, lookahead "
        "and whole with the best return.", "heft")
    task_horizon: bool = helped(
        "True: a task's last decision ends the bootstrapping (Q = the rest of this task's "
        "cost); False: values run on into the next tasks.", False)
    single_model: float = helped(
        "Share of the training scenarios that stream one training structure only.", 0.0)
    load_max: float = helped(
        "Training scenarios' load is drawn uniformly from 0.2 to this.", 0.8)
    features: int = helped(
        f"Feature columns the network reads ({BASE_FEATURES}: the device's own; "
        f"{INPUT_FEATURES}: also the arrival stream's, features.py).", BASE_FEATURES)
    residual: float = helped(
        "0: the plain Q-network; > 0: HEFT plus a learned correction bounded by this "
        "(QConfig.residual: an untrained network is HEFT).", 0.0)
    log_cost: bool = helped(
        "True: a task costs log(1 + slowdown); False: its slowdown (task_rewards).", True)
    randomised: bool = helped(
        "True: the training scenarios are random settings of heldout.TRAIN_SEEDS "
        "(env.randomised_scenarios: 2-16 devices, edge to H100-class, 0.1-400 Gbit/s, "
        "shipped and generated training structures); False: env.training_scenarios.", False)
    base: str = helped(
        "What the residual form corrects (residual > 0): 'heft' (HEFT's finish gap), 'plan' "
        "(the request plan's device, planner.py: the whole task planned at its arrival) or "
        "'stream' (the stream plan's: the request plan charged for the requests behind it).",
        "heft")
    candidates: int = helped(
        "Action set per layer: the k feasible devices with the earliest estimated finish "
        "(HEFT's ranking) plus the one(s) holding the layer's input, for acting, learning and "
        "placing (stored in the checkpoint); 0: every feasible device.", 0)

    def __post_init__(self) -> None:
        if self.base not in BASES:
            raise ValueError(f"base: {self.base!r}, not one of {', '.join(BASES)}")
        if self.base != "heft" and self.residual <= 0:
            raise ValueError(f"base: {self.base!r} corrects a plan, which needs residual > 0")
        if self.demonstrator not in ("heft", "best"):
            raise ValueError(f"demonstrator: {self.demonstrator!r}, not 'heft' or 'best'")
        if not BASE_FEATURES <= self.features <= INPUT_FEATURES:
            raise ValueError(f"features: {self.features}, not {BASE_FEATURES}..{INPUT_FEATURES}")
        if not (math.isfinite(self.residual) and self.residual >= 0):
            raise ValueError(f"residual: {self.residual}, not a finite number >= 0")
        if not 0.0 < self.lr_end <= 1.0:
            raise ValueError(f"lr_end: {self.lr_end}, not in (0, 1]")
        if self.candidates < 0:
            raise ValueError(f"candidates: {self.candidates}, not >= 0")
        if not self.load_max > 0.2:
            raise ValueError(f"load_max: {self.load_max}, not above 0.2")


@dataclass(frozen=True, kw_only=True)
class Transition:
    """One layer decision, held until its task finishes (its reward is known only then)."""

    obs: Obs
    action: int
    next_obs: Obs
    done: bool
    """The episode ended here, or (`task_horizon`) the task's last layer: no bootstrapping."""


@dataclass(frozen=True, kw_only=True)
class Batch:
    """A minibatch of stored transitions, as tensors."""

    obs: torch.Tensor
    mask: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    next_mask: torch.Tensor
    done: torch.Tensor


class _Replay:
    def __init__(self, size: int, d: int, f: int) -> None:
        self.obs = np.zeros((size, d, f), np.float32)
        self.mask = np.zeros((size, d), np.float32)
        self.nobs = np.zeros((size, d, f), np.float32)
        self.nmask = np.zeros((size, d), np.float32)
        self.act = np.zeros(size, np.int64)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.size, self.n, self.i = size, 0, 0

    def add(self, t: Transition, reward: float) -> None:
        i = self.i
        self.obs[i], self.mask[i] = t.obs["devices"], t.obs["mask"]
        self.nobs[i], self.nmask[i] = t.next_obs["devices"], t.next_obs["mask"]
        self.act[i], self.rew[i], self.done[i] = t.action, reward, float(t.done)
        self.i, self.n = (i + 1) % self.size, min(self.n + 1, self.size)

    def sample(self, rng: np.random.Generator, b: int) -> Batch:
        ix = rng.integers(self.n, size=b)

        def rows(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a[ix])

        return Batch(obs=rows(self.obs), mask=rows(self.mask), action=rows(self.act),
                     reward=rows(self.rew), next_obs=rows(self.nobs),
                     next_mask=rows(self.nmask), done=rows(self.done))


class _Held:
    """Transitions with their rewards, kept until the episode's demonstrator is chosen."""

    def __init__(self) -> None:
        self.items: list[tuple[Transition, float]] = []

    def add(self, t: Transition, reward: float) -> None:
        self.items.append((t, reward))


def task_rewards(shares: Sequence[float], matching: bool, log_cost: bool = True) -> list[float]:
    """The rewards a finished task's layer decisions are stored with. The task's cost is
    log(1 + slowdown) (bounded, so a few disastrous exploratory placements do not swamp the
    targets), or with `log_cost` False the slowdown itself (the unit of the residual form's
    HEFT gap: a layer finishing later by x reference times delays its task by at most x);
    DRM-DQL splits it over the decisions in proportion to their matched shares of the
    latency, vanilla DQL gives it all to the task's last decision."""
    total = float(sum(shares))
    cost = float(np.log1p(total)) if log_cost else total
    if not matching:
        return [0.0] * (len(shares) - 1) + [-cost]
    if total <= 0:
        return [0.0] * len(shares)
    return [-cost * s / total for s in shares]


def validate(sched: QScheduler, scenarios: Sequence[Scenario], env: InferenceEnv) -> float:
    """Mean slowdown (latency / reference time) of greedy placement over `scenarios`."""
    out = []
    for sc in scenarios:
        sim = env.make_sim(sc)
        out.append(metrics(run_episode(sim, sched), sim.dropped).slowdown)
    return float(np.mean(out))


def _episode(env: InferenceEnv, seed: int, choose: Callable[[Obs], int],
             replay: _Replay | _Held, matching: bool,
             after_step: Callable[[], None] = lambda: None, task_horizon: bool = False,
             log_cost: bool = True) -> float:
    """One episode; every transition is held until its task finishes, then stored with its
    reward (`task_rewards`). Returns the env's return (minus the sum of slowdowns)."""
    obs, _ = env.reset(seed=seed)
    held: dict[int, Transition] = {}
    done, ret = False, 0.0
    while not done:
        a = choose(obs)
        nobs, r, done, _, info = env.step(a)
        ret += r
        held[info["step"]] = Transition(obs=obs, action=info["action"], next_obs=nobs,
                                        done=done)
        for task_steps, shares in info["released"]:
            for s, reward in zip(task_steps, task_rewards(shares, matching, log_cost),
                                         strict=True):
                t = held.pop(s)
                if task_horizon and s == task_steps[-1]:
                    t = replace(t, done=True)
                replay.add(t, reward)
        obs = nobs
        after_step()
    return ret


def _demonstrate(env: InferenceEnv, seed: int, cfg: TrainConfig, demos: _Replay) -> None:
    """One demonstration episode into `demos`: HEFT's, or (demonstrator 'best') the best
    return of HEFT, lookahead and whole-model on the same scenario and stream."""
    cands: list[Scheduler] = [EarliestFinish()]
    if cfg.demonstrator == "best":
        cands += [Lookahead(), WholeModel()]
    best_ret, best_held = -math.inf, _Held()
    for s in cands:
        held = _Held()
        ret = _episode(env, seed, functools.partial(_follow, env, s), held, cfg.matching,
                       task_horizon=cfg.task_horizon, log_cost=cfg.log_cost)
        if s is cands[0] or ret > best_ret:
            best_ret, best_held = ret, held
    for t, reward in best_held.items:
        demos.add(t, reward)


def _follow(env: InferenceEnv, s: Scheduler, obs: Obs) -> int:
    """The demonstrator's action: it reads the env's simulator, not the observation."""
    assert env.sim is not None
    return s.choose(env.sim)


def _td_loss(net: QNet, target: QNet, batch: Batch, gamma: float,
             margin: float) -> torch.Tensor:
    """Double-DQN Huber loss; with `margin` > 0 (demonstrations) also the large-margin term."""
    qall = net(batch.obs, batch.mask)
    q = qall.gather(1, batch.action[:, None]).squeeze(1)
    with torch.no_grad():
        na = net(batch.next_obs, batch.next_mask).masked_fill(
            batch.next_mask == 0, -1e9).argmax(1, keepdim=True)
        qn = target(batch.next_obs, batch.next_mask).gather(1, na).squeeze(1)
        y = batch.reward + gamma * (1.0 - batch.done) * qn
    loss = nn.functional.smooth_l1_loss(q, y)
    if margin > 0:  # the demonstrated action must beat every other by `margin`
        other = torch.ones_like(qall).scatter(1, batch.action[:, None], 0.0) * margin
        loss = loss + ((qall + other).masked_fill(batch.mask == 0, -1e9).max(1).values
                       - q).mean()
    return loss


def epsilon(cfg: TrainConfig, ep: int) -> float:
    """Exploration rate of episode `ep`: linear from `eps_start` to `eps_end`."""
    return max(cfg.eps_end, cfg.eps_start - (cfg.eps_start - cfg.eps_end)
               * ep / max(1.0, cfg.eps_fraction * cfg.episodes))


def demo_weight(cfg: TrainConfig, ep: int) -> float:
    """Weight of the demonstration loss in episode `ep`: linear from 1 to `demo_weight_end`."""
    return 1.0 - (1.0 - cfg.demo_weight_end) * min(
        1.0, ep / max(1.0, cfg.demo_decay * cfg.episodes))


def learning_rate(cfg: TrainConfig, ep: int) -> float:
    """Adam step size in episode `ep`: linear from `learning_rate` to `lr_end` of it."""
    return cfg.learning_rate * (1.0 - (1.0 - cfg.lr_end) * ep / max(1, cfg.episodes - 1))


class _Trainer:
    """What one training run owns: the online and target networks, the optimiser, the replay
    and demonstration buffers, the exploration RNG, the decision count and the learning
    curve with the best-validated weights."""

    def __init__(self, cfg: TrainConfig, env: InferenceEnv, validation: Sequence[Scenario],
                 rng: np.random.Generator, log: Callable[[str], None]) -> None:
        self.cfg, self.env, self.validation, self.rng, self.log = cfg, env, validation, rng, log
        qcfg = QConfig(hidden=cfg.hidden, features=cfg.features, candidates=cfg.candidates,
                       residual=cfg.residual, base=cfg.base)
        self.net, self.target = QNet(qcfg), QNet(qcfg)
        self.target.load_state_dict(self.net.state_dict())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate)
        self.replay = _Replay(cfg.buffer, env.max_devices, N_FEATURES)
        self.demos = _Replay(cfg.buffer, env.max_devices, N_FEATURES)
        self.sched = QScheduler(self.net)
        """The acting copy of `net` (numpy): refreshed every episode and every 100 decisions."""
        self.steps = 0
        self.demo_w = 1.0
        self.curve: list[dict[str, float]] = []
        self.best, self.best_state = float("inf"), self.net.state_dict()
        self.t0 = time.perf_counter()

    def warm_start(self) -> None:
        """DQfD, the same for both agents: HEFT's episodes, stored with the agent's own
        rewards in the demonstration buffer; pretraining steps on it (TD + large margin).
        Every later step adds a demonstration batch's TD + margin loss to the online loss."""
        cfg = self.cfg
        for k in range(cfg.demo_episodes):
            _demonstrate(self.env, 999_000_000 + cfg.seed * 1000 + k, cfg, self.demos)
        for k in range(cfg.pretrain_steps if self.demos.n >= cfg.batch else 0):
            self.update(self.demos.sample(self.rng, cfg.batch),
                        self.demos.sample(self.rng, cfg.batch), 1.0)
            if (k + 1) % cfg.target_every == 0:
                self.target.load_state_dict(self.net.state_dict())
        self.target.load_state_dict(self.net.state_dict())
        if cfg.demo_episodes:
            self.record(0, 0.0, 0.0)

    def episode(self, ep: int, eps: float) -> float:
        """Training episode `ep` at exploration rate `eps`; returns the env's return."""
        cfg = self.cfg
        self.demo_w = demo_weight(cfg, ep)
        if cfg.lr_end != 1.0:
            for g in self.opt.param_groups:
                g["lr"] = learning_rate(cfg, ep)
        self.sched = QScheduler(self.net)
        return _episode(self.env, cfg.seed * 1_000_003 + ep, functools.partial(self.act, eps=eps),
                        self.replay, cfg.matching, self.after_step, cfg.task_horizon,
                        cfg.log_cost)

    def act(self, obs: Obs, eps: float) -> int:
        """Epsilon-greedy over the feasible (candidate) devices."""
        ok = obs["mask"].astype(bool)
        if self.rng.random() < eps:
            return int(self.rng.choice(np.flatnonzero(ok)))
        q = self.sched.q_values(obs["devices"].astype(np.float64), ok)
        return int(np.argmax(np.where(ok, q, -np.inf)))

    def after_step(self) -> None:
        """Count the decision; a gradient step every `train_every` once learning has started;
        a target copy every `target_every`."""
        cfg = self.cfg
        self.steps += 1
        if (self.steps >= cfg.learning_starts and self.steps % cfg.train_every == 0
                and self.replay.n >= cfg.batch):
            batch = self.replay.sample(self.rng, cfg.batch)
            demo = (self.demos.sample(self.rng, cfg.batch)
                    if self.demos.n >= cfg.batch and self.demo_w > 0 else None)
            self.update(batch, demo, self.demo_w)
            if self.steps % 100 == 0:
                self.sched = QScheduler(self.net)
        if self.steps % cfg.target_every == 0:
            self.target.load_state_dict(self.net.state_dict())

    def update(self, batch: Batch, demo: Batch | None, weight: float) -> None:
        """One Adam step on the TD loss of `batch`, plus (DQfD) TD + margin on a `demo`
        batch, weighted by `weight`."""
        cfg = self.cfg
        loss = _td_loss(self.net, self.target, batch, cfg.gamma, 0.0)
        if demo is not None:
            loss = loss + weight * _td_loss(self.net, self.target, demo, cfg.gamma, cfg.margin)
        self.opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.net.parameters(), 10.0)
        self.opt.step()

    def record(self, ep: int, eps: float, ret: float) -> None:
        """Validate the greedy network, add a learning-curve row, keep the best weights."""
        val = validate(QScheduler(self.net), self.validation, self.env)
        self.curve.append({"episode": ep, "decisions": self.steps, "epsilon": eps,
                           "train_return": ret, "validation_slowdown": val,
                           "seconds": time.perf_counter() - self.t0})
        if val < self.best:
            self.best = val
            self.best_state = {k: v.clone() for k, v in self.net.state_dict().items()}
        self.log(f"episode {ep}: {self.steps} decisions, eps {eps:.2f}, validation slowdown "
                 f"{val:.3f} (best {self.best:.3f}), {time.perf_counter() - self.t0:.0f} s")

    def best_network(self) -> QNet:
        self.net.load_state_dict(self.best_state)
        return self.net.eval()


def train(cfg: TrainConfig, validation: Sequence[Scenario],
          log: Callable[[str], None] = print) -> tuple[QNet, list[dict[str, float]]]:
    """Train; returns the best-validated network and the learning curve rows (episode 0: after
    the demonstration warm start)."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)  # tiny batches: more threads only contend on a shared machine
    rng = np.random.default_rng(cfg.seed)

    scenarios = (randomised_scenarios(cfg.scenarios, seed=cfg.seed) if cfg.randomised
                 else training_scenarios(cfg.scenarios, seed=cfg.seed,
                                         single_model=cfg.single_model, load_max=cfg.load_max))
    env = InferenceEnv(scenarios, candidates=cfg.candidates, base=cfg.base)
    run = _Trainer(cfg, env, validation, rng, log)

    run.warm_start()
    if cfg.residual > 0 and not cfg.demo_episodes:
        run.record(0, 0.0, 0.0)  # the untrained network (HEFT or the plan) is a candidate too
    for ep in range(cfg.episodes):
        eps = epsilon(cfg, ep)
        ret = run.episode(ep, eps)
        if (ep + 1) % cfg.validate_every == 0 or ep + 1 == cfg.episodes:
            run.record(ep + 1, eps, ret)
    return run.best_network(), run.curve


def list_params() -> str:
    return describe(TrainConfig)
