"""srtf2d-oracle: ranks and preempts by true remaining time x GPUs (remaining GPU-seconds)."""

from __future__ import annotations

import pytest
from policy_builders import ids, job, nodes, oracle_policy, preempted, running, snap

from slurm_rl.policies import make
from slurm_rl.policies.capabilities import OracleReading, Preempting


def test_is_a_preempting_oracle() -> None:
    p = make("srtf2d-oracle")
    assert isinstance(p, OracleReading) and isinstance(p, Preempting)
    assert p.name.endswith("-oracle")


def test_orders_by_remaining_gpu_seconds() -> None:
    truth = {"wide": 100.0, "narrow": 300.0, "mid": 150.0}
    s = snap(job("wide", gpus=4, submit=1), job("narrow", gpus=1, submit=2),
             job("mid", gpus=2, submit=3), nodes=nodes(4))
    d = oracle_policy("srtf2d-oracle", truth).decide(s)
    assert ids(d) == ["narrow", "mid", "wide"]  # 300, 300 (later), 400 GPU-s
    assert ids(oracle_policy("srtf-oracle", truth).decide(s)) == ["wide", "mid", "narrow"]
    assert "true remaining 5m x 1 GPUs" in d.order[0].reason


def test_a_short_wide_job_does_not_displace_narrower_ones_with_less_area() -> None:
    # pending: 8 GPUs x 500 s = 4,000 GPU-s; running: two 4-GPU jobs, 900 s (3,600 GPU-s) left
    truth = {"p": 500.0, "r1": 900.0, "r2": 900.0}
    s = snap(running("r1", gpus=4), running("r2", gpus=4), job("p", gpus=8),
             nodes=nodes(4, 4))
    assert not oracle_policy("srtf2d-oracle", truth).decide(s).preemptions
    assert preempted(oracle_policy("srtf-oracle", truth).decide(s)) == ["r1", "r2"]


def test_preempts_the_largest_area_first_and_keeps_what_it_does_not_need() -> None:
    truth = {"big": 5000.0, "bigger": 9000.0, "small": 10.0, "p": 100.0}
    s = snap(running("big", gpus=4), running("bigger", gpus=4), running("small", gpus=4),
             job("p", gpus=4), nodes=nodes(4, 4, 4))
    d = oracle_policy("srtf2d-oracle", truth).decide(s)
    assert preempted(d) == ["bigger"]
    assert "GPU-h of job p (4 GPUs)" in d.preemptions[0].reason


def test_margin_and_unknown_jobs() -> None:
    truth = {"r": 150.0, "p": 100.0}
    s = snap(running("r", gpus=4), job("p", gpus=4), nodes=nodes(4))
    assert preempted(oracle_policy("srtf2d-oracle", truth).decide(s)) == ["r"]
    assert not oracle_policy("srtf2d-oracle", truth, margin_gpu_s=200.0).decide(s).preemptions
    unknown = snap(running("x", gpus=4), job("p", gpus=4), nodes=nodes(4))
    assert not oracle_policy("srtf2d-oracle", {"p": 1.0}).decide(unknown).preemptions
    with pytest.raises(ValueError, match="margin_gpu_s"):
        make("srtf2d-oracle", margin_gpu_s=-1.0)


def test_unbound_it_knows_nothing_and_says_so() -> None:
    s = snap(job("b", submit=2), job("a", submit=1), running("r", gpus=4), nodes=nodes(4))
    d = make("srtf2d-oracle").decide(s)
    assert ids(d) == ["a", "b"] and not d.preemptions
    assert all("no true duration known" in o.reason for o in d.order)
