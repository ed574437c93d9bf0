"""features.candidates / candidate_mask and the `candidates` option (fifth round): the action
set is HEFT's k earliest-finish feasible devices plus the input's, wherever the agent acts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from slurm_rl.inference import dqn
from slurm_rl.inference.env import InferenceEnv, Scenario
from slurm_rl.inference.features import candidate_mask, candidates
from slurm_rl.inference.schedulers import EarliestFinish, RandomFeasible

SMALL = (Scenario(mix="mixed", gbps=5.0, models=("vgg", "bert"), tasks=4, load=0.8, seed=1),
         Scenario(mix="gpu", gbps=50.0, models=("resnet",), tasks=3, load=0.9, seed=2))


def test_candidates_keep_the_top_k_feasible_plus_the_holder_and_nothing_infeasible() -> None:
    finish = np.array([5.0, 1.0, 3.0, 2.0, 0.5, 4.0, 2.0])
    feasible = np.array([True, True, True, True, False, True, True])
    # device 4 finishes first but has no memory; of the tie 3, 6 (2.0) k = 2 keeps the lower
    assert np.flatnonzero(candidates(finish, feasible, [], 3)).tolist() == [1, 3, 6]
    assert np.flatnonzero(candidates(finish, feasible, [0], 2)).tolist() == [0, 1, 3]
    # a holder without memory stays out; a holder already in the top k adds nothing
    assert np.flatnonzero(candidates(finish, feasible, [4, 1], 2)).tolist() == [1, 3]
    assert np.flatnonzero(candidates(finish, feasible, [5, 0], 1)).tolist() == [0, 1, 5]
    assert candidates(finish, feasible, [0], 0).tolist() == feasible.tolist()  # 0: all
    assert candidates(finish, feasible, [], 99).tolist() == feasible.tolist()
    none = np.zeros(7, dtype=bool)
    assert not candidates(finish, none, [0], 3).any()


def test_candidate_mask_on_the_simulator_holds_heft_and_the_input_device() -> None:
    rng = np.random.default_rng(0)
    env = InferenceEnv(SMALL)
    for sc in range(len(SMALL)):
        env.reset(seed=0, options={"scenario": sc})
        sim, heft, walk = env.sim, EarliestFinish(), RandomFeasible(3)
        assert sim is not None
        while not sim.done:
            _, _, finish, feasible = sim.options()
            if not feasible.any():
                sim.drop()
                continue
            k = int(rng.integers(1, 4))
            m = candidate_mask(sim, k)
            lay = sim.task.t.profile.layers[sim.layer]
            holders = {sim.cluster.source if j < 0 else sim.task.devices[j] for j in lay.inputs}
            top = set(np.argsort(np.where(feasible, finish, np.inf),
                                 kind="stable")[:min(k, int(feasible.sum()))].tolist())
            want = top | {d for d in holders if feasible[d]}
            assert set(np.flatnonzero(m).tolist()) == want
            assert not (m & ~feasible).any()
            assert m[heft.choose(sim)]
            assert candidate_mask(sim, 0).tolist() == feasible.tolist()
            sim.place(walk.choose(sim))  # random placements: inputs spread over devices


def test_the_option_reaches_env_replay_checkpoint_and_greedy_placement(tmp_path: Path) -> None:
    env = InferenceEnv(SMALL, candidates=2)
    obs, _ = env.reset(seed=0, options={"scenario": 1})
    assert env.sim is not None
    assert obs["mask"][: env.sim.cluster.n].astype(bool).tolist() == \
        candidate_mask(env.sim, 2).tolist()
    cfg = dqn.TrainConfig(episodes=1, scenarios=2, learning_starts=50, train_every=8,
                          target_every=100, validate_every=1, buffer=2000, hidden=8,
                          demo_episodes=0, candidates=2)
    net, _ = dqn.train(cfg, SMALL[1:], log=lambda s: None)
    assert net.cfg.candidates == 2
    dqn.save(net, tmp_path / "q.pt", {})
    loaded, _ = dqn.load(tmp_path / "q.pt")
    sched = dqn.QScheduler(loaded)
    assert sched.candidates == 2
    env.reset(seed=0, options={"scenario": 0})
    sim = env.sim
    assert sim is not None
    while not sim.done:
        if not sim.options().feasible.any():
            sim.drop()
            continue
        d = sched.choose(sim)
        assert candidate_mask(sim, 2)[d]
        sim.place(d)
    # a checkpoint written before the option loads as "every device"
    ck = torch.load(str(tmp_path / "q.pt"), weights_only=True)
    del ck["config"]["candidates"]
    torch.save(ck, str(tmp_path / "old.pt"))
    assert dqn.load(tmp_path / "old.pt")[0].cfg.candidates == 0
    assert dqn.TrainConfig().candidates == 0
    with pytest.raises(ValueError, match="candidates"):
        dqn.TrainConfig(candidates=-1)


def test_replay_stores_the_candidate_mask_for_the_next_state_too() -> None:
    env = InferenceEnv(SMALL[:1], candidates=1)
    held = dqn._Held()
    dqn._episode(env, 0, lambda o: int(np.flatnonzero(o["mask"])[-1]), held, True)
    assert held.items
    for t, _ in held.items:
        assert isinstance(t.obs, dict) and isinstance(t.next_obs, dict)
        assert t.obs["mask"][t.action] == 1
        # k = 1: HEFT's device plus at most the input's (one input per vgg/bert layer mostly)
        assert 1 <= t.obs["mask"].sum() <= 3
        assert t.done or 1 <= t.next_obs["mask"].sum() <= 3
