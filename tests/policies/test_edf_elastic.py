"""`edf-elastic`: ElasticFlow's `edf` baseline (pkusys/ElasticFlow, scheduler.py:
one_queue_edf_sim_jobs, edf_sim_allocation): earliest deadline first, each job at its maximum
count where that many GPUs are free, else the largest allowed count that is, later deadlines
shrunk or preempted for earlier ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
from policy_builders import NOW, ids, job, nodes, order_of, preempted, running, snap

from slurm_rl.core import Intent, NodeName
from slurm_rl.policies import edf_elastic, make
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.trace import TraceJob


def el(deadline: float | None = None, lo: int = 1, hi: int = 8,
       batch_size: int | None = None) -> Intent:
    return Intent(deadline=None if deadline is None else NOW + deadline, gpus_min=lo,
                  gpus_max=hi, elastic=True, batch_size=batch_size)


def on(node: str, g: int) -> tuple[tuple[NodeName, int], ...]:
    return ((NodeName(node), g),)


def test_earliest_deadline_first_at_its_maximum() -> None:
    s = snap(job("late", intent=el(1000), submit=1), job("none", intent=el(), submit=0),
             job("early", intent=el(500), submit=2), nodes=nodes(0, total=8))
    d = make("edf-elastic").decide(s)
    assert ids(d) == ["early", "late", "none"]
    assert order_of(d, "early").gpus == 8 and "start now at 8 GPUs" in order_of(d, "early").reason
    assert "waits" in order_of(d, "late").reason and "waits" in order_of(d, "none").reason


def test_the_batch_size_caps_the_maximum_and_the_rest_goes_on() -> None:
    s = snap(job("late", intent=el(1000), submit=1),
             job("early", intent=el(500, batch_size=4), submit=2), nodes=nodes(0, total=8))
    d = make("edf-elastic").decide(s)
    assert ids(d) == ["early", "late"]
    assert (order_of(d, "early").gpus, order_of(d, "late").gpus) == (4, 4)


def test_the_largest_allowed_count_that_is_free() -> None:
    # 3 GPUs free: a power of two that fits, 2 (the original's largest measured count <= 3).
    s = snap(running("rigid", gpus=5, placement=on("node1", 5)),
             job("p", intent=el(500), submit=2), nodes=nodes(5, total=8))
    d = make("edf-elastic").decide(s)
    assert order_of(d, "p").gpus == 2
    assert not d.preemptions and not d.resizes, "a rigid running job keeps its GPUs"


def test_an_earlier_deadline_preempts_or_shrinks_a_later_one() -> None:
    r = running("r", gpus=8, intent=el(5000), placement=on("node1", 8), submit=1)
    d = make("edf-elastic").decide(snap(r, job("p", intent=el(100), submit=2),
                                        nodes=nodes(8, total=8)))
    assert preempted(d) == ["r"] and order_of(d, "p").gpus == 8
    assert "earlier deadlines hold every GPU" in d.preemptions[0].reason
    # The earlier job wants only 4 (its batch size): the later one shrinks to the other 4.
    d = make("edf-elastic").decide(snap(r, job("p", intent=el(100, batch_size=4), submit=2),
                                        nodes=nodes(8, total=8)))
    assert not d.preemptions
    assert [(x.job_id, x.gpus) for x in d.resizes] == [("r", 4)]
    assert order_of(d, "p").gpus == 4
    # A later deadline arriving changes nothing for the running one.
    d = make("edf-elastic").decide(snap(r, job("p", intent=el(9000), submit=2),
                                        nodes=nodes(8, total=8)))
    assert not d.preemptions and not d.resizes
    assert "waits" in order_of(d, "p").reason


def test_a_running_job_grows_to_its_maximum() -> None:
    r = running("r", gpus=2, intent=el(5000), placement=on("node1", 2), submit=1)
    d = make("edf-elastic").decide(snap(r, nodes=nodes(2, total=8)))
    assert [(x.job_id, x.gpus) for x in d.resizes] == [("r", 8)]


def test_futile_only_where_nothing_moves_or_starts() -> None:
    p = edf_elastic.new()
    r = running("r", gpus=8, intent=el(5000), placement=on("node1", 8), submit=1)
    assert p.futile(snap(r, job("p", intent=el(9000), submit=2), nodes=nodes(8, total=8)))
    assert not p.futile(snap(r, job("p", intent=el(100), submit=2), nodes=nodes(8, total=8)))


def _trace() -> list[TraceJob]:
    # One node of 4 GPUs. L (elastic 1-4, late deadline) starts alone at 4; S arrives with an
    # earlier deadline and takes the node: L is preempted and resumes at 4 after S.
    return [TraceJob(id="L", submit=0.0, duration=4000.0, gpus=4, deadline=50_000.0,
                     gpus_min=1, gpus_max=4, elastic=True),
            TraceJob(id="S", submit=100.0, duration=400.0, gpus=4, deadline=1000.0,
                     gpus_min=1, gpus_max=4, elastic=True),
            TraceJob(id="N", submit=200.0, duration=100.0, gpus=1)]


@pytest.mark.parametrize("skip_futile", [True, False])
def test_in_the_simulator(skip_futile: bool) -> None:
    cfg = EngineConfig(nodes=1, gpus_per_node=4, audit=True, tick_s=60.0,  # one-step restarts
                       restart_delay_s=30.0, restart_grace_s=0.0, requeue_s=0.0,
                       skip_futile=skip_futile)
    result = Simulator(_trace(), make("edf-elastic"), cfg).run()
    got = {j.job_id: j for j in result.jobs}
    assert result.preemptions == 1 and got["L"].restarts == 1 and got["S"].restarts == 0
    assert got["S"].end <= 1000.0 < got["L"].end
    assert got["N"].start >= got["L"].end, "no deadline: after both"
    assert not result.notes
    runs = sorted((iv.job_id, iv.start, iv.gpus) for iv in result.intervals)
    assert [r for r in runs if r[0] == "L"][0] == ("L", 0.0, 4)
    assert [r for r in runs if r[0] == "S"] == [("S", 100.0, 4)]
    if skip_futile:  # the gate skips calls, never changes a result
        full = Simulator(_trace(), make("edf-elastic"), replace(cfg, skip_futile=False)).run()
        assert full.jobs == result.jobs and full.intervals == result.intervals
        assert result.decisions < full.decisions
