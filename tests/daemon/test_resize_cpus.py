"""A resize of a job the daemon sized (daemon/resize.py over sizing.py): its CPUs per node follow
its new GPU count in the same update, under the owner's CPU limits; a job whose CPUs its owner
asked for keeps them. The verdict is pure; the sequence runs against a recorded-output FAKE of
Slurm's commands (the real thing: test_sizing_cpus_slurm.py)."""

from __future__ import annotations

from dataclasses import replace

from fake_slurm import FakeSlurm
from sqlalchemy.orm import Session

from slurm_rl.config import ResizeConfig, SizingConfig
from slurm_rl.core import (
    ClusterSnapshot,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
    Resize,
)
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.daemon.resize import Resizer, judge, release_lines
from slurm_rl.daemon.restart import gpu_fields
from slurm_rl.daemon.sizing import Sized, Sizer
from slurm_rl.db.repo import upsert_jobs

NOW = 10_000.0
LIMITS = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)}
NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.MIXED, gpus_total=4,
                       cpus_total=8, gpus_alloc=3 if i <= 2 else 0, partitions=("gpu",))
              for i in range(1, 5))


def sized_job(i: str = "1", gpus: int = 6, nodes: int = 2) -> JobView:
    """A deadline-only job the daemon sized to `gpus` GPUs, now running and elastic."""
    return JobView(id=JobId(i), partition="gpu", state=JobState.RUNNING, submit_time=NOW - 600,
                   start_time=NOW - 300, gpus=gpus, nodes=nodes, attained_gpu_s=300.0 * gpus,
                   intent=Intent(deadline=NOW + 1e4, gpus_min=1, gpus_max=8, elastic=True,
                                 model="resnet50"),
                   progress=Progress(steps_done=100, steps_total=1100, rate=1.0))


def test_the_verdict_carries_the_new_cpus_per_node() -> None:
    def verdict(gpus: int, ratio: int | None, limits: dict[str, PartitionLimits] = LIMITS):
        return judge(Resize(job_id=JobId("1"), gpus=gpus), sized_job(), now=NOW,
                     settings=ResizeConfig(), limits=limits, assoc=None,
                     node_free=(1, 1, 4, 4), recent=0, cpus_per_gpu=ratio, nodes=NODES)

    v = verdict(2, 2)
    assert (v.why, v.per_node, v.nodes, v.cpus_per_node) == ("", 2, 1, 4)
    assert release_lines(v, 2) == (
        "update JobId=1 TresPerNode=gres:gpu:2 NumNodes=1 MinCPUsNode=4 StartTime=now+1",
        "release 1")
    assert verdict(8, 2).cpus_per_node == 8  # a grow: 4 a node, 2 CPUs each
    assert verdict(2, None).cpus_per_node is None  # the owner's CPUs: left alone
    assert "MinCPUsNode" not in release_lines(verdict(2, None), 2)[0]
    capped = {"gpu": replace(LIMITS["gpu"], max_cpus_per_job=6)}
    assert verdict(8, 2, capped).cpus_per_node == 3  # 6 a job over 2 nodes
    assert gpu_fields(2, 1, 1) == "TresPerNode=gres:gpu:2"  # unchanged for other callers



def test_a_shrink_updates_gpus_and_cpus_together_only_for_a_sized_job(session: Session) -> None:
    mine, theirs = sized_job("1"), sized_job("2")
    upsert_jobs(session, [mine, theirs], now=NOW)
    session.commit()
    # Job 1 was sized by the daemon (a DONE SIZE_RELEASE: 3 GPUs and 6 CPUs a node, 2 each);
    # job 2 asked for its own CPUs (no such action).
    assert Sizer(FakeSlurm(), SizingConfig(), clock=lambda: NOW - 400)._run(
        session, Sized(job_id=JobId("1"), gpus=6, per_node=3, nodes=2, cpus_per_node=6, why=""),
        1, cycle_id=1, decision_id=None)
    fake = FakeSlurm()
    clock = iter(float(x) for x in range(10**6))
    r = Resizer(fake, ResizeConfig(grace_s=0.0), clock=lambda: NOW + next(clock) / 1000,
                sleep=lambda s: None)
    report = r.step(session, [Resize(job_id=JobId("1"), gpus=2),
                              Resize(job_id=JobId("2"), gpus=2)],
                    ClusterSnapshot(time=NOW, jobs=(mine, theirs), nodes=NODES),
                    limits=LIMITS, assoc=None, cycle_id=2, decision_id=None)
    assert report.resized == 2, report
    assert fake.commands() == [  # both requeued, one wait for PENDING, both released
        "scontrol requeuehold 1",
        "scontrol requeuehold 2",
        "update JobId=1 TresPerNode=gres:gpu:2 NumNodes=1 MinCPUsNode=4 StartTime=now+1",
        "release 1",
        "update JobId=2 TresPerNode=gres:gpu:2 NumNodes=1 StartTime=now+1",
        "release 2"]
