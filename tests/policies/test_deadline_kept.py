"""`deadline` keeps each pending job's reason once it has been read, and the JobOrder made for
it, while what that reason is made from is unchanged (policy.py `_why_key`; the daemon reads
every reason of every cycle). Checked against a fresh policy on each snapshot (nothing kept):
the same ranks, GPU counts, reasons, resizes and suspensions over sequences of snapshots in
which views are kept, replaced and dropped, jobs start, the clock moves past planned starts and
deadlines, and the nodes change."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_builders import NOW, job, nodes, running, snap
from test_deadline_fast import histories

from slurm_rl.core import ClusterSnapshot, Decision, Intent
from slurm_rl.policies import make


def everything(d: Decision) -> tuple[Any, ...]:
    return ([(o.job_id, o.rank, o.gpus, o.reason) for o in d.order],
            [(r.job_id, r.gpus, r.reason) for r in d.resizes],
            [(p.job_id, p.reason) for p in d.preemptions], d.notes)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.sampled_from((0.0, 0.1)), st.sampled_from((0.25, 1.0)),
       st.booleans(), st.integers(0, 2))
def test_kept_reasons_and_orders_are_those_of_a_fresh_policy(
        snaps: list[ClusterSnapshot], min_gain: float, share: float, suspend: bool,
        read: int) -> None:
    options = {"min_gain": min_gain, "urgent_share": share, "suspend": suspend}
    kept = make("deadline", **options)
    for s in snaps:
        got = kept.decide(s)
        if read:  # the daemon reads every reason; a simulator reads none
            for o in got.order[::read]:
                assert o.reason
        assert everything(got) == everything(make("deadline", **options).decide(s))


def test_an_unchanged_entry_is_the_same_object_and_a_changed_one_is_new() -> None:
    """Once read, a reason that does not name a time is not formatted again and its JobOrder is
    returned again; one naming a planned start some time away is made anew every time, and a job
    whose place changes gets a new JobOrder."""
    busy = running("r", gpus=4, time_limit_s=NOW + 600)  # ends by NOW + 600
    # Reserved (its time limit bounds it) to start when r ends, 10 min from NOW.
    urgent = job("d", gpus=4, time_limit_s=1000.0, intent=Intent(deadline=NOW + 5000))
    rest = [job(str(i), submit=float(i)) for i in range(5)]
    policy = make("deadline")
    first = policy.decide(snap(busy, urgent, *rest, nodes=nodes(4)))
    assert "planned start in" in first.order[0].reason
    assert all(o.reason for o in first.order)
    again = policy.decide(snap(busy, urgent, *rest, nodes=nodes(4), time=NOW + 60))
    assert [o.job_id for o in again.order] == ["d", "0", "1", "2", "3", "4"]
    assert all(a is b for a, b in zip(again.order[1:], first.order[1:], strict=True))
    assert again.order[0] is not first.order[0]  # planned start in 9 min now
    assert again.order[0].reason != first.order[0].reason
    newcomer = job("n", gpus=4, time_limit_s=1000.0, intent=Intent(deadline=NOW + 4000))
    moved = policy.decide(snap(busy, urgent, newcomer, *rest, nodes=nodes(4), time=NOW + 60))
    by_id = {o.job_id: o for o in again.order}
    assert all(o is not by_id.get(o.job_id) for o in moved.order[2:])  # each one rank lower
    assert everything(moved) == everything(make("deadline").decide(
        snap(busy, urgent, newcomer, *rest, nodes=nodes(4), time=NOW + 60)))
