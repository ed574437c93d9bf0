"""rl/env.py: the gymnasium environment over the stepped simulator."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from slurm_rl.policies.rl.features import FeatureConfig
from slurm_rl.rl.env import Scenario, SchedulingEnv, default_scenarios
from slurm_rl.sim import engine, snapshots
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.run import resolve_trace_path
from slurm_rl.splits import HELD_OUT, TRAINING

SMALL = Scenario(trace="data:itp-deadline-cluster06.csv", window="0:60", load=1.5)
"""60 jobs of a TRAINING cluster, about 40 decision points."""


def _episode(env: SchedulingEnv, seed: int = 0, action: np.ndarray | None = None
             ) -> tuple[float, int, dict[str, object]]:
    env.reset(seed=seed)
    env.action_space.seed(seed)
    total, steps, done = 0.0, 0, False
    info: dict[str, object] = {}
    while not done:
        a = env.action_space.sample() if action is None else action
        _, reward, done, truncated, info = env.step(a)
        assert not truncated
        total += reward
        steps += 1
    return total, steps, info


def test_env_checker_passes() -> None:
    check_env(SchedulingEnv([SMALL], features_cfg=FeatureConfig(max_jobs=8)),
              skip_render_check=True)


def test_a_random_agent_runs_a_full_default_episode() -> None:
    env = SchedulingEnv()
    total, steps, info = _episode(env, seed=1)
    assert env.sim is not None and env.sim.done and steps > 0
    assert env.scenario in env.scenarios and total < 0
    assert info["completed"] == len(env.sim.result().jobs)


def test_default_scenarios_use_training_clusters_only() -> None:
    used = {s.trace.removesuffix(".csv")[-2:] for s in default_scenarios()}
    assert used == set(TRAINING) and not used & set(HELD_OUT)


def test_reward_sum_is_minus_the_jcts_over_the_scale() -> None:
    """Little's law: the integral of jobs in the system is the sum of JCTs."""
    env = SchedulingEnv([SMALL], deadline_bonus=0.0)
    total, steps, info = _episode(env, seed=3)
    assert env.sim is not None
    jobs = env.sim.result().jobs
    jct = sum(j.end - j.submit for j in jobs)
    assert steps > 10
    assert info["reward_scale_s"] == 3600.0 * len(jobs)
    assert total == pytest.approx(-jct / (3600.0 * len(jobs)), rel=1e-9)
    assert total == pytest.approx(-sum(j.end - j.submit for j in jobs) / 3600 / len(jobs))


def test_deadline_bonus_counts_deadlines_met() -> None:
    plain, _, _ = _episode(SchedulingEnv([SMALL], reward_scale_s=1000.0), seed=5)
    env = SchedulingEnv([SMALL], reward_scale_s=1000.0, deadline_bonus=0.5)
    bonus, _, info = _episode(env, seed=5)
    assert env.sim is not None
    met = sum(j.deadline is not None and j.end <= j.deadline for j in env.sim.result().jobs)
    assert met > 0 and info["deadlines_met"] == met
    assert bonus - plain == pytest.approx(0.5 * met)


def test_a_scenario_without_decisions_is_refused_when_asked_for() -> None:
    quiet = Scenario(trace="data:itp-deadline-cluster10.csv", window="0:60", load=1.0)
    with pytest.raises(ValueError, match="no decision point"):
        SchedulingEnv([quiet]).reset(seed=0, options={"scenario": 0})
    env = SchedulingEnv([quiet, SMALL])
    env.reset(seed=0)
    assert env.scenario == SMALL  # drawn again


def test_the_env_never_binds_the_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    def trap(*args: object) -> None:
        raise AssertionError("the oracle of true durations was built")

    monkeypatch.setattr(snapshots.SimOracle, "__init__", trap)
    monkeypatch.setattr(snapshots.SimOracle, "remaining_s", trap)
    monkeypatch.setattr(engine.SimOracle, "__init__", trap)
    _episode(SchedulingEnv([SMALL]), seed=2)


def _with_durations(tmp_path: Path, factor: float) -> str:
    src = resolve_trace_path(SMALL.trace)
    out = tmp_path / f"x{factor}.csv"
    with src.open() as f, out.open("w", newline="") as g:
        rows = list(csv.DictReader(f))
        w = csv.DictWriter(g, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({**r, "duration": str(int(float(r["duration"]) * factor) + 3600)})
    return str(out)


def test_observations_do_not_change_when_only_true_durations_do(tmp_path: Path) -> None:
    """Two traces alike but for every job's true duration: the observations match at every
    decision point before the first job ends (after it, the histories differ)."""
    fixed = EngineConfig(nodes=1, gpus_per_node=4, skip_futile=False,  # every arrival and tick
                         time_limit=TimeLimitEstimate(fixed_s=10 * 86400.0))  # not from durations
    seen = []
    for factor in (1.0, 3.0):
        sc = Scenario(trace=_with_durations(tmp_path, factor), window="0:60", nodes=5)
        env = SchedulingEnv([sc], engine=fixed)
        obs, info = env.reset(seed=0)
        run: list[dict[str, bytes]] = []
        action = np.zeros((2, env.fcfg.max_jobs), np.float32)
        action[0] = np.linspace(1, -1, env.fcfg.max_jobs)
        done = False
        while not done and info["completed"] == 0 and len(run) < 200:
            run.append({k: v.tobytes() for k, v in obs.items()})
            obs, _, done, _, info = env.step(action)
        seen.append(run)
    n = min(len(r) for r in seen)
    assert n >= 50
    assert seen[0][:n] == seen[1][:n]
