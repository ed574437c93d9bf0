"""`InferenceEnv`: a gymnasium environment over the inference simulator (docs/inference.md).

Same conventions as the training-job `SchedulingEnv`: one episode is one scenario (drawn at
every `reset` from the env's list with its seeded generator, or `options={"scenario": i}`); a
step is one decision (here: the device for the current layer).

Observation: Dict(devices: (max_devices, N_FEATURES) float32 — features.py, padding rows are 0;
mask: MultiBinary(max_devices), 1 where the layer fits). Action: Discrete(max_devices).
Reward: the delayed global reward, paid when it becomes known: at the step after which tasks
finished, minus their latencies over their reference times (so an episode's return is minus the
sum of slowdowns), minus `drop_penalty` per task refused for lack of memory.
`info["released"]` carries each finished task's decision indices and matched shares (sim.py)
so a learner can credit every layer decision — that is DRM-DQL's matching (dqn.py);
`info["step"]` is the index of the decision just taken. An action naming a masked or missing
device is replaced by the earliest-finish feasible device (`info["invalid_action"]`; the device
used is `info["action"]`).
`candidates=k` (k > 0) cuts the mask to the layer's candidate set (features.candidate_mask:
the k earliest-finish feasible devices plus the ones holding its inputs); 0 keeps them all.
`base="plan"` (or `"stream"`) gives the plan-residual network its base score: feature column
EFT_COLUMN is `features.plan_gap` around the planned device (planner.py), which the candidate
set includes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from slurm_rl.inference import cluster as cl
from slurm_rl.inference import heldout
from slurm_rl.inference.features import (
    EFT_CAP,
    N_FEATURES,
    candidate_mask,
    device_features,
)
from slurm_rl.inference.planner import for_base
from slurm_rl.inference.profile import Profile, resolve
from slurm_rl.inference.sim import InferenceSim, StreamConfig, TaskRecord

Obs = dict[str, npt.NDArray[Any]]
TRAIN_MODELS = ("vgg", "resnet", "bert")
HELD_OUT_MODELS = ("mobilenet", "gpt")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    mix: str = "mixed"
    """A compute-power mix (cluster.MIXES)."""
    gbps: float = 10.0
    models: tuple[str, ...] = TRAIN_MODELS
    load: float = 0.5
    tasks: int = 16
    noise: float = 0.1
    seed: int = 0
    setting: int = -1
    """>= 0: the cluster, structure and load are heldout.setting(this seed)'s instead (mix,
    gbps, models and load are then not read)."""

    def cluster(self) -> cl.Cluster:
        if self.setting >= 0:
            return heldout.setting(self.setting).cluster
        return cl.make(cl.MIXES[self.mix], self.gbps)


def training_scenarios(n: int = 64, seed: int = 0, single_model: float = 0.0,
                       load_max: float = 0.8) -> tuple[Scenario, ...]:
    """Random scenarios over the training structures only: mix, 1-100 Gbit/s (log-uniform),
    load 0.2-`load_max`; a `single_model` share of them streams one of the structures, the rest all
    of them (drawn after the others, so 0 gives the same scenarios as before it existed)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        out.append(Scenario(mix=str(rng.choice(list(cl.MIXES))),
                            gbps=float(10 ** rng.uniform(0, 2)),
                            models=TRAIN_MODELS, load=float(rng.uniform(0.2, load_max)),
                            seed=seed * 100_000 + k))
    if single_model > 0:
        pick = np.random.default_rng([seed, 7])
        out = [dataclasses.replace(sc, models=(str(pick.choice(TRAIN_MODELS)),))
               if pick.random() < single_model else sc for sc in out]
    return tuple(out)


def randomised_scenarios(n: int = 64, seed: int = 0, tasks: int = 16,
                         offset: int = 0) -> tuple[Scenario, ...]:
    """`n` scenarios over the training range of the random settings (heldout.TRAIN_SEEDS, the
    ones that fit), block `seed` of it (100 000 settings a block, from `offset` on): 2-16
    devices from edge to H100-class, 0.1-400 Gbit/s, the training structures (shipped and
    generated), load 0.3-0.95. The evaluation's settings (heldout.HELD_OUT_SEEDS) are never
    among them."""
    block = heldout.TRAIN_SEEDS[(seed % 9) * 100_000 + offset:]
    return tuple(Scenario(setting=s.seed, tasks=tasks, seed=s.seed)
                 for s in heldout.settings(block, n))


def randomised_validation(n: int = 16, tasks: int = 16) -> tuple[Scenario, ...]:
    """Validation episodes for randomised training: the last block of heldout.TRAIN_SEEDS,
    which `randomised_scenarios` never draws from (and the held-out evaluation never sees)."""
    block = heldout.TRAIN_SEEDS[900_000:]
    return tuple(Scenario(setting=s.seed, tasks=tasks, seed=s.seed)
                 for s in heldout.settings(block, n))


class InferenceEnv(gym.Env[Obs, np.int64]):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenarios: Sequence[Scenario] | None = None, *, max_devices: int = 16,
                 drop_penalty: float = 10.0, candidates: int = 0, base: str = "heft") -> None:
        self.scenarios = tuple(scenarios) if scenarios else training_scenarios()
        self.max_devices = max_devices
        self.drop_penalty = drop_penalty
        self.candidates = candidates
        self.planner = for_base(base)
        self.observation_space = spaces.Dict({  # type: ignore[assignment]
            "devices": spaces.Box(-10.0, EFT_CAP, (max_devices, N_FEATURES), np.float32),
            "mask": spaces.MultiBinary(max_devices)})
        self.action_space = spaces.Discrete(max_devices)  # type: ignore[assignment]
        self._profiles: dict[str, Profile] = {}
        self.sim: InferenceSim | None = None
        self.scenario: Scenario | None = None
        self._released: list[TaskRecord] = []
        self._dropped = 0

    def make_sim(self, sc: Scenario) -> InferenceSim:
        if sc.setting >= 0:
            st = heldout.setting(sc.setting)
            if st.cluster.n > self.max_devices:
                raise ValueError(f"scenario has {st.cluster.n} devices, the env shows "
                                 f"{self.max_devices}")
            return InferenceSim(st.cluster, [st.profile], StreamConfig(
                tasks=sc.tasks, load=st.load, noise=sc.noise, seed=sc.seed))
        profs = []
        for m in sc.models:
            if m not in self._profiles:
                self._profiles[m] = resolve(m)
            profs.append(self._profiles[m])
        cluster = sc.cluster()
        if cluster.n > self.max_devices:
            raise ValueError(f"scenario has {cluster.n} devices, the env shows {self.max_devices}")
        return InferenceSim(cluster, profs, StreamConfig(tasks=sc.tasks, load=sc.load,
                                                         noise=sc.noise, seed=sc.seed))

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        if options is not None and "scenario" in options:
            i = int(options["scenario"])
        else:
            i = int(self.np_random.integers(len(self.scenarios)))
        self.scenario = self.scenarios[i]
        self.sim = self.make_sim(self.scenario)
        self._released, self._dropped = [], 0
        self._skip_infeasible()
        return self._observe(), self._info(-1)

    def _skip_infeasible(self) -> None:
        sim = self.sim
        assert sim is not None
        while not sim.done and not sim.options().feasible.any():
            self._released += sim.drop()
            self._dropped += 1

    def step(self, action: np.int64 | int) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        sim = self.sim
        if sim is None or sim.done:
            raise RuntimeError("step() after the episode ended or before reset()")
        step = sim.step_count
        a = int(action)
        ok = candidate_mask(sim, self.candidates, self._planned())
        invalid = not (0 <= a < len(ok) and ok[a])
        if invalid:  # a masked device: the earliest-finish feasible one instead, and say so
            a = int(np.argmin(np.where(ok, sim.options().finish, np.inf)))
        self._released, self._dropped = sim.place(a), 0
        self._skip_infeasible()
        reward = -sum(r.latency / r.ref_s for r in self._released)
        reward -= self.drop_penalty * self._dropped
        info = self._info(step)
        info["invalid_action"] = invalid
        info["action"] = a
        return self._observe(), float(reward), sim.done, False, info

    def _observe(self) -> Obs:
        m = self.max_devices
        feats = np.zeros((m, N_FEATURES), np.float32)
        mask = np.zeros(m, np.int8)
        sim = self.sim
        if sim is not None and not sim.done:
            planned = self._planned()
            f, _ = device_features(sim, planned)
            ok = candidate_mask(sim, self.candidates, planned)
            feats[: len(f)] = f
            mask[: len(ok)] = ok
        return {"devices": feats, "mask": mask}

    def _planned(self) -> int | None:
        """The planned device of the current layer (base "plan" or "stream"), else None."""
        if self.planner is None or self.sim is None:
            return None
        return self.planner.device(self.sim)

    def _info(self, step: int) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None
        return {"step": step, "dropped": self._dropped, "time": sim.now,
                "released": tuple((r.steps, tuple(s / r.ref_s for s in r.shares))
                                  for r in self._released)}
