"""Claimed sizes are checked before any policy ranks on them (policies/estimates.py): a lie in
steps, in a progress tag at submission or in a progress update buys a job nothing under any
shipped policy. (The owner's record, `claim_ratio`, is set by the daemon: daemon/claims.py.)"""

from __future__ import annotations

import dataclasses
import math

import pytest
from policy_builders import NOW, ids, job, nodes, running, snap

from slurm_rl import perfmodel
from slurm_rl.core import Intent, JobView, Progress
from slurm_rl.policies import ORACLES, make, names
from slurm_rl.policies.estimates import (
    PROFILE_SLACK,
    Source,
    believed_progress,
    estimate_remaining,
    impossible_progress,
)

RESNET = Intent(total_steps=4104, model="resnet50")  # about 600 s at 1 GPU (6.84 it/s)
LIMIT = 3600.0
ALMOST_DONE = Progress(steps_done=4103, steps_total=4104, rate=100_000.0, updated_at=NOW - 5)


def test_no_progress_is_believed_before_the_job_has_run() -> None:
    j = job("b", intent=RESNET, progress=ALMOST_DONE, predicted_remaining_s=0.01,
            time_limit_s=LIMIT)
    assert believed_progress(j) is None
    est = estimate_remaining(j, NOW)
    assert est is not None and est.source is Source.PROFILE
    assert est.seconds == pytest.approx(4104 / perfmodel.curve_for("resnet50").throughput(1))


def test_progress_faster_than_the_profile_allows_is_not_believed() -> None:
    # 30 s on one GPU: resnet50 does at most ~29 steps/s per GPU at any measured batch size.
    fast = running("r", start=NOW - 30, intent=RESNET, progress=ALMOST_DONE,
                   attained_gpu_s=30.0, time_limit_s=LIMIT)
    assert believed_progress(fast) is None
    assert estimate_remaining(fast, NOW).source is Source.PROFILE  # type: ignore[union-attr]
    # a plausible count with an impossible rate is not believed either
    rate = running("q", start=NOW - 300, intent=RESNET, attained_gpu_s=300.0,
                   progress=Progress(steps_done=1000, steps_total=4104, rate=1e5))
    assert believed_progress(rate) is None
    honest = running("h", start=NOW - 300, intent=RESNET, attained_gpu_s=300.0,
                     progress=Progress(steps_done=2000, steps_total=4104, rate=6.8))
    assert believed_progress(honest) is honest.progress
    est = estimate_remaining(honest, NOW)
    assert est is not None and est.source is Source.PROGRESS
    assert est.seconds == pytest.approx(2104 / 6.8)
    assert PROFILE_SLACK >= 2  # faster GPUs than the profile's must not look like liars


def test_a_job_past_its_claim_is_estimated_from_what_was_observed() -> None:
    j = running("o", start=NOW - 900, intent=RESNET, attained_gpu_s=900.0, time_limit_s=LIMIT,
                claim_overrun=True, progress=ALMOST_DONE)
    est = estimate_remaining(j, NOW)
    assert est is not None and est.source is Source.OBSERVED and est.seconds == 900.0
    capped = running("c", start=NOW - 3000, attained_gpu_s=3000.0, time_limit_s=LIMIT,
                     claim_overrun=True, intent=RESNET)
    assert estimate_remaining(capped, NOW).seconds == 600.0  # type: ignore[union-attr]


def test_the_owners_record_stretches_or_drops_claims() -> None:
    base = estimate_remaining(job("a", intent=RESNET, time_limit_s=LIMIT), NOW)
    assert base is not None
    stretched = estimate_remaining(job("a", intent=RESNET, time_limit_s=LIMIT,
                                       claim_ratio=1.5), NOW)
    assert stretched is not None and stretched.seconds == pytest.approx(1.5 * base.seconds)
    assert "x1.5 by the owner's record" in stretched.label
    dropped = estimate_remaining(job("a", intent=RESNET, time_limit_s=LIMIT,
                                     claim_ratio=math.inf), NOW)
    assert dropped is not None and dropped.source is Source.TIME_LIMIT
    assert estimate_remaining(job("a", intent=RESNET, claim_ratio=math.inf), NOW,
                              time_limit=False) is None


def liars(record: float) -> list[JobView]:
    """User b's three lies, each about a job as long as a's honest one; `record`: b's
    claim_ratio as the daemon would set it."""
    lie = {"user": "b", "time_limit_s": LIMIT, "claim_ratio": record}
    return [
        job("b-steps", submit=10, intent=Intent(total_steps=1, model="resnet50"), **lie),
        job("b-tag", submit=11, intent=RESNET, progress=ALMOST_DONE,
            predicted_remaining_s=0.01, **lie),
        job("b-update", submit=12, intent=RESNET,
            progress=Progress(steps_done=4000, steps_total=4104, rate=5e4, updated_at=NOW),
            predicted_remaining_s=0.002, **lie),
    ]


SHIPPED = [n for n in names() if n not in ORACLES and n != "null"]


@pytest.mark.parametrize("policy", SHIPPED)
def test_a_liar_ranks_below_an_honest_job_of_the_same_length(policy: str) -> None:
    honest = job("a", submit=0, user="a", intent=RESNET, time_limit_s=LIMIT)
    # Progress lies are caught without any record; the steps lie once b has been caught once.
    # b's record is inf once caught: the daemon sets it on the first lie it can see (the
    # progress lies below are impossible reports: daemon/claims.py, test_claims.py).
    s = snap(honest, *liars(math.inf), nodes=nodes(4, 4))
    order = ids(make(policy).decide(s))
    assert order.index("a") < min(order.index(b) for b in ("b-steps", "b-tag", "b-update"))


@pytest.mark.parametrize("policy", SHIPPED)
def test_a_progress_lie_buys_nothing_even_before_the_owner_is_caught(policy: str) -> None:
    honest = job("a", submit=0, user="a", intent=RESNET, time_limit_s=LIMIT)
    lies = liars(1.0)[1:]
    told = ids(make(policy).decide(snap(honest, *lies, nodes=nodes(4, 4))))
    untold = ids(make(policy).decide(snap(honest, *(
        dataclasses.replace(j, progress=None, predicted_remaining_s=None) for j in lies),
        nodes=nodes(4, 4))))
    assert told == untold


def test_impossible_progress_is_told_from_progress_not_yet_earned() -> None:
    lies = liars(1.0)
    assert not impossible_progress(lies[0], NOW)  # a steps lie: only its run can tell
    assert all(impossible_progress(j, NOW) for j in lies[1:])
    # a job requeued by Slurm keeps the progress of its earlier run: possible since submission
    requeued = job("r", submit=NOW - 7200, intent=RESNET,
                   progress=Progress(steps_done=4000, steps_total=4104, rate=6.8,
                                     updated_at=NOW - 600))
    assert not impossible_progress(requeued, NOW)
    assert believed_progress(requeued) is None  # but it counts only once it runs again
    # Slurm gives a requeued job the requeue's time as its submit time (measured on 22.05): the
    # progress of its earlier runs predates it. Not a lie of its owner's once it was restarted;
    # a faster rate than its model allows still is.
    now_submitted = dataclasses.replace(requeued, submit_time=NOW - 5, restarts=1)
    assert not impossible_progress(now_submitted, NOW)
    assert impossible_progress(dataclasses.replace(now_submitted, restarts=0), NOW)
    assert impossible_progress(dataclasses.replace(now_submitted, progress=Progress(
        steps_done=4000, steps_total=4104, rate=1e6, updated_at=NOW - 600)), NOW)


@pytest.mark.parametrize("policy", ["sjf", "rl", "deadline", "elasticflow"])
def test_a_lie_buys_nothing_over_claiming_nothing(policy: str) -> None:
    """A caught liar's job ranks exactly where the same job claiming no size would."""
    honest = [job(f"a{i}", submit=i, user="a", intent=Intent(total_steps=s, model="resnet50"),
                  time_limit_s=LIMIT) for i, s in enumerate((500, 4104, 30_000))]
    lying = job("b", submit=5, user="b", intent=Intent(total_steps=1, model="resnet50"),
                time_limit_s=LIMIT, claim_ratio=math.inf)
    silent = job("b", submit=5, user="b", intent=Intent(model="resnet50"), time_limit_s=LIMIT)
    with_lie = ids(make(policy).decide(snap(*honest, lying, nodes=nodes(4))))
    without = ids(make(policy).decide(snap(*honest, silent, nodes=nodes(4))))
    assert with_lie.index("b") >= without.index("b"), (with_lie, without)
