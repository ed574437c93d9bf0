"""The held-out generator (heldout.py), the HEFT-residual Q-network (dqn.py, QConfig.residual)
and benchmarks/inference_heldout.py's pure parts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from slurm_rl.inference import dqn
from slurm_rl.inference import heldout as ho
from slurm_rl.inference.env import InferenceEnv, randomised_scenarios, randomised_validation
from slurm_rl.inference.features import EFT_COLUMN, device_features
from slurm_rl.inference.schedulers import EarliestFinish, Scheduler, run_episode
from slurm_rl.inference.sim import InferenceSim, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.inference_heldout import (  # noqa: E402
    breakdown,
    head_to_head,
    main,
    summarise,
)


def test_training_and_held_out_seed_ranges_and_structures_are_disjoint() -> None:
    assert not set(ho.TRAIN_SEEDS) & set(ho.HELD_OUT_SEEDS)
    assert not set(ho.TRAIN_STRUCTURES) & set(ho.HELD_OUT_STRUCTURES)
    train = {sc.setting for k in range(1, 4) for sc in randomised_scenarios(64, seed=k)}
    val = {sc.setting for sc in randomised_validation()}
    assert train <= set(ho.TRAIN_SEEDS) and val <= set(ho.TRAIN_SEEDS)
    assert not train & val  # validation is a block training never draws from
    assert {ho.setting(s).structure for s in train | val} <= set(ho.TRAIN_STRUCTURES)
    held = ho.settings(ho.HELD_OUT_SEEDS, 60)
    assert {s.structure for s in held} & set(ho.HELD_OUT_STRUCTURES)
    assert {s.structure for s in held} & set(ho.TRAIN_STRUCTURES)


def test_the_development_range_is_apart_from_training_validation_and_held_out() -> None:
    assert set(ho.DEV_SEEDS) <= set(ho.TRAIN_SEEDS)
    assert not set(ho.DEV_SEEDS) & set(ho.HELD_OUT_SEEDS)
    train = {sc.setting for k in range(1, 4) for sc in randomised_scenarios(128, seed=k)}
    val = {sc.setting for sc in randomised_validation()}
    assert not (train | val) & set(ho.DEV_SEEDS)
    dev = ho.settings(ho.DEV_SEEDS, 40, held_out=True)
    assert {s.structure for s in dev} & set(ho.HELD_OUT_STRUCTURES)


def test_the_benchmark_runs_dev_cells_with_several_follower_counts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "dev.csv"
    assert main(["--dev", "--cells", "2", "--tasks", "3", "--following", "0,2",
                 "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stream-plan-k0" in text and "stream-plan " in text
    rows = out.read_text().splitlines()
    assert len(rows) == 1 + 2 * 6  # heft, lookahead, whole, request-plan and two stream plans
    seeds = {int(r.split(",")[0]) for r in rows[1:]}
    assert seeds <= set(ho.DEV_SEEDS)
    assert main(["--following", "1,x"]) == 2
    assert "--following" in capsys.readouterr().err


def test_settings_are_drawn_from_their_seed_within_the_stated_ranges() -> None:
    a, b = ho.settings(ho.HELD_OUT_SEEDS, 80), ho.settings(ho.HELD_OUT_SEEDS, 80)
    assert [(s.seed, s.classes, s.gbps, s.structure, s.load) for s in a] == [
        (s.seed, s.classes, s.gbps, s.structure, s.load) for s in b]
    for s in a:
        assert ho.MIN_DEVICES <= s.cluster.n <= ho.MAX_DEVICES
        assert ho.MIN_GBPS <= s.gbps <= ho.MAX_GBPS
        assert ho.MIN_LOAD <= s.load <= ho.MAX_LOAD
        assert set(s.classes) <= set(ho.CLASSES) and ho.fits(s)
        assert all(-1 <= j < i for i, lay in enumerate(s.profile.layers) for j in lay.inputs)
    assert len({s.cluster.n for s in a}) > 8 and len({s.classes for s in a}) > 40
    fam = ho.generated("inception", np.random.default_rng(0))
    assert not fam.is_chain and max(len(lay.inputs) for lay in fam.layers) >= 2
    assert ho.generated("chain", np.random.default_rng(0)).is_chain
    with pytest.raises(ValueError, match="family"):
        ho.generated("lstm", np.random.default_rng(0))


def _devices(s: ho.Setting, sched: Scheduler) -> list[tuple[int, ...]]:
    sim = InferenceSim(s.cluster, [s.profile], StreamConfig(tasks=6, load=s.load, seed=s.seed))
    return [r.devices for r in run_episode(sim, sched)]


def test_an_untrained_residual_network_places_exactly_as_heft() -> None:
    torch.manual_seed(5)
    q = dqn.QScheduler(dqn.QNet(dqn.QConfig(hidden=16, residual=0.5, candidates=3)))
    for s in ho.settings(ho.HELD_OUT_SEEDS, 25):
        assert _devices(s, q) == _devices(s, EarliestFinish()), s.seed
    # a plain network with the same weights' shapes is not HEFT
    plain = dqn.QScheduler(dqn.QNet(dqn.QConfig(hidden=16)))
    assert any(_devices(s, plain) != _devices(s, EarliestFinish())
               for s in ho.settings(ho.HELD_OUT_SEEDS, 5))


def test_residual_numpy_equals_torch_and_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(1)
    net = dqn.QNet(dqn.QConfig(hidden=8, residual=0.3))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))  # a trained-looking net: the correction is on
    env = InferenceEnv(randomised_scenarios(2, seed=1))
    env.reset(seed=0, options={"scenario": 0})
    assert env.sim is not None
    f, ok = device_features(env.sim)
    assert f[ok, EFT_COLUMN].min() == 0.0
    t = net(torch.from_numpy(f)[None], torch.from_numpy(ok.astype(np.float32))[None])[0]
    assert np.allclose(dqn.QScheduler(net).q_values(f.astype(np.float64), ok),
                       t.detach().numpy(), atol=1e-5)
    dqn.save(net, tmp_path / "r.pt", {})
    back, _ = dqn.load(tmp_path / "r.pt")
    assert back.cfg.residual == 0.3
    assert np.allclose(dqn.QScheduler(back).q_values(f.astype(np.float64), ok),
                       t.detach().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="residual"):
        dqn.TrainConfig(residual=-1.0)


def test_randomised_residual_training_runs_and_keeps_heft_as_a_candidate() -> None:
    cfg = dqn.TrainConfig(seed=1, episodes=2, scenarios=3, learning_starts=50, batch=16,
                          target_every=100, validate_every=1, buffer=2000, hidden=8,
                          demo_episodes=0, residual=0.2, randomised=True, candidates=3)
    _, curve = dqn.train(cfg, randomised_validation(2, tasks=4), log=lambda s: None)
    assert [r["episode"] for r in curve] == [0, 1, 2]


def test_summary_is_worst_first_and_counts_cells_against_heft() -> None:
    rows = [{"seed": s, "scheduler": n, "group": g, "ratio": r} for s, n, g, r in [
        (1, "heft", "heft", 1.0), (2, "heft", "heft", 1.0),
        (1, "a-1", "a", 0.5), (2, "a-1", "a", 2.0), (1, "a-2", "a", 1.002), (2, "a-2", "a", 1.0),
        (1, "b", "b", 1.5), (2, "b", "b", 1.5)]]
    out = summarise(rows)
    assert [s.scheduler for s in out] == ["b", "a", "heft"]
    a = out[1]
    assert (a.cells, a.better, a.tie, a.worse, a.worst, a.worst_seed) == (4, 1, 2, 1, 2.0, 2)
    assert a.geo_mean == pytest.approx((0.5 * 2.0 * 1.002) ** 0.25)
    assert head_to_head(rows, "a-1", "b") == (1, 0, 1)
    assert head_to_head(rows, "b", "heft") == (0, 0, 2)


def test_breakdown_groups_one_schedulers_cells_by_structure_and_bands() -> None:
    def row(seed: int, structure: str, gbps: float, devices: int, load: float,
            ratio: float, scheduler: str = "a") -> dict[str, object]:
        return {"seed": seed, "scheduler": scheduler, "structure": structure, "gbps": gbps,
                "devices": devices, "load": load, "ratio": ratio}

    rows = [row(1, "vgg", 0.5, 2, 0.3, 0.5), row(2, "vgg", 10.0, 9, 0.5, 2.0),
            row(3, "gpt", 400.0, 16, 0.95, 1.0), row(1, "vgg", 0.5, 2, 0.3, 9.0, "b")]
    out = breakdown(rows, "a")
    assert out["structure"] == {"gpt": (1.0, 1, 1.0), "vgg": (pytest.approx(1.0), 2, 2.0)}
    assert out["bandwidth"] == {"<1 Gbit/s": (0.5, 1, 0.5), "10-100": (2.0, 1, 2.0),
                                ">=100": (1.0, 1, 1.0)}
    assert out["devices"] == {"2-4": (0.5, 1, 0.5), "5-9": (2.0, 1, 2.0), "10-16": (1.0, 1, 1.0)}
    assert out["load"] == {"<0.5": (0.5, 1, 0.5), "0.5-0.75": (2.0, 1, 2.0),
                           ">=0.75": (1.0, 1, 1.0)}
