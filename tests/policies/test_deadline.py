"""The daemon's `deadline` heuristic: slack order, classes, demotion, GPU counts."""

from __future__ import annotations

from policy_builders import NOW, ids, job, nodes, order_of, running, snap

from slurm_rl import perfmodel
from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.policies import make

CRIT, BE = ServiceClass.CRITICAL, ServiceClass.BESTEFFORT


def dl(seconds: float, **kw: object) -> Intent:
    return Intent(deadline=NOW + seconds, **kw)  # type: ignore[arg-type]


def test_slack_order_and_reason() -> None:
    s = snap(job("loose", intent=dl(5000), predicted_remaining_s=1000),   # slack 4000
             job("tight", intent=dl(2000), predicted_remaining_s=1700),   # slack 300
             job("mid", intent=dl(9000), predicted_remaining_s=8000, submit=-5),  # slack 1000
             nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["tight", "mid", "loose"]
    r = order_of(d, "tight").reason
    assert r == "standard, slack 5m, deadline t=12000s, needs 1 GPUs (est 28m (predicted))"
    assert all(o.gpus is None for o in d.order)  # no GPU ranges here


def test_groups() -> None:
    s = snap(
        job("nodl-old", submit=1), job("nodl-new", submit=2),
        job("std", intent=dl(1000), predicted_remaining_s=100),
        job("crit-loose", intent=dl(50_000, service_class=CRIT), predicted_remaining_s=100),
        job("soft-late", intent=dl(100), predicted_remaining_s=1000),
        job("softer-late", intent=dl(100), predicted_remaining_s=5000),
        job("hard-late", intent=dl(100, hard=True), predicted_remaining_s=1000, submit=-9),
        job("be-nodl", intent=Intent(service_class=BE), submit=-10),
        job("be-dl", intent=dl(300, service_class=BE), predicted_remaining_s=100, submit=3),
        nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["crit-loose", "std", "soft-late", "softer-late", "nodl-old", "nodl-new",
                      "be-dl", "be-nodl", "hard-late"]
    assert order_of(d, "hard-late").reason.startswith("demoted: hard deadline t=10100s")
    assert order_of(d, "soft-late").reason == (
        "standard, soft deadline t=10100s missed by 15m at 1 GPUs (est 17m (predicted)): "
        "by lateness")
    assert order_of(d, "nodl-old").reason.startswith("no deadline: by age")
    assert order_of(d, "be-nodl").reason.startswith("besteffort")


def test_hard_job_that_can_make_it_at_more_gpus_is_not_demoted() -> None:
    it = dl(600, hard=True, gpus_min=1, gpus_max=4, model="resnet50", batch_size=256)
    s = snap(job("h", intent=it, predicted_remaining_s=1000), job("other", submit=-1),
             nodes=nodes(4, 4))  # no free GPUs now
    d = make("deadline").decide(s)
    assert ids(d) == ["h", "other"]
    c = perfmodel.curve_for("resnet50", 256)
    need = next(g for g in (1, 2, 3, 4) if 1000 * c.throughput(1) / c.throughput(g) <= 600)
    assert order_of(d, "h").gpus == need  # the fewest GPUs that meet the deadline
    assert f"needs {need} GPUs" in order_of(d, "h").reason


def test_estimate_sources() -> None:
    s = snap(job("prog", intent=dl(1000), progress=Progress(steps_done=0, steps_total=900,
                                                            rate=1.0)),
             job("limit", intent=dl(1000), time_limit_s=950),
             job("unknown", intent=dl(1000)), nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["limit", "prog", "unknown"]  # slack 50, 100, and <= 1000 (unknown)
    assert "(progress)" in order_of(d, "prog").reason
    assert "(time limit)" in order_of(d, "limit").reason
    assert "duration unknown" in order_of(d, "unknown").reason


def test_free_gpus_give_a_range_job_more_when_it_pays() -> None:
    lin = Intent(gpus_min=1, gpus_max=4, model="resnet50", batch_size=256)
    s = snap(job("r", gpus=1, intent=lin, predicted_remaining_s=4000), nodes=nodes(0))
    d = make("deadline").decide(s)
    assert order_of(d, "r").gpus == 4
    assert "given 4 GPUs (free" in order_of(d, "r").reason
    # an impossible gain threshold keeps the minimum
    assert make("deadline", min_gain=0.99).decide(s).order[0].gpus == 1


def test_extra_gpus_never_keep_a_later_job_from_starting() -> None:
    lin = Intent(gpus_min=1, gpus_max=4, model="resnet50", batch_size=256)
    s = snap(job("r", gpus=1, intent=lin, predicted_remaining_s=4000, submit=0),
             job("next", gpus=2, submit=1), nodes=nodes(0))
    d = make("deadline").decide(s)
    assert order_of(d, "r").gpus == 2 and ids(d) == ["r", "next"]


def test_job_that_cannot_start_now_keeps_its_base() -> None:
    lin = Intent(gpus_min=1, gpus_max=4, model="resnet50", batch_size=256)
    s = snap(job("r", gpus=1, intent=lin, predicted_remaining_s=4000), nodes=nodes(4))
    assert make("deadline").decide(s).order[0].gpus == 1


def test_range_capped_by_cluster_and_node_shape() -> None:
    it = Intent(gpus_min=2, gpus_max=64, model="resnet50", batch_size=256)
    s = snap(job("r", gpus=2, intent=it, predicted_remaining_s=4000), nodes=nodes(0, 0))
    g = make("deadline").decide(s).order[0].gpus
    assert g is not None and g <= 8 and (g <= 4 or g % 4 == 0)


def test_a_time_limit_alone_never_proves_a_miss() -> None:
    s = snap(job("tl", intent=dl(100, hard=True), time_limit_s=3600),
             job("known", intent=dl(500, hard=True), predicted_remaining_s=450), nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["known", "tl"]  # slack 50 s, then <= 100 s: not demoted
    assert "upper bound only" in order_of(d, "tl").reason


def test_waiting_counts_toward_slack() -> None:
    # Both nodes busy: r1 (4 GPUs) ends in 1000 s, r2 (4 GPUs) in 3000 s.
    busy = (running("r1", gpus=4, predicted_remaining_s=1000),
            running("r2", gpus=4, predicted_remaining_s=3000))
    big = job("big", gpus=8, intent=dl(1500), predicted_remaining_s=400)
    small = job("small", gpus=4, intent=dl(2000), predicted_remaining_s=500, submit=1)
    d = make("deadline").decide(snap(*busy, big, small, nodes=nodes(4, 4)))
    assert ids(d) == ["small", "big"]
    assert order_of(d, "small").reason.endswith("(est 8m (predicted), starts in ~17m)")
    assert "at risk: would make it only if started now; expected 32m late" in (
        order_of(d, "big").reason)
    # a hard deadline at risk is not demoted (the wait is an estimate)
    hard = job("big", gpus=8, intent=dl(1500, hard=True), predicted_remaining_s=400)
    d = make("deadline").decide(snap(*busy, hard, nodes=nodes(4, 4)))
    assert "hard deadline" in d.order[0].reason and "at risk" in d.order[0].reason


def test_late_range_job_gets_its_fastest_count() -> None:
    it = dl(100, gpus_min=1, gpus_max=8, model="resnet50", batch_size=256)
    s = snap(job("late", gpus=1, intent=it, predicted_remaining_s=4000), nodes=nodes(4, 4))
    o = make("deadline").decide(s).order[0]
    assert o.gpus == 8 and "missed by" in o.reason and "at 8 GPUs" in o.reason
