"""`elasticflow`: admission control, minimum satisfactory share, elastic scaling."""

from __future__ import annotations

from policy_builders import NOW, ids, job, nodes, order_of, running, snap

from slurm_rl.core import Intent
from slurm_rl.policies import make


def dl(seconds: float, **kw: object) -> Intent:
    return Intent(deadline=NOW + seconds, **kw)  # type: ignore[arg-type]


R50 = {"model": "resnet50", "batch_size": 256}


def test_edf_admission_and_best_effort() -> None:
    s = snap(job("a", gpus=4, intent=dl(1000), predicted_remaining_s=500, submit=1),
             job("b", gpus=4, intent=dl(1200), predicted_remaining_s=500, submit=2),
             job("c", gpus=4, intent=dl(800), predicted_remaining_s=600, submit=3),
             job("d", gpus=1, submit=0), nodes=nodes(0))
    d = make("elasticflow").decide(s)
    assert ids(d) == ["c", "b", "d", "a"]
    assert order_of(d, "c").reason.endswith("min share 4 GPUs (est 10m), start now")
    assert "planned start in 10m" in order_of(d, "b").reason
    assert order_of(d, "a").reason.startswith("not admitted: deadline t=11000s unreachable")
    assert order_of(d, "d").reason == "best-effort (no deadline), submit order"


def test_running_jobs_are_commitments() -> None:
    s = snap(running("r", gpus=4, predicted_remaining_s=1000),
             job("p", gpus=4, intent=dl(500), predicted_remaining_s=100), nodes=nodes(4))
    d = make("elasticflow").decide(s)
    assert "not admitted" in order_of(d, "p").reason and not d.preemptions


def test_minimum_satisfactory_share() -> None:
    # resnet50/256: 1 GPU 1.84 it/s, 2: 3.45, 4: 6.19, 8: 10.4. 4000 s at 1 GPU; 1500 s left:
    # 2 GPUs take 2137 s (too slow), 4 GPUs 1191 s.
    it = dl(1500, gpus_min=1, gpus_max=8, **R50)
    s = snap(job("p", gpus=1, intent=it, predicted_remaining_s=4000),
             job("fill", gpus=4, submit=1), nodes=nodes(0, 0))
    d = make("elasticflow").decide(s)
    assert order_of(d, "p").gpus == 4
    assert "min share 4 GPUs" in order_of(d, "p").reason
    assert ids(d) == ["p", "fill"]


def test_leftover_grows_running_elastic_job() -> None:
    it = Intent(gpus_min=1, gpus_max=4, elastic=True, **R50)  # type: ignore[arg-type]
    s = snap(running("e", gpus=1, intent=it, predicted_remaining_s=4000), nodes=nodes(1))
    d = make("elasticflow").decide(s)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 4)]
    assert "leftover GPUs: est 67m -> 20m" in d.resizes[0].reason
    # not for a job that is not elastic, nor when the gain does not pay the restart
    fixed = snap(running("e", gpus=1, intent=Intent(gpus_min=1, gpus_max=4, **R50),  # type: ignore[arg-type]
                         predicted_remaining_s=4000), nodes=nodes(1))
    assert not make("elasticflow").decide(fixed).resizes
    short = snap(running("e", gpus=1, intent=it, predicted_remaining_s=40), nodes=nodes(1))
    assert not make("elasticflow").decide(short).resizes


def test_shrink_best_effort_elastic_job_to_start_admitted_one() -> None:
    it = Intent(gpus_min=1, gpus_max=4, elastic=True, **R50)  # type: ignore[arg-type]
    s = snap(running("e", gpus=4, intent=it, predicted_remaining_s=4000),
             job("p", gpus=2, intent=dl(200), predicted_remaining_s=100), nodes=nodes(4))
    d = make("elasticflow").decide(s)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 2)]
    assert d.resizes[0].reason == "shrink to 2 GPUs to start job p (deadline first)"


def test_running_elastic_deadline_job_grows_to_meet_its_deadline() -> None:
    it = dl(1500, gpus_min=1, gpus_max=4, elastic=True, **R50)
    s = snap(running("e", gpus=1, intent=it, predicted_remaining_s=4000),
             job("other", gpus=2, submit=1), nodes=nodes(1, 0))
    d = make("elasticflow").decide(s)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 4)]
    assert d.resizes[0].reason.startswith("grow to 4 GPUs to meet deadline t=11500s")


def test_unknown_duration_is_admitted_unchecked() -> None:
    s = snap(job("u", intent=dl(100)), nodes=nodes(0))
    d = make("elasticflow").decide(s)
    assert "duration unknown: admitted unchecked" in d.order[0].reason


def test_a_job_that_is_not_admitted_makes_nobody_shrink() -> None:
    it = Intent(gpus_min=2, gpus_max=4, elastic=True, **R50)  # type: ignore[arg-type]
    s = snap(running("e", gpus=4, intent=it, predicted_remaining_s=4000),
             job("p", gpus=4, intent=dl(200), predicted_remaining_s=100), nodes=nodes(4))
    d = make("elasticflow").decide(s)
    assert "not admitted" in order_of(d, "p").reason and not d.resizes
