"""`SchedulingEnv`: a gymnasium environment over the stepped simulator (docs/rl.md,
"Environment").

One episode replays one scenario (a trace window on a cluster sized for a load, a seed), drawn
from the env's list at every `reset` with the env's seeded generator. A step is one decision
point of the engine (`Simulator.step`): the agent sees the snapshot's features
(`policies/rl/features.py`, the same code the live `rl` policy runs) and answers with a score
per job slot and a GPU choice per slot, which become the Decision the engine applies.

The agent is an order-only policy (it declares no capability): the engine's skip rule asks it
only where an order could change something, and never binds it the oracle of true durations.

Reward per step: -(job-seconds spent in the system since the last decision point) /
`reward_scale_s`, plus `deadline_bonus` per job that ended by its deadline in that time. The
job-seconds are the integral of the number of jobs in the system (pending or running) over
time, so an episode's return is -(sum of JCTs) / reward_scale_s (Little's law; a job still in
the system when an episode is cut counts up to then). By default reward_scale_s is 3600 s x
the episode's job count: the return is minus the average JCT in hours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.policies.rl.action import decision_from_scores
from slurm_rl.policies.rl.features import (
    FEATURE_BOUND,
    N_CLUSTER_FEATURES,
    N_JOB_FEATURES,
    FeatureConfig,
    Features,
    RowCache,
    features,
)
from slurm_rl.sim import trace as tr
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import DecisionPoint, Simulator
from slurm_rl.sim.run import load_jobs, resolve_trace_path
from slurm_rl.splits import TRAINING

Obs = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One episode's setting."""

    trace: str
    """A trace path, or data:NAME for a shipped one."""
    window: str | None = None
    """START:COUNT jobs of the trace (None: all)."""
    load: float = 1.0
    """The cluster is sized so that the window's mean demand is this share of its GPUs."""
    nodes: int | None = None
    """An explicit cluster size instead (`load` is then ignored)."""
    seed: int = 0
    """The engine's seed (which jobs are made elastic, with `elastic_fraction`)."""
    fmt: str = "itp-deadline"
    gpus_per_node: int = 4
    time_limit: TimeLimitEstimate | None = None
    """The limits of jobs the trace gives none (None: the engine's, factor by default)."""
    family: str = ""
    """What the trainer's learning curve groups validation returns by: the workload family it
    was generated from, or the trace's file name (rl/scenarios.py)."""


def default_scenarios(jobs: int = 400) -> tuple[Scenario, ...]:
    """Windows of `jobs` jobs from the TRAINING clusters only (`splits.TRAINING`; the
    held-out ones are for evaluation), at loads 0.8 and 1.0: with 400 jobs an episode takes
    0.05-0.3 s of CPU with a random agent (10-400 decision points)."""
    out = []
    for c in TRAINING:
        for start in (0, 1000):
            for load in (0.8, 1.0):
                out.append(Scenario(trace=f"data:itp-deadline-cluster{c}.csv",
                                    window=f"{start}:{jobs}", load=load))
    return tuple(out)


class _EnvDriven:
    """The engine's policy while the env drives it: order-only, declares no capability, and
    is never asked itself (the env answers every decision point)."""

    name = "rl-env"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        raise RuntimeError("the environment answers decision points itself (Simulator.apply)")


class SchedulingEnv(gym.Env[Obs, npt.NDArray[np.float32]]):
    """Observation: Dict(jobs: (max_jobs, N_JOB_FEATURES) float32, mask: MultiBinary(max_jobs),
    cluster: (N_CLUSTER_FEATURES,) float32). Action: Box (2, max_jobs): row 0 scores in
    [-1, 1] (higher runs first), row 1 GPU choice in [0, 1] (range jobs only). Reward: see the
    module docstring. An episode ends when the trace is done (terminated)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenarios: Sequence[Scenario] | None = None, *,
                 features_cfg: FeatureConfig | None = None,
                 engine: EngineConfig | None = None, reward_scale_s: float | None = None,
                 deadline_bonus: float = 0.0, use_gpu_choice: bool = True) -> None:
        """`engine`: every engine setting but nodes, gpus_per_node and seed (the scenario's);
        `reward_scale_s`: None for 3600 s x the episode's job count; `deadline_bonus`: added
        per job that ends by its deadline; `use_gpu_choice`: False leaves GPU counts alone."""
        self.scenarios = tuple(scenarios) if scenarios else default_scenarios()
        self.fcfg = features_cfg or FeatureConfig()
        self._rows = RowCache()  # (only a cache of job rows: features.py)
        self.engine = engine
        self.reward_scale_s = reward_scale_s
        self.deadline_bonus = deadline_bonus
        self.use_gpu_choice = use_gpu_choice
        m = self.fcfg.max_jobs
        self.observation_space = spaces.Dict({  # type: ignore[assignment]
            "jobs": spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, (m, N_JOB_FEATURES), np.float32),
            "mask": spaces.MultiBinary(m),
            "cluster": spaces.Box(-FEATURE_BOUND, FEATURE_BOUND, (N_CLUSTER_FEATURES,),
                                  np.float32),
        })
        low = np.stack([np.full(m, -1.0), np.zeros(m)]).astype(np.float32)
        high = np.ones((2, m), dtype=np.float32)
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        self._traces: dict[tuple[str, str, str | None], tuple[tr.TraceJob, ...]] = {}
        self.sim: Simulator | None = None
        self.scenario: Scenario | None = None
        self._point: DecisionPoint | None = None
        self._feats: Features | None = None
        self._scale = 1.0
        self._job_s = 0.0
        self._met = 0

    # -- gymnasium API --------------------------------------------------------------------

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """`options={"scenario": i}` picks scenario i instead of drawing one. A drawn scenario
        in which no decision could change anything (every job starts at once) is drawn again,
        up to 100 times."""
        super().reset(seed=seed)
        fixed = options is not None and "scenario" in options
        for _ in range(1 if fixed else 100):
            i = (int(options["scenario"]) if options and fixed
                 else int(self.np_random.integers(len(self.scenarios))))
            self._start(self.scenarios[i])
            if self._point is not None:
                return self._observe(), self._info()
        raise ValueError("no decision point in the scenario(s): every job starts on arrival "
                         "(raise the load or the window)")

    def _start(self, sc: Scenario) -> None:
        self.scenario = sc
        jobs = self._jobs(sc)
        nodes = sc.nodes or tr.nodes_for_load(jobs, sc.load, sc.gpus_per_node)
        base = self.engine or EngineConfig(nodes=nodes, gpus_per_node=sc.gpus_per_node)
        cfg = replace(base, nodes=nodes, gpus_per_node=sc.gpus_per_node, seed=sc.seed,
                      time_limit=sc.time_limit or base.time_limit)
        self.sim = Simulator(jobs, _EnvDriven(), cfg)
        n = len(jobs) - self.sim.dropped
        self._scale = self.reward_scale_s or 3600.0 * max(n, 1)
        self._job_s, self._met = 0.0, 0
        self._point = self.sim.step()

    def step(self, action: npt.NDArray[np.float32]
             ) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        sim, point, feats = self.sim, self._point, self._feats
        if sim is None or point is None or feats is None:
            raise RuntimeError("step() after the episode ended or before reset()")
        a = np.asarray(action, dtype=np.float32).reshape(2, self.fcfg.max_jobs)
        sim.apply(decision_from_scores(point.snapshot, feats.shown_ids, a[0],
                                       a[1] if self.use_gpu_choice else None, policy="rl"))
        self._point = sim.step()
        job_s, met = sim.job_s - self._job_s, sim.deadlines_met - self._met
        self._job_s, self._met = sim.job_s, sim.deadlines_met
        reward = -job_s / self._scale + self.deadline_bonus * met
        return self._observe(), float(reward), self._point is None, False, self._info()

    # -- helpers --------------------------------------------------------------------------

    def _jobs(self, sc: Scenario) -> tuple[tr.TraceJob, ...]:
        key = (sc.trace, sc.fmt, sc.window)
        jobs = self._traces.get(key)
        if jobs is None:
            jobs = self._traces[key] = load_jobs(resolve_trace_path(sc.trace), sc.fmt,
                                                 sc.window)
        return jobs

    def _observe(self) -> Obs:
        m = self.fcfg.max_jobs
        if self._point is None:  # the episode is over: nothing to show
            self._feats = None
            return {"jobs": np.zeros((m, N_JOB_FEATURES), np.float32),
                    "mask": np.zeros(m, np.int8),
                    "cluster": np.zeros(N_CLUSTER_FEATURES, np.float32)}
        f = self._feats = features(self._point.snapshot, self.fcfg, cache=self._rows)
        return {"jobs": f.job_feats, "mask": f.mask, "cluster": f.cluster_feats}

    def _info(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None
        return {"time": sim.now, "job_s": sim.job_s, "completed": sim.completed,
                "deadlines_met": sim.deadlines_met, "reward_scale_s": self._scale,
                "shown_ids": self._feats.shown_ids if self._feats else ()}
