"""The daemon's `deadline` heuristic: minimum shares reserved by class and deadline, late and
no-deadline jobs best-effort shortest first (and never starved), spare GPUs where they cut
the most, running elastic jobs grown and shrunk, GPU counts inside the job's range."""

from __future__ import annotations

from typing import Any

import reference_deadline as ref
from policy_builders import NOW, UNSTANDING_CLAIMS, ids, job, nodes, order_of, running, snap

from slurm_rl import perfmodel
from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.policies import make
from slurm_rl.policies.capabilities import Resizing

CRIT, BE = ServiceClass.CRITICAL, ServiceClass.BESTEFFORT
RESNET: dict[str, Any] = {"model": "resnet50", "batch_size": 256}


def dl(seconds: float, **kw: object) -> Intent:
    return Intent(deadline=NOW + seconds, **kw)  # type: ignore[arg-type]


def speedup(g: int, model: str = "resnet50") -> float:
    c = perfmodel.curve_for(model, 256)
    return c.throughput(g) / c.throughput(1)


def test_reserved_jobs_by_class_then_deadline_with_reason() -> None:
    s = snap(job("loose", intent=dl(5000), predicted_remaining_s=1000),
             job("tight", intent=dl(2000), predicted_remaining_s=1700),
             job("crit", intent=dl(9000, service_class=CRIT), predicted_remaining_s=100),
             nodes=nodes(0))
    d = make("deadline").decide(s)
    assert ids(d) == ["crit", "tight", "loose"]
    assert order_of(d, "tight").reason == (
        "standard, deadline t=12000s, min share 1 GPUs (est 28m (predicted)), starts now")
    assert all(o.gpus is None for o in d.order)  # no GPU ranges here
    assert isinstance(make("deadline"), Resizing)


def test_minimum_share_is_the_fewest_gpus_that_meet_the_deadline() -> None:
    it = dl(600, hard=True, gpus_min=1, gpus_max=4, **RESNET)
    s = snap(job("h", intent=it, predicted_remaining_s=1000), job("other", submit=-1),
             nodes=nodes(0, 0))
    d = make("deadline", min_gain=0.99).decide(s)  # no spare GPUs given
    assert ids(d) == ["h", "other"]
    need = next(g for g in (1, 2, 4) if 1000 / speedup(g) <= 600)
    assert order_of(d, "h").gpus == need
    assert f"min share {need} GPUs" in order_of(d, "h").reason


def test_a_reservation_waits_for_running_jobs_and_blocks_best_effort_that_would_delay_it() -> None:
    # 8 GPUs: r1 (4) ends in 1000 s. "big" needs 8 GPUs for 400 s by 2000 s: reserved at 1000 s.
    # "long" (1 GPU, no deadline, 5000 s) fits now but would hold a GPU past 1000 s: it waits;
    # "short" (1 GPU, 500 s) ends before and starts.
    s = snap(running("r1", gpus=4, predicted_remaining_s=1000),
             job("big", gpus=8, intent=dl(2000), predicted_remaining_s=400),
             job("long", predicted_remaining_s=5000, intent=Intent(total_steps=1)),
             job("short", predicted_remaining_s=500, submit=1), nodes=nodes(4, 0))
    d = make("deadline").decide(s)
    assert ids(d) == ["big", "short", "long"]  # best-effort: submit + remaining time
    assert order_of(d, "big").reason.endswith("planned start in 17m")
    assert order_of(d, "short").reason.endswith("; starts now")
    assert not order_of(d, "long").reason.endswith("starts now")


def test_late_jobs_run_best_effort_shortest_first_and_hard_misses_are_demoted() -> None:
    s = snap(job("soft-long", intent=dl(100), predicted_remaining_s=5000),
             job("soft-short", intent=dl(100), predicted_remaining_s=1000, submit=1),
             job("hard-late", intent=dl(100, hard=True), predicted_remaining_s=1000, submit=-9),
             job("nodl", predicted_remaining_s=3000, submit=2),
             job("ok", intent=dl(1000), predicted_remaining_s=100, submit=3), nodes=nodes(0))
    d = make("deadline").decide(s)
    assert ids(d) == ["ok", "soft-short", "nodl", "soft-long", "hard-late"]
    assert order_of(d, "soft-short").reason.startswith(
        "standard, soft deadline t=10100s cannot be met given the reservations ahead: "
        "best-effort, shortest first by age")
    assert order_of(d, "hard-late").reason.startswith("demoted: hard deadline t=10100s")


def test_jobs_without_deadlines_do_not_starve() -> None:
    # "old" (5000 s) has waited 10,000 s: it passes jobs submitted more than 5000 s after it,
    # however short they are; a short job of its own age still goes first.
    s = snap(job("old", predicted_remaining_s=5000, submit=0),
             job("new-short", predicted_remaining_s=10, submit=NOW - 100),
             job("peer-short", predicted_remaining_s=10, submit=100), nodes=nodes(4))
    assert ids(make("deadline").decide(s)) == ["peer-short", "old", "new-short"]


def test_unknown_duration_and_time_limit_bound_hold_until_the_deadline() -> None:
    # (progress counts once a job has run: "prog" was requeued after running)
    s = snap(job("prog", intent=dl(1000), progress=Progress(steps_done=0, steps_total=900,
                                                            rate=1.0), restarts=1),
             job("limit", intent=dl(100, hard=True), time_limit_s=3600),
             job("unknown", intent=dl(500)), nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["limit", "unknown", "prog"]  # by deadline: none is demoted
    assert "(progress)" in order_of(d, "prog").reason
    for jid in ("limit", "unknown"):
        assert "duration unknown or only bounded" in order_of(d, jid).reason


def test_spare_gpus_go_where_they_cut_the_most() -> None:
    # 12 free GPUs, two range jobs of 1 GPU: resnet50 scales better than bert, so it gets more.
    r = job("r", intent=Intent(gpus_min=1, gpus_max=8, **RESNET), predicted_remaining_s=4000)
    b = job("b", intent=Intent(gpus_min=1, gpus_max=8, model="bert", batch_size=256),
            predicted_remaining_s=4000, submit=1)
    d = make("deadline").decide(snap(r, b, nodes=nodes(0, 0, 0)))
    gr, gb = order_of(d, "r").gpus, order_of(d, "b").gpus
    assert (gr, gb) == (8, 4)
    assert "given" in order_of(d, "r").reason
    # an impossible gain threshold keeps the minimum
    d = make("deadline", min_gain=0.99).decide(snap(r, b, nodes=nodes(0, 0)))
    assert [o.gpus for o in d.order] == [1, 1]


def test_spare_gpus_never_keep_a_later_job_from_starting() -> None:
    lin = Intent(gpus_min=1, gpus_max=4, **RESNET)
    s = snap(job("r", intent=lin, predicted_remaining_s=4000, submit=0),
             job("next", gpus=2, predicted_remaining_s=9000, submit=1), nodes=nodes(0))
    d = make("deadline").decide(s)
    assert order_of(d, "r").gpus == 2 and ids(d) == ["r", "next"]


def test_range_capped_by_cluster_and_node_shape() -> None:
    it = Intent(gpus_min=2, gpus_max=64, **RESNET)
    s = snap(job("r", gpus=2, intent=it, predicted_remaining_s=4000), nodes=nodes(0, 0))
    g = make("deadline").decide(s).order[0].gpus
    assert g is not None and 2 <= g <= 8 and (g <= 4 or g % 4 == 0)


def test_running_elastic_job_grows_into_spare_gpus_and_shrinks_for_a_reservation() -> None:
    el = Intent(gpus_min=1, gpus_max=8, elastic=True, **RESNET)
    run = running("e", gpus=4, intent=el, predicted_remaining_s=40_000)
    d = make("deadline").decide(snap(run, nodes=nodes(4, 0)))
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 8)]
    assert "spare GPUs: est" in d.resizes[0].reason
    # Its 8 GPUs fill the cluster; a job due in 1000 s that needs 4 GPUs takes them back.
    wide = running("e", gpus=8, intent=el, predicted_remaining_s=20_000)
    need = job("p", gpus=4, intent=dl(1000), predicted_remaining_s=900)
    d = make("deadline").decide(snap(wide, need, nodes=nodes(4, 4)))
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", 1)]
    assert d.resizes[0].reason == "shrink to 1 GPUs to start job p"
    assert order_of(d, "p").reason.endswith("starts now")
    # A job without a deadline takes back nothing from a running job's reservation (its share
    # is 4 GPUs, for a deadline in 40,000 s).
    due = running("e", gpus=8, intent=dl(40_000, gpus_min=1, gpus_max=8, elastic=True,
                                         **RESNET), predicted_remaining_s=20_000)
    nodl = job("n", gpus=4, predicted_remaining_s=900)
    d = make("deadline").decide(snap(due, nodl, nodes=nodes(4, 4)))
    assert d.resizes == ()


def test_a_running_deadline_job_grows_to_its_share() -> None:
    el = Intent(deadline=NOW + 1000, gpus_min=1, gpus_max=8, elastic=True, **RESNET)
    run = running("e", gpus=1, intent=el, predicted_remaining_s=2000)
    d = make("deadline", min_gain=0.99).decide(snap(run, nodes=nodes(1, 0)))
    need = next(g for g in (2, 4, 8) if 2000 / speedup(g) + 30 <= 1000)
    assert [(r.job_id, r.gpus) for r in d.resizes] == [("e", need)]
    assert d.resizes[0].reason == f"grow to {need} GPUs to meet its deadline"


def test_pending_gpu_counts_stay_inside_the_range() -> None:
    it = dl(50_000, gpus_min=2, gpus_max=3, **RESNET)
    late = dl(10, gpus_min=2, gpus_max=6, **RESNET)
    s = snap(job("a", gpus=2, intent=it, predicted_remaining_s=9000),
             job("b", gpus=2, intent=late, predicted_remaining_s=9000, submit=1),
             nodes=nodes(0, 0, 0, 4))
    for o in make("deadline").decide(s).order:
        assert o.gpus is not None and 2 <= o.gpus <= (3 if o.job_id == "a" else 6)


def test_a_reserved_share_suspends_a_best_effort_elastic_job_when_shrinking_is_not_enough() -> None:
    # "e" (no deadline) fills the only node; "p" needs all 4 GPUs now for its deadline, and
    # shrinking "e" to its floor (2) leaves only 2: "e" is suspended (requeued) instead.
    el = Intent(gpus_min=2, gpus_max=4, elastic=True, **RESNET)
    s = snap(running("e", gpus=4, intent=el, predicted_remaining_s=40_000),
             job("p", gpus=4, intent=dl(1000), predicted_remaining_s=900), nodes=nodes(4))
    d = make("deadline").decide(s)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [
        ("e", "suspended to start job p for its deadline")]
    assert order_of(d, "p").reason.endswith("starts now")
    assert d.resizes == ()
    # suspend=false: nothing is requeued, and the reservation waits for "e".
    d = make("deadline", suspend=False).decide(s)
    assert d.preemptions == ()
    assert not order_of(d, "p").reason.endswith("starts now")


def test_a_running_job_that_needs_many_gpus_gives_way_to_pending_jobs_that_need_few() -> None:
    # "r" runs on 4 of 8 GPUs and would need all 8 to make its deadline; "p1" and "p2" need 2
    # each, now. Running jobs first reserves only "r"; cheapest first reserves both pending
    # jobs (more deadlines), so they start and "r" is not grown.
    x = 2100.0
    assert x > 2000 and x * speedup(4) / speedup(8) + 30 <= 2000
    r = running("r", gpus=4, intent=dl(2000, gpus_min=1, gpus_max=8, elastic=True, **RESNET),
                predicted_remaining_s=x)
    s = snap(r, job("p1", gpus=2, intent=dl(1000), predicted_remaining_s=900, submit=1),
             job("p2", gpus=2, intent=dl(1000), predicted_remaining_s=900, submit=2),
             nodes=nodes(4, 0))
    d = make("deadline", min_gain=0.99).decide(s)
    assert order_of(d, "p1").reason.endswith("starts now")
    assert order_of(d, "p2").reason.endswith("starts now")
    assert d.resizes == () and d.preemptions == ()
    # Alone, "r" grows to the 8 GPUs its deadline needs.
    d = make("deadline", min_gain=0.99).decide(snap(r, nodes=nodes(4, 0)))
    assert [(z.job_id, z.gpus) for z in d.resizes] == [("r", 8)]



def _applies_in_turn(free: dict[str, int], where: dict[str, str],
                     resizes: list[tuple[str, int, int]]) -> bool:
    """Whether `resizes` (job, old, new GPUs) place one after another as the simulator applies
    them (shrinks first; each releases its own GPUs, then its new count goes on the tightest
    node that holds it)."""
    free = dict(free)
    for jid, old, new in sorted(resizes, key=lambda r: (r[2] - r[1], r[0])):
        free[where[jid]] += old
        fit = sorted((f, n) for n, f in free.items() if f >= new)
        if not fit:
            return False
        free[fit[0][1]] -= new
    return True


def test_grows_are_planned_as_they_will_be_applied_one_after_another() -> None:
    # a (1 GPU) on node1, b (2 GPUs) on node2, both filled by rigid jobs; node3 has 4 free.
    # Growing a to 2 and b to 4 both "fit" if every resized job's GPUs are freed before any is
    # placed, but applied in turn a takes node3 first and b's 4 GPUs fit nowhere.
    el = Intent(gpus_min=1, gpus_max=4, elastic=True, **RESNET)
    a = running("a", gpus=1, intent=el, predicted_remaining_s=40_000)
    b = running("b", gpus=2, intent=el, predicted_remaining_s=40_000)
    d = make("deadline").decide(snap(a, b, nodes=nodes(4, 4, 0)))
    assert d.resizes
    old = {"a": 1, "b": 2}
    assert _applies_in_turn({"node1": 0, "node2": 0, "node3": 4}, {"a": "node1", "b": "node2"},
                            [(r.job_id, old[r.job_id], r.gpus) for r in d.resizes])


@UNSTANDING_CLAIMS
def test_a_running_job_holds_its_gpus_until_its_estimate_not_its_bare_prediction(
        claims: dict[str, Any]) -> None:
    # "r" fills the one node and predicts it ends now, but that prediction does not stand (its
    # estimate is for ever, or another 5000 s): "dl" (4 GPUs for 500 s by 1000 s from now) has
    # no room and runs best-effort, after the shorter "early", as the reference does.
    s = snap(running("r", gpus=4, start=NOW - 5000, intent=Intent(**RESNET),
                     predicted_remaining_s=0.0, **claims),
             job("dl", gpus=4, intent=dl(1000), predicted_remaining_s=500, submit=10),
             job("early", predicted_remaining_s=100), nodes=nodes(4))
    d = make("deadline").decide(s)
    assert ids(d) == ["early", "dl"] and not d.resizes
    assert "cannot be met given the reservations ahead" in order_of(d, "dl").reason
    assert ref.decide(s) == ([("early", None), ("dl", None)], [])
