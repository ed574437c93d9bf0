"""The actuator's planning (pure, on snapshots) and the rank → SiteFactor mapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_rl.config import Actuation
from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    Intent,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Preempt,
    Resize,
)
from slurm_rl.daemon.actuator import (
    Change,
    PlanInputs,
    RankScale,
    attribute,
    gpu_request,
    parse_change,
    parse_errors,
    plan_changes,
)
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.db.kinds import ActionKind, EntryKind
from slurm_rl.slurm.runner import CommandResult

NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4)
              for i in range(1, 5))


def job(i: int, **kw: object) -> JobView:
    base: dict[str, object] = dict(id=JobId(str(i)), state=JobState.PENDING,
                                   submit_time=1000.0 + i, gpus=1, nodes=1)
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


RANGE = Intent(gpus_min=1, gpus_max=8)
WHOLE = {"": PartitionLimits(name="", gpus_per_node=4, max_nodes=4)}
"""The partition of these jobs (JobView's default, empty name): every node, as its owner may ask."""


def snap(*jobs: JobView) -> ClusterSnapshot:
    return ClusterSnapshot(time=5000.0, jobs=jobs, nodes=NODES)


def ranked(*ids: int, gpus: dict[int, int] | None = None) -> Decision:
    gpus = gpus or {}
    return Decision(policy="test", order=tuple(
        JobOrder(job_id=JobId(str(i)), rank=r, gpus=gpus.get(i)) for r, i in enumerate(ids)))


# --- the scale ---------------------------------------------------------------------------------

def test_scale_gives_the_top_ranks_distinct_values_then_doubling_buckets() -> None:
    s = RankScale(top=1000, distinct=4)
    assert [s.value(r) for r in range(4)] == [1000, 999, 998, 997]
    assert [s.value(r) for r in range(4, 8)] == [996] * 4      # [d, 2d)
    assert [s.value(r) for r in range(8, 16)] == [995] * 8     # [2d, 4d)
    assert s.value(16) == 994 and s.value(31) == 994 and s.value(32) == 993
    assert RankScale(top=5, distinct=2).value(10_000) == 1     # floored, never 0 (= hold)


@given(st.integers(1, 64), st.integers(0, 20_000))
def test_scale_never_inverts_the_order(distinct: int, rank: int) -> None:
    s = RankScale(top=100_000, distinct=distinct)
    assert s.value(rank) >= s.value(rank + 1)
    if rank + 1 < distinct:
        assert s.value(rank) > s.value(rank + 1)


def test_inserting_one_job_at_the_top_of_10000_changes_about_distinct_plus_log_values() -> None:
    s = RankScale(top=10_000, distinct=32)
    before = [s.value(r) for r in range(10_000)]
    after = [s.value(r + 1) for r in range(10_000)]  # every job moved down one rank
    changed = sum(1 for a, b in zip(before, after, strict=True) if a != b)
    assert changed <= 32 + 10


# --- minimal changes -----------------------------------------------------------------------------

def test_first_plan_sets_every_value_batched_per_value() -> None:
    s = RankScale(top=100, distinct=2)
    jobs = [job(i) for i in range(1, 7)]
    plan = plan_changes(ranked(6, 5, 4, 3, 2, 1), snap(*jobs), PlanInputs(scale=s))
    assert [c.command for c in plan.changes] == [
        "update JobId=6 SiteFactor=100",
        "update JobId=5 SiteFactor=99",
        "update JobId=3,4 SiteFactor=98",   # bucket [2, 4): one command, ids sorted
        "update JobId=1,2 SiteFactor=97",   # bucket [4, 8)
    ]
    assert all(c.kind is ActionKind.SITE_FACTOR for c in plan.changes)


def test_values_slurm_already_has_are_not_reissued() -> None:
    s = RankScale(top=100, distinct=2)
    jobs = [job(i) for i in range(1, 5)]
    known = {JobId("1"): 100, JobId("2"): 99, JobId("3"): 98, JobId("4"): 98}
    assert plan_changes(ranked(1, 2, 3, 4), snap(*jobs),
                        PlanInputs(scale=s, known_values=known)).changes == ()
    # Job 4 jumps to the top: it and the two it passes change, job 3 stays in its bucket.
    plan = plan_changes(ranked(4, 1, 2, 3), snap(*jobs), PlanInputs(scale=s, known_values=known))
    assert [c.command for c in plan.changes] == [
        "update JobId=4 SiteFactor=100", "update JobId=1 SiteFactor=99",
        "update JobId=2 SiteFactor=98"]
    assert plan.unchanged == 1


def test_strict_mode_compares_with_the_priority_slurm_shows_and_skips_held_jobs() -> None:
    s = RankScale(top=100, distinct=8)
    jobs = [job(1, priority=100), job(2, priority=5), job(3, priority=0, held=True)]
    plan = plan_changes(ranked(1, 2, 3), snap(*jobs),
                        PlanInputs(mode=Actuation.PRIORITY, scale=s))
    assert [c.command for c in plan.changes] == ["update JobId=2 Priority=99"]
    assert plan.changes[0].kind is ActionKind.PRIORITY
    assert [k.job_id for k in plan.skipped] == ["3"]


def test_only_managed_pending_jobs_are_touched() -> None:
    jobs = [job(1), job(2, managed=False), job(3, state=JobState.RUNNING), job(4)]
    decision = Decision(policy="t", order=(
        JobOrder(job_id=JobId("1"), rank=0), JobOrder(job_id=JobId("2"), rank=1),
        JobOrder(job_id=JobId("3"), rank=2), JobOrder(job_id=JobId("9"), rank=3),
    ), resizes=(Resize(job_id=JobId("3"), gpus=8),))
    plan = plan_changes(decision, snap(*jobs))
    assert [c.job_ids for c in plan.changes] == [("1",)]
    why = [(k.job_id, k.why) for k in plan.skipped]
    assert why == [("2", "outside the daemon's scope"), ("3", "running, not pending"),
                   ("9", "not in the snapshot"),
                   ("3", "not applied: a dry run resizes no running job")]


def test_resizes_and_preemptions_of_running_jobs_are_skipped_and_said_so() -> None:
    jobs = [job(1), job(2, state=JobState.RUNNING), job(3, state=JobState.RUNNING)]
    decision = Decision(policy="t", order=(JobOrder(job_id=JobId("1"), rank=0),),
                        resizes=(Resize(job_id=JobId("2"), gpus=2),),
                        preemptions=(Preempt(job_id=JobId("3")),))
    plan = plan_changes(decision, snap(*jobs))
    assert [c.job_ids for c in plan.changes] == [("1",)]
    assert [(k.job_id, k.entry, k.why) for k in plan.skipped] == [
        ("2", EntryKind.RESIZE, "not applied: a dry run resizes no running job"),
        ("3", EntryKind.PREEMPT, "not applied: a dry run preempts no running job")]
    assert plan.not_applied_note() == (
        "not applied: 1 resize(s) and 1 preemption(s) of running jobs (a dry run applies none)")
    acting = plan_changes(decision, snap(*jobs),
                          PlanInputs(resizes_applied=True, preemptions_applied=True))
    assert acting.skipped == () and acting.not_applied_note() is None
    only_order = plan_changes(Decision(policy="t", order=decision.order), snap(*jobs))
    assert only_order.not_applied_note() is None


def test_gpu_counts_become_tres_per_node_and_num_nodes() -> None:
    jobs = [job(1, gpus=1, intent=RANGE), job(2, gpus=2, intent=RANGE),
            job(3, gpus=4, intent=RANGE), job(4, gpus=8, nodes=2, intent=RANGE),
            job(5, gpus=2, intent=RANGE)]
    known = {JobId(str(i)): RankScale().value(i - 1) for i in range(1, 6)}
    plan = plan_changes(ranked(1, 2, 3, 4, 5, gpus={1: 4, 2: 8, 3: 4, 4: 2, 5: 7}),
                        snap(*jobs), PlanInputs(known_values=known, limits=WHOLE))
    cmds = [c.command for c in plan.changes]
    assert cmds == [
        "update JobId=4 TresPerNode=gres:gpu:2 NumNodes=1",   # 8 on 2 nodes -> 2 on one
        "update JobId=1 TresPerNode=gres:gpu:4",              # fits one node
        "update JobId=2 TresPerNode=gres:gpu:4 NumNodes=2",   # whole nodes
    ]
    assert {c.kind for c in plan.changes} == {ActionKind.TRES_PER_NODE}
    assert [k.job_id for k in plan.skipped] == ["5"]          # 7 on 4-GPU nodes: uneven


def test_gpu_request_splits_evenly_over_whole_nodes_or_refuses() -> None:
    assert gpu_request(3, 4) == (3, 1)
    assert gpu_request(8, 4) == (4, 2)
    assert gpu_request(12, 4) == (4, 3)
    assert gpu_request(6, 4) == (3, 2)
    assert gpu_request(7, 4) is None
    assert gpu_request(0, 4) is None


def test_commands_are_chunked() -> None:
    jobs = [job(i) for i in range(1, 11)]
    plan = plan_changes(ranked(*range(1, 11)), snap(*jobs),
                        PlanInputs(scale=RankScale(distinct=1), max_ids=4))
    assert [len(c.job_ids) for c in plan.changes] == [1, 1, 2, 4, 2]


def test_stored_argv_round_trips() -> None:
    c = Change(kind=ActionKind.TRES_PER_NODE, job_ids=(JobId("7"), JobId("9")),
               fields=(("TresPerNode", "gres:gpu:4"), ("NumNodes", "2")))
    assert c.argv == ("scontrol", "update", "JobId=7,9", "TresPerNode=gres:gpu:4", "NumNodes=2")
    assert parse_change(c.kind, c.argv) == c


# --- outcomes --------------------------------------------------------------------------------

# Recorded from scontrol 22.05 on the test cluster, fed
#   update JobId=23,99999,24 SiteFactor=55 / update JobId=19 SiteFactor=5 on stdin.
STDERR = "Invalid job id specified for job 99999\nJob has already finished for job 19\n"


def test_errors_are_attributed_to_jobs() -> None:
    per_job, other = parse_errors(STDERR)
    assert per_job == {"99999": "Invalid job id specified", "19": "Job has already finished"}
    assert other == []


def test_a_batch_outcome_names_the_refused_jobs_per_change() -> None:
    a = Change(kind=ActionKind.SITE_FACTOR, job_ids=tuple(map(JobId, ("23", "99999", "24"))),
               fields=(("SiteFactor", "55"),))
    b = Change(kind=ActionKind.SITE_FACTOR, job_ids=(JobId("19"),), fields=(("SiteFactor", "5"),))
    c = Change(kind=ActionKind.SITE_FACTOR, job_ids=(JobId("30"),), fields=(("SiteFactor", "4"),))
    result = CommandResult(args=("scontrol",), returncode=1, stdout="", stderr=STDERR,
                           duration_s=0.01)
    out = attribute([a, b, c], result)
    assert [dict(o.failed) for o in out.outcomes] == [
        {"99999": "Invalid job id specified"}, {"19": "Job has already finished"}, {}]
    assert out.outcomes[2].ok


def test_an_error_naming_no_job_fails_the_whole_batch() -> None:
    a = Change(kind=ActionKind.SITE_FACTOR, job_ids=(JobId("1"),), fields=(("SiteFactor", "5"),))
    result = CommandResult(args=("scontrol",), returncode=1, stdout="",
                           stderr="slurm_update error: Access/permission denied\n",
                           duration_s=0.01)
    (o,) = attribute([a], result).outcomes
    assert o.failed == {"1": "slurm_update error: Access/permission denied"}


@pytest.mark.parametrize("bad", [dict(distinct=0), dict(floor=0), dict(top=0)])
def test_bad_scales_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        RankScale(**bad)


def test_jobs_that_asked_for_gpus_per_job_keep_their_count() -> None:
    plan = plan_changes(ranked(1, gpus={1: 4}), snap(job(1, gpus=2, intent=RANGE)),
                        PlanInputs(known_values={JobId("1"): RankScale().value(0)},
                                   gpus_per_job=frozenset({JobId("1")}), limits=WHOLE))
    assert plan.changes == ()
    assert [s.why for s in plan.skipped] == ["GPUs asked per job (--gpus): not resized"]


def test_a_gpu_count_outside_the_job_s_range_is_never_applied() -> None:
    # The owner's range (or, without one, the owner's own count) bounds what the daemon, as
    # operator, sets: a policy's count outside it is skipped and said so; inside, applied.
    jobs = [job(1, gpus=1, intent=Intent(gpus_min=1, gpus_max=2)), job(2, gpus=2),
            job(3, gpus=1, intent=Intent(gpus_min=1, gpus_max=2))]
    known = {JobId(str(i)): RankScale().value(i - 1) for i in range(1, 4)}
    plan = plan_changes(ranked(1, 2, 3, gpus={1: 4, 2: 1, 3: 2}), snap(*jobs),
                        PlanInputs(known_values=known, limits=WHOLE))
    assert [c.command for c in plan.changes] == ["update JobId=3 TresPerNode=gres:gpu:2"]
    assert [(k.job_id, k.why) for k in plan.skipped] == [
        ("1", "4 GPUs are outside the job's range 1-2"),
        ("2", "1 GPUs for a job without a GPU range (it asked for 2)")]


def test_no_gpu_count_changes_while_partition_limits_are_unread() -> None:
    # The daemon acts as operator, which skips slurmctld's checks for the owner: without the
    # partition's limits (scontrol show partition failing) nothing says what the owner may ask.
    jobs = [job(1, gpus=1, intent=RANGE)]
    known = {JobId("1"): RankScale().value(0)}
    unread = plan_changes(ranked(1, gpus={1: 4}), snap(*jobs), PlanInputs(known_values=known))
    assert unread.changes == ()
    assert [(k.job_id, k.why) for k in unread.skipped] == [
        ("1", "partition limits not read: GPU counts are not changed")]
    read = plan_changes(ranked(1, gpus={1: 4}), snap(*jobs),
                        PlanInputs(known_values=known, limits=WHOLE))
    assert [c.command for c in read.changes] == ["update JobId=1 TresPerNode=gres:gpu:4"]
