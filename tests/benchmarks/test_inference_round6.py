"""benchmarks/inference_round6.py's pure parts: the HEFT-guarded choice and the sweep-like
validation set (the sixth round, docs/inference-rounds.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.inference_round6 import guarded_choice, sweeplike_validation  # noqa: E402
from slurm_rl.inference.env import HELD_OUT_MODELS, TRAIN_MODELS  # noqa: E402
from slurm_rl.inference.experiments import validation_scenarios  # noqa: E402


def test_the_guard_keeps_hefts_device_unless_another_scores_more_than_delta_above_it() -> None:
    q = np.array([1.0, 1.5, 0.5, 9.0])
    ok = np.array([True, True, True, False])  # device 3 scores highest but is not allowed
    assert guarded_choice(q, ok, heft=0, delta=0.0) == 1
    assert guarded_choice(q, ok, heft=0, delta=0.4) == 1
    assert guarded_choice(q, ok, heft=0, delta=0.5) == 0  # 0.5 above is not "more than"
    assert guarded_choice(q, ok, heft=2, delta=0.9) == 1
    assert guarded_choice(q, ok, heft=1, delta=0.0) == 1


def test_the_sweeplike_validation_streams_one_training_structure_at_the_sweeps_loads() -> None:
    val = sweeplike_validation()
    assert len(val) == 9
    assert {sc.models for sc in val} == {(m,) for m in TRAIN_MODELS}
    assert not {m for sc in val for m in sc.models} & set(HELD_OUT_MODELS)
    assert {sc.load for sc in val} == {0.6, 0.9}
    seeds = {sc.seed for sc in val}
    assert len(seeds) == 9 and not seeds & {sc.seed for sc in validation_scenarios()}
    assert not seeds & {10_000 + k for k in (1, 2, 3)}  # the sweep's stream seeds
