"""Shared policy helpers: estimates, GPU ranges, the capacity model, preemption planning."""

from __future__ import annotations

import math

import pytest
from policy_builders import NOW, job, nodes, running, snap

from slurm_rl import perfmodel
from slurm_rl.core import (
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
    id_key,
)
from slurm_rl.policies.capacity import Capacity, layout
from slurm_rl.policies.estimates import Source, estimate_remaining, remaining_at
from slurm_rl.policies.formatting import fmt_dur
from slurm_rl.policies.gpu_counts import allowed_counts, gpu_range
from slurm_rl.policies.preemption import plan_preemptions


def test_id_key_is_natural() -> None:
    assert sorted(["10", "9", "10_10", "10_2", "abc"], key=id_key) == [
        "abc", "9", "10", "10_2", "10_10"]


@pytest.mark.parametrize(("s", "text"), [(45, "45s"), (600, "10m"), (9000, "2.5h"),
                                         (-30, "-30s"), (3 * 86400, "3.0d")])
def test_fmt_dur(s: float, text: str) -> None:
    assert fmt_dur(s) == text


def test_estimate_chain() -> None:
    it = Intent(total_steps=1000)
    j = job("a", time_limit_s=900)
    est = estimate_remaining(j, NOW)
    assert est is not None and est.source is Source.TIME_LIMIT and est.seconds == 900
    r = running("r", start=NOW - 100, time_limit_s=900)
    assert estimate_remaining(r, NOW).seconds == 800  # type: ignore[union-attr]
    ran = {"restarts": 1, "attained_gpu_s": 200.0}  # progress counts once a job has run
    p = job("p", intent=it, progress=Progress(steps_done=400, rate=3.0), time_limit_s=1, **ran)
    est = estimate_remaining(p, NOW)
    assert est is not None and est.source is Source.PROGRESS and est.seconds == 200
    q = job("q", predicted_remaining_s=77.0, intent=it, progress=Progress(steps_done=0, rate=1),
            **ran)
    assert estimate_remaining(q, NOW).source is Source.PREDICTED  # type: ignore[union-attr]
    assert estimate_remaining(job("n"), NOW) is None
    # total steps without a rate: only a known model's profiled throughput gives one.
    assert estimate_remaining(job("u", intent=it), NOW) is None
    k = job("k", intent=Intent(total_steps=1000, model="bert"))
    assert estimate_remaining(k, NOW).source is Source.PROFILE  # type: ignore[union-attr]


def test_remaining_at_follows_the_speedup_curve() -> None:
    j = job("a", gpus=2, intent=Intent(model="resnet50", batch_size=256),
            predicted_remaining_s=1000.0, restarts=1, attained_gpu_s=100.0)
    est = estimate_remaining(j, NOW)
    assert est is not None
    c = perfmodel.curve_for("resnet50", 256)
    assert remaining_at(j, est, 8) == pytest.approx(1000 * c.throughput(2) / c.throughput(8))
    assert remaining_at(j, est, 2) == 1000.0


def test_gpu_range() -> None:
    assert gpu_range(job("a", gpus=2)) is None
    assert gpu_range(job("a", gpus=2, intent=Intent(gpus_min=1, gpus_max=8))) == (1, 8)
    assert gpu_range(job("a", gpus=2, intent=Intent(gpus_max=8))) == (2, 8)
    assert gpu_range(job("a", gpus=4, intent=Intent(gpus_min=2))) == (2, 4)
    assert gpu_range(job("a", gpus=4, intent=Intent(gpus_min=4, gpus_max=4))) is None


def test_allowed_counts_powers_of_two_on_whole_nodes() -> None:
    assert allowed_counts(1, 16, 4, 16) == [1, 2, 4, 8, 16]
    assert allowed_counts(3, 12, 4, 16) == [3, 4, 8, 12]
    assert allowed_counts(2, 64, 8, 16) == [2, 4, 8, 16]
    assert allowed_counts(5, 7, 4, 16) == [5]  # nothing places: keep the minimum
    assert allowed_counts(32, 64, 8, 16) == [32]


def test_layout() -> None:
    assert layout(3, 1, 4) == [3]
    assert layout(8, 1, 4) == [4, 4]
    assert layout(6, 1, 4) == [3, 3]
    assert layout(5, 3, 4) == [2, 2, 1]
    assert layout(0, 1, 4) == []


def test_capacity_per_node_and_unusable_nodes() -> None:
    ns = nodes(3, 1) + (NodeView(name=NodeName("z"), state=NodeState.DOWN, gpus_total=8),)
    cap = Capacity.of(snap(nodes=ns))
    assert cap.free == [1, 3] and cap.node_cap == 4
    assert cap.fits([3]) and not cap.fits([4]) and not cap.fits([2, 2])
    assert cap.take([1]) and cap.free == [0, 3]  # best fit: the tightest node
    cap.release([4])
    assert cap.fits([4]) and cap.fits([3, 3]) and not cap.fits([3, 3, 1])


def _plan(s, pending, victims, outranks=lambda p, v: True):  # type: ignore[no-untyped-def]
    return plan_preemptions(Capacity.of(s), pending, victims, outranks,
                            reason=lambda v, p: f"{v.id} for {p.id}")


def test_plan_preempts_lowest_first_and_only_what_is_needed() -> None:
    low, mid, high = (running("low", gpus=4), running("mid", gpus=4), running("hi", gpus=2))
    p = job("p", gpus=4)
    s = snap(low, mid, high, p, nodes=nodes(4, 4, 2, total=4))
    pre, starts = _plan(s, [p], [low, mid, high])
    assert [x.job_id for x in pre] == ["low"] and starts == {"p"}
    assert pre[0].reason == "low for p"


def test_plan_skips_victims_that_do_not_help() -> None:
    small, big = running("small", gpus=1), running("big", gpus=4)
    p = job("p", gpus=4)
    s = snap(small, big, p, nodes=nodes(3, 4))  # 1 GPU free on node1
    pre, _ = _plan(s, [p], [small, big])
    assert [x.job_id for x in pre] == ["big"]


def test_plan_respects_outranks_and_impossible_jobs() -> None:
    v = running("v", gpus=4)
    huge = job("huge", gpus=64)
    p = job("p", gpus=4)
    s = snap(v, huge, p, nodes=nodes(4))
    assert _plan(s, [huge], [v]) == ((), set())
    assert _plan(s, [p], [v], outranks=lambda p, v: False) == ((), set())


def test_plan_never_stops_a_job_twice_and_fits_without_preemption_first() -> None:
    v = running("v", gpus=2)
    a, b = job("a", gpus=2), job("b", gpus=2)
    s = snap(v, a, b, nodes=nodes(2, total=4))  # 2 free: a fits, b needs v's GPUs
    pre, starts = _plan(s, [a, b], [v])
    assert [x.job_id for x in pre] == ["v"] and starts == {"a", "b"}


def test_estimate_remaining_running_from_time_zero_and_without_start_time() -> None:
    r = running("r", start=0.0, time_limit_s=NOW + 60)
    assert estimate_remaining(r, NOW).seconds == 60  # type: ignore[union-attr]
    unknown = JobView(id=JobId("u"), state=JobState.RUNNING, submit_time=0, gpus=1,
                      time_limit_s=60)
    est = estimate_remaining(unknown, NOW)
    assert est is not None and est.seconds == 60
    assert math.isinf(remaining_at(unknown, est, 0))
