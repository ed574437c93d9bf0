"""`elasticflow`: sticky admission, backward-planned shares, marginal GPU-time, node placement.

The first test is a case worked by hand from the original's rules (pkusys/ElasticFlow,
scheduler.py: ef_sim_jobs_access_control, estimate_all_jobs, ef_sim_allocation)."""

from __future__ import annotations

from typing import Any

from policy_builders import NOW, UNSTANDING_CLAIMS, ids, job, nodes, order_of, running, snap

from slurm_rl.core import ClusterSnapshot, Intent, NodeName
from slurm_rl.policies import elasticflow, make
from slurm_rl.policies.elasticflow.jobs import model_cap
from slurm_rl.policies.elasticflow.plan import Profile, plan_job
from slurm_rl.sim import metrics


def dl(seconds: float, **kw: object) -> Intent:
    return Intent(deadline=NOW + seconds, **kw)  # type: ignore[arg-type]


def on(node: str, g: int) -> tuple[tuple[NodeName, int], ...]:
    return ((NodeName(node), g),)


def test_hand_worked_sticky_admission() -> None:
    # One node of 4 GPUs; rigid 2-GPU jobs of 1000 s each, submitted A, B, C:
    #   A deadline +1000, B +1800, C +1100.
    # A: 2 GPUs [0, 1000) ends at 1000: admitted.
    # B (after A, EDF): back from 1800, [1000, 1800) gives 0.8 of its work, [0, 1000) the rest:
    #   point 0, runs 2 GPUs from now, ends 1000: admitted.
    # C (deadline 1100, planned between A and B): 2 GPUs [0, 1000), ends 1000, fine; but B,
    #   re-planned after it, has 0 GPUs before 1000 and only 0.8 of its work by 1800: it would
    #   miss, so C is declined (the old code took C and dropped B).
    s = snap(job("A", gpus=2, intent=dl(1000), predicted_remaining_s=1000, submit=1),
             job("B", gpus=2, intent=dl(1800), predicted_remaining_s=1000, submit=2),
             job("C", gpus=2, intent=dl(1100), predicted_remaining_s=1000, submit=3),
             nodes=nodes(0))
    policy = elasticflow.new()
    d = policy.decide(s)
    assert ids(d) == ["A", "B", "C"]
    assert "admitted: planned 2 GPUs from now" in order_of(d, "A").reason
    assert "start now at 2 GPUs" in order_of(d, "B").reason
    assert order_of(d, "C").reason.startswith("declined at admission")
    assert metrics.declined(policy) == 1
    # Sticky: A and B run; C is still declined, and a newcomer D with a tighter deadline
    # than B's is declined too rather than B dropped.
    later = snap(running("A", gpus=2, intent=dl(1000), predicted_remaining_s=990, submit=1,
                         placement=on("node1", 2)),
                 running("B", gpus=2, intent=dl(1800), predicted_remaining_s=990, submit=2,
                         placement=on("node1", 2)),
                 job("C", gpus=2, intent=dl(1100), predicted_remaining_s=1000, submit=3),
                 job("D", gpus=2, intent=dl(1050), predicted_remaining_s=100, submit=4),
                 nodes=nodes(4), time=NOW + 10)
    d = policy.decide(later)
    assert ids(d) == ["C", "D"]
    assert all(o.reason.startswith("declined") for o in d.order)
    assert policy.declined_jobs == 2
    # An admitted job that can no longer make it is never dropped: it stays planned (EDF).
    slow = snap(job("E", gpus=2, intent=dl(500), predicted_remaining_s=400, submit=5),
                nodes=nodes(0), time=NOW + 20)
    d = policy.decide(slow)
    assert "admitted" in order_of(d, "E").reason
    late = snap(job("E", gpus=2, intent=dl(500), predicted_remaining_s=4000, submit=5),
                nodes=nodes(0), time=NOW + 30)
    assert "admitted" in order_of(policy.decide(late), "E").reason
    policy.reset()
    assert policy.declined_jobs == 0
    assert order_of(policy.decide(late), "E").reason.startswith("declined")


def _linear(g: int) -> float:
    return 400.0 / g  # rem(1) = 400 s, perfect scaling


def test_backward_plan_varies_the_count_over_the_profile() -> None:
    prof = Profile(0.0, 4)
    prof.take(0.0, 100.0, 2)  # 2 GPUs free before 100, 4 after
    # deadline 150: quotas 1 and 2 hold 0.375 and 0.75 of the work; 4 holds it all, running
    # at level(2) = 2 before 100 and 4 after.
    p = plan_job(prof, 0.0, 150.0, _linear, [1, 2, 4])
    assert p.ok and p.steps == ((0.0, 100.0, 2), (100.0, 150.0, 4)) and p.end == 150.0
    # deadline 300: quota 2 holds it from point 100 back; before it, the previous quota (1).
    p = plan_job(prof, 0.0, 300.0, _linear, [1, 2, 4])
    assert p.ok and p.steps == ((0.0, 100.0, 1), (100.0, 250.0, 2))
    # no quota makes it: the largest counts, past the deadline
    p = plan_job(prof, 0.0, 90.0, _linear, [1, 2, 4])
    assert not p.ok and p.steps[0] == (0.0, 100.0, 2) and p.end == 150.0


def test_model_caps_where_the_throughput_peaks() -> None:
    assert model_cap("bert", 64) == 8
    assert model_cap("gpt2", 128) == 16
    assert model_cap("resnet50_cifar10", 64) == 4
    assert model_cap("no-such-model", 64) is None


def test_leftover_by_marginal_gpu_time_without_threshold() -> None:
    # vgg16/256 scales almost linearly, bert/64 badly (1 -> 2 GPUs: 6.03 -> 8.64 it/s). Two
    # free GPUs: vgg16's step 1 -> 2 costs the least GPU-time per GPU, then bert's 1 -> 2
    # (no gain threshold), vgg16's 2 -> 4 no longer fits.
    def rng(model: str, batch: int) -> Intent:
        return Intent(model=model, batch_size=batch, gpus_min=1, gpus_max=8, elastic=True)

    s = snap(running("v", gpus=1, intent=rng("vgg16", 256),
                     predicted_remaining_s=5000, placement=on("node1", 1)),
             running("b", gpus=1, intent=rng("bert", 64),
                     predicted_remaining_s=5000, placement=on("node1", 1)),
             nodes=nodes(2))
    d = make("elasticflow").decide(s)
    assert sorted((r.job_id, r.gpus) for r in d.resizes) == [("b", 2), ("v", 2)]
    assert all("marginal GPU-time" in r.reason for r in d.resizes)
    # a step that does not pay the restart cost is not taken
    short = snap(running("b", gpus=1, intent=rng("bert", 64),
                         predicted_remaining_s=60, placement=on("node1", 1)), nodes=nodes(1))
    assert not make("elasticflow").decide(short).resizes


def test_resizes_hold_on_the_nodes() -> None:
    # 3 GPUs free cluster-wide (node1: 1 + the job's own 1 once released, node2: 2), but no
    # node holds 4: the job grows to 2, not 4.
    it = Intent(model="vgg16", batch_size=256, gpus_min=1, gpus_max=4, elastic=True)
    s = snap(running("e", gpus=1, intent=it, predicted_remaining_s=5000,
                     placement=on("node1", 1)),
             running("other", gpus=2, predicted_remaining_s=5000, placement=on("node1", 2)),
             running("x", gpus=2, predicted_remaining_s=5000, placement=on("node2", 2)),
             nodes=nodes(3, 2))
    d = make("elasticflow").decide(s)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 2)]


def test_an_admitted_job_shrinks_a_best_effort_one_to_start() -> None:
    it = Intent(gpus_min=1, gpus_max=4, elastic=True, model="vgg16", batch_size=256)
    s = snap(running("e", gpus=4, intent=it, predicted_remaining_s=4000,
                     placement=on("node1", 4)),
             job("p", gpus=2, intent=dl(200), predicted_remaining_s=100), nodes=nodes(4))
    d = make("elasticflow").decide(s)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 2)]
    assert d.resizes[0].reason == "shrink to 2 GPUs to start job p (deadline first)"
    assert "start now at 2 GPUs" in order_of(d, "p").reason


def test_unknown_duration_is_admitted_unchecked() -> None:
    s = snap(job("u", intent=dl(100)), nodes=nodes(0))
    d = make("elasticflow").decide(s)
    assert "duration unknown: admitted unchecked" in d.order[0].reason


def test_only_elasticflow_declines() -> None:
    assert metrics.declined(make("fifo")) is None
    assert metrics.declined(make("elasticflow")) == 0


def test_an_admitted_job_planned_no_gpus_now_is_suspended() -> None:
    # The original gives a job 0 GPUs when earlier deadlines need them all: R (deadline far)
    # holds the node; P (4 GPUs, deadline +500) is planned first, R after it, so R is
    # suspended (preempted: it checkpoints and resumes when its plan gives it GPUs).
    it = Intent(deadline=NOW + 100_000, gpus_min=1, gpus_max=4, elastic=True,
                model="vgg16", batch_size=256)
    s = snap(running("R", gpus=4, intent=it, predicted_remaining_s=4000,
                     placement=on("node1", 4)),
             job("P", gpus=4, intent=dl(500), predicted_remaining_s=400), nodes=nodes(4))
    d = make("elasticflow").decide(s)
    assert [p.job_id for p in d.preemptions] == ["R"] and not d.resizes
    assert d.preemptions[0].reason.startswith("suspend to start job P")
    assert "start now at 4 GPUs" in order_of(d, "P").reason


@UNSTANDING_CLAIMS
def test_a_running_job_holds_its_gpus_until_its_estimate_not_its_bare_prediction(
        claims: dict[str, Any]) -> None:
    # "r" fills the one node and predicts it ends now, but that prediction does not stand (its
    # estimate is for ever, or another 5000 s): "dl" (4 GPUs for 500 s by 1000 s from now)
    # can not be planned and is declined, as it is when "r" predicts nothing at all. On the
    # bare prediction it would be admitted on GPUs that are not coming free.
    def world(predicted: float | None) -> ClusterSnapshot:
        return snap(running("r", gpus=4, start=NOW - 5000,
                            intent=Intent(model="resnet50", batch_size=256),
                            predicted_remaining_s=predicted, **claims),
                    job("dl", gpus=4, intent=dl(1000), predicted_remaining_s=500, submit=10),
                    nodes=nodes(4))

    d = make("elasticflow").decide(world(0.0))
    assert d == make("elasticflow").decide(world(None))
    assert order_of(d, "dl").reason.startswith("declined at admission")
