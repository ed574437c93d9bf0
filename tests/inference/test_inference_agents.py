"""inference/env.py and dqn.py: the gymnasium env, delayed-reward matching, the Q-network."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from slurm_rl.inference import dqn
from slurm_rl.inference.env import InferenceEnv, Scenario
from slurm_rl.inference.schedulers import EarliestFinish, run_episode

SMALL = (Scenario(mix="mixed", gbps=5.0, models=("vgg", "bert"), tasks=4, load=0.8, seed=1),
         Scenario(mix="cpu", gbps=50.0, models=("resnet",), tasks=3, load=0.3, seed=2))


def test_env_passes_gymnasium_checks_and_pays_the_delayed_reward() -> None:
    env = InferenceEnv(SMALL)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0, options={"scenario": 0})
    total, released, done, steps = 0.0, [], False, 0
    while not done:
        a = int(np.flatnonzero(obs["mask"])[0])
        obs, r, done, _, info = env.step(a)
        assert info["step"] == steps
        steps += 1
        total += r
        released += info["released"]
    assert len(released) == 4
    # the return is minus the sum of slowdowns; every task's shares add up to it
    assert total == pytest.approx(-sum(sum(sh) for _, sh in released))
    assert sorted(s for st, _ in released for s in st) == list(range(steps))
    assert env.sim is not None and len(env.sim.records) == 4


def test_drm_and_vanilla_rewards_have_the_same_sum_per_task() -> None:
    env = InferenceEnv(SMALL[:1])
    env.reset(seed=0)
    sim = env.sim
    assert sim is not None
    recs = run_episode(sim, EarliestFinish())
    for r in recs:
        shares = [s / r.ref_s for s in r.shares]
        assert all(s >= 0 for s in shares)
        assert sum(shares) == pytest.approx(r.latency / r.ref_s)


def test_numpy_q_values_equal_torch_and_checkpoint_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = dqn.QNet(dqn.QConfig(hidden=16))
    x = torch.randn(1, 5, net.cfg.features)
    mask = torch.tensor([[1, 1, 0, 1, 0]], dtype=torch.float32)
    q_torch = net(x, mask)[0].detach().numpy()
    q_np = dqn.QScheduler(net).q_values(x[0].double().numpy(), mask[0].numpy().astype(bool))
    assert np.allclose(q_torch, q_np, atol=1e-5)
    dqn.save(net, tmp_path / "q.pt", {"seed": 7})
    net2, meta = dqn.load(tmp_path / "q.pt")
    assert meta == {"seed": 7} and torch.equal(net2(x, mask), net(x, mask))


@pytest.mark.parametrize("matching", [True, False])
def test_tiny_training_runs_and_validates(matching: bool) -> None:
    cfg = dqn.TrainConfig(episodes=2, scenarios=2, learning_starts=50, train_every=8,
                          target_every=100, validate_every=1, buffer=2000, hidden=8,
                          demo_episodes=1, pretrain_steps=10, matching=matching)
    net, curve = dqn.train(cfg, SMALL[1:], log=lambda s: None)
    assert [r["episode"] for r in curve] == [0, 1, 2]  # 0: after the warm start
    assert all(np.isfinite(r["validation_slowdown"]) and r["validation_slowdown"] >= 1 - 1e-9
               for r in curve)
    env = InferenceEnv(SMALL)
    assert dqn.validate(dqn.QScheduler(net), SMALL, env) >= 1 - 1e-9


def test_task_rewards_matched_versus_vanilla() -> None:
    shares = [0.5, 0.0, 1.5, 2.0]  # slowdown 4
    drm = dqn.task_rewards(shares, matching=True)
    van = dqn.task_rewards(shares, matching=False)
    assert sum(drm) == pytest.approx(sum(van)) == pytest.approx(-np.log1p(4.0))
    assert van[:-1] == [0.0, 0.0, 0.0]
    assert drm[1] == 0.0 and drm[3] == pytest.approx(4 * drm[0])


def test_best_demonstrator_and_single_model_scenarios_train() -> None:
    from slurm_rl.inference.env import TRAIN_MODELS, training_scenarios

    plain = training_scenarios(8, seed=3)
    assert plain == training_scenarios(8, seed=3, single_model=0.0)
    single = training_scenarios(8, seed=3, single_model=1.0)
    assert all(len(s.models) == 1 and s.models[0] in TRAIN_MODELS for s in single)
    assert [s.gbps for s in single] == [s.gbps for s in plain]  # only the models differ
    cfg = dqn.TrainConfig(episodes=1, scenarios=2, learning_starts=50, train_every=8,
                          target_every=100, validate_every=1, buffer=2000, hidden=8,
                          demo_episodes=1, pretrain_steps=10, demonstrator="best",
                          single_model=0.5, demo_weight_end=0.0, demo_decay=0.5)
    _, curve = dqn.train(cfg, SMALL[1:], log=lambda s: None)
    assert [r["episode"] for r in curve] == [0, 1]
    with pytest.raises(ValueError, match="demonstrator"):
        dqn.TrainConfig(demonstrator="oracle")


def test_stream_features_are_read_only_by_a_network_that_asks_for_them() -> None:
    from slurm_rl.inference.env import training_scenarios
    from slurm_rl.inference.features import (
        BASE_FEATURES,
        INPUT_FEATURES,
        N_FEATURES,
        device_features,
    )

    env = InferenceEnv(SMALL)
    env.reset(seed=0, options={"scenario": 0})
    assert env.sim is not None
    f, ok = device_features(env.sim)
    assert f.shape[1] == N_FEATURES and np.isfinite(f).all()
    torch.manual_seed(0)
    old = dqn.QNet(dqn.QConfig(hidden=8))  # what the shipped checkpoints are
    assert old.cfg.features == BASE_FEATURES
    g = f.copy()
    # the stream's columns change: a 13-feature net does not see it
    g[:, BASE_FEATURES:INPUT_FEATURES] += 5.0
    mask = torch.from_numpy(ok.astype(np.float32))[None]
    assert torch.equal(old(torch.from_numpy(f)[None], mask), old(torch.from_numpy(g)[None], mask))
    new = dqn.QNet(dqn.QConfig(hidden=8, features=INPUT_FEATURES))
    assert not torch.equal(new(torch.from_numpy(f)[None], mask),
                           new(torch.from_numpy(g)[None], mask))
    for net in (old, new):  # numpy and torch agree on a full-width row either way
        q = dqn.QScheduler(net).q_values(f.astype(np.float64), ok)
        assert np.allclose(q, net(torch.from_numpy(f)[None], mask)[0].detach().numpy(),
                           atol=1e-5)
    # load_max stretches the loads and nothing else; the default is the old range
    base, wide = training_scenarios(8, seed=3), training_scenarios(8, seed=3, load_max=1.0)
    assert all(0.2 <= s.load <= 0.8 for s in base) and any(s.load > 0.8 for s in wide)
    assert [s.gbps for s in wide] == [s.gbps for s in base]
    with pytest.raises(ValueError, match="features"):
        dqn.TrainConfig(features=INPUT_FEATURES + 1)
    with pytest.raises(ValueError, match="load_max"):
        dqn.TrainConfig(load_max=0.2)


def test_learning_rate_decays_linearly_to_lr_end(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[torch.optim.Optimizer] = []
    real = torch.optim.Adam

    def adam(*args: object, **kwargs: object) -> torch.optim.Optimizer:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(dqn.torch.optim, "Adam", adam)
    cfg = dqn.TrainConfig(episodes=3, scenarios=2, learning_starts=50, train_every=8,
                          target_every=100, validate_every=1, buffer=2000, hidden=8,
                          demo_episodes=0, learning_rate=0.01, lr_end=0.5)
    dqn.train(cfg, SMALL[1:], log=lambda s: None)
    assert made[-1].param_groups[0]["lr"] == pytest.approx(0.005)  # at the last episode
    assert dqn.TrainConfig().lr_end == 1.0  # the default: constant, as before
    with pytest.raises(ValueError, match="lr_end"):
        dqn.TrainConfig(lr_end=0.0)
