"""Every policy module: registered, built by name, options checked, decides on edge cases."""

from __future__ import annotations

import importlib

import pytest

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision

ALL = ("fifo", "deadline", "sjf", "sjf-oracle", "srtf-oracle", "edf", "tiresias", "elasticflow")


def test_all_policies_are_installed() -> None:
    assert set(policies.names()) >= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_module_exports_name_and_new(name: str) -> None:
    module = importlib.import_module(f"slurm_rl.policies.{name.replace('-', '_')}")
    assert module.NAME == name
    policy = policies.make(name)
    assert policy.name == name


@pytest.mark.parametrize("name", ALL)
def test_unknown_option_lists_valid_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown option\(s\) bogus \(valid: "):
        policies.make(name, bogus=1)


@pytest.mark.parametrize("name", ALL)
def test_empty_cluster(name: str) -> None:
    d = policies.make(name).decide(ClusterSnapshot(time=0.0, jobs=(), nodes=()))
    assert d == Decision(policy=name)


def test_oracles_are_the_oracle_ones() -> None:
    assert policies.ORACLES == {"sjf-oracle", "srtf-oracle", "srtf2d-oracle"}


@pytest.mark.parametrize(("name", "options"), [
    ("srtf-oracle", {"margin_s": -1}),
    ("tiresias", {"thresholds": (100.0, 50.0)}),
    ("tiresias", {"thresholds": (0.0,)}),
    ("tiresias", {"thresholds": "4"}),
    ("tiresias", {"thresholds": []}),
    ("tiresias", {"thresholds": [1, float("nan")]}),
    ("tiresias", {"promote_knob": -1}),
    ("deadline", {"min_gain": 1.0}),
    ("elasticflow", {"resize_cost_s": -5}),
    ("sjf", {"default_s": 0}),
])
def test_bad_option_values_are_refused(name: str, options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        policies.make(name, **options)


def test_tiresias_accepts_thresholds_as_list() -> None:
    p = policies.make("tiresias", thresholds=[100, 1000])
    assert p.thresholds == (100.0, 1000.0)  # type: ignore[attr-defined]


def test_tiresias_accepts_one_threshold_as_a_number() -> None:
    """`policy_options = ["thresholds=4"]` gives the number 4: two queues (before: a TypeError
    that left the daemon on its fallback policy)."""
    p = policies.make("tiresias", thresholds=4)
    assert p.thresholds == (4.0,)  # type: ignore[attr-defined]
