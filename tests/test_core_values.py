"""`JobOrder.fast` makes the value the dataclass constructor makes."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from slurm_rl.core import JobId, JobOrder


@pytest.mark.parametrize("gpus", [None, 0, 3])
def test_fast_job_order_equals_the_constructor(gpus: int | None) -> None:
    made = JobOrder(job_id=JobId("7"), rank=2, gpus=gpus, reason="why")
    fast = JobOrder.fast(JobId("7"), 2, gpus, "why")
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    assert vars(fast) == vars(made)
    assert pickle.loads(pickle.dumps(fast)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.rank = 3  # type: ignore[misc]


def test_fast_job_order_reason_may_be_a_function_read_once() -> None:
    calls: list[int] = []

    def why() -> str:
        calls.append(1)
        return "later"

    fast = JobOrder.fast(JobId("1"), 0, None, why)
    assert calls == []
    assert fast.reason == "later" and fast.reason == "later" and calls == [1]
    assert fast == JobOrder(job_id=JobId("1"), rank=0, reason="later")


def test_job_order_has_nothing_for_fast_to_skip() -> None:
    """`fast` fills the four fields directly: a __post_init__, slots or a new field would make
    its values differ from the constructor's, so JobOrder must not gain one unnoticed."""
    assert not hasattr(JobOrder, "__post_init__")
    assert not hasattr(JobOrder, "__slots__")
    assert [f.name for f in dataclasses.fields(JobOrder)] == ["job_id", "rank", "gpus", "reason"]
