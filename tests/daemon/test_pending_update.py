"""The actuator's GPU update of pending jobs, pure and against the daemon's database:

- a job a resize just released keeps its new count while it waits to restart (restart.py,
  `Sequencer.settling`): the policy's pending count for it is not applied (live, the actuator
  set a job grown 1 → 2 back to 1 GPU 0.8 s after the release);
- a job the daemon sized gets `MinCPUsNode` with its new GPU count, at the CPUs per GPU it was
  sized with, under the node's CPUs and the owner's CPU limits (plan_changes `cpus_per_gpu`);
- the Gate reads the partition QOS's and the association's CPU limits as well as their GPU
  limits, so sizing caps CPUs by them (Slurm's commands answered by a FAKE: the test cluster
  has no slurmdbd).

The real-cluster side is test_pending_update_slurm.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from fake_slurm import FakeSlurm
from sqlalchemy.orm import Session

from slurm_rl.config import SizingConfig
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
)
from slurm_rl.daemon.actuator import PlanInputs, gpu_changes, plan_changes, without_gpus
from slurm_rl.daemon.gate import Gate
from slurm_rl.daemon.limits import PartitionLimits, TresLimits, job_limits
from slurm_rl.daemon.restart import SETTLE_S, Sequencer
from slurm_rl.daemon.sizing import Sized, size_job
from slurm_rl.daemon.trust import Grants
from slurm_rl.db.kinds import ActionKind
from slurm_rl.db.repo import upsert_jobs
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import CommandResult

NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))
OPEN = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)}


def job(state: JobState = JobState.PENDING, gpus: int = 2, **kw: object) -> JobView:
    base: dict[str, object] = dict(
        id=JobId("42"), user="alice", account="lab", partition="gpu", state=state,
        submit_time=0.0, gpus=gpus, nodes=1, managed=True,
        intent=Intent(gpus_min=1, gpus_max=4, elastic=True))
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def snap(t: float, *jobs: JobView) -> ClusterSnapshot:
    return ClusterSnapshot(time=t, jobs=jobs, nodes=NODES)


def known(session: Session) -> None:
    """Jobs 42 and 43 in the database (actions name known jobs)."""
    upsert_jobs(session, [job(), job(id=JobId("43"))], now=0.0)


def one_gpu(j: JobView) -> Decision:
    """The policy's pending count for the job: its range minimum."""
    return Decision(policy="t", order=(JobOrder(job_id=j.id, rank=0, gpus=1),))


# --- a job a resize just released ----------------------------------------------------------

def test_a_job_a_resize_just_released_keeps_its_count_while_pending(session: Session) -> None:
    known(session)
    t = [1000.0]
    seq = Sequencer(FakeSlurm(), clock=lambda: t[0])
    assert seq.release(session, ActionKind.REQUEUE_HOLD, JobId("42"),
                       "TresPerNode=gres:gpu:2", cycle_id=1, decision_id=None)
    session.commit()
    pending = job()
    t[0] += 1.0
    settling = seq.settling(session, snap(t[0], pending))
    assert settling == {JobId("42")}
    # Before the fix: the policy's pending count, 1 GPU, went over the resize's 2.
    assert [c.command for c in plan_changes(one_gpu(pending), snap(t[0], pending),
                                            PlanInputs(limits=OPEN)).changes
            if c.kind is ActionKind.TRES_PER_NODE] == [
        "update JobId=42 TresPerNode=gres:gpu:1"]
    acted = without_gpus(one_gpu(pending), settling)
    plan = plan_changes(acted, snap(t[0], pending), PlanInputs(limits=OPEN))
    assert not [c for c in plan.changes if c.kind is ActionKind.TRES_PER_NODE]
    assert [o.job_id for o in acted.order] == [JobId("42")]  # its order is still set
    # A daemon restarted meanwhile knows it from the action log.
    assert Sequencer(FakeSlurm(), clock=lambda: t[0]).settling(
        session, snap(t[0], pending)) == {JobId("42")}


def test_settling_ends_when_the_job_runs_or_after_settle_s(session: Session) -> None:
    known(session)
    t = [1000.0]
    seq = Sequencer(FakeSlurm(), clock=lambda: t[0])
    for i in ("42", "43"):
        assert seq.release(session, ActionKind.REQUEUE_HOLD, JobId(i), "", cycle_id=1,
                           decision_id=None)
    session.commit()
    late = job(id=JobId("43"))
    assert seq.settling(session, snap(t[0] + 2, job(JobState.RUNNING), late)) == {JobId("43")}
    # Seen running once: forgotten, even if it is pending again later (a new requeue).
    assert seq.settling(session, snap(t[0] + 3, job(), late)) == {JobId("43")}
    assert seq.settling(session, snap(t[0] + SETTLE_S + 1, job(), late)) == frozenset()


def test_a_preemption_s_release_does_not_settle(session: Session) -> None:
    known(session)
    seq = Sequencer(FakeSlurm(), clock=lambda: 1000.0)
    assert seq.release(session, ActionKind.PREEMPT_REQUEUE, JobId("42"), "", cycle_id=1,
                       decision_id=None)
    assert seq.settling(session, snap(1001.0, job())) == frozenset()


# --- CPUs follow GPUs in the pending update ---------------------------------------------------

def test_a_sized_job_s_pending_update_carries_its_cpus() -> None:
    sized = job(gpus=4, intent=Intent(gpus_min=1, gpus_max=8))
    s = snap(1000.0, sized, replace(sized, id=JobId("43")))
    decision = Decision(policy="t", order=(JobOrder(job_id=JobId("42"), rank=0, gpus=1),
                                           JobOrder(job_id=JobId("43"), rank=1, gpus=1)))
    assert gpu_changes(decision, s) == [JobId("42"), JobId("43")]
    plan = plan_changes(decision, s, PlanInputs(
        limits=OPEN, known_values={JobId("42"): 10_000, JobId("43"): 9_999},
        cpus_per_gpu={JobId("42"): 2}))
    assert [c.command for c in plan.changes] == [
        "update JobId=43 TresPerNode=gres:gpu:1",  # its owner's CPUs: left alone
        "update JobId=42 TresPerNode=gres:gpu:1 MinCPUsNode=2"]
    # 6 GPUs on 2 nodes at 3 CPUs a GPU: 9 a node, capped by the 8-CPU nodes; then by the
    # owner's CPU limits.
    six = Decision(policy="t", order=(JobOrder(job_id=JobId("42"), rank=0, gpus=6),))
    plan = plan_changes(six, s, PlanInputs(limits=OPEN, known_values={JobId("42"): 10_000},
                                           cpus_per_gpu={JobId("42"): 3}))
    assert [c.command for c in plan.changes] == [
        "update JobId=42 TresPerNode=gres:gpu:3 NumNodes=2 MinCPUsNode=8"]
    capped = {"gpu": replace(OPEN["gpu"], max_cpus_per_job=10)}
    plan = plan_changes(six, s, PlanInputs(limits=capped, known_values={JobId("42"): 10_000},
                                           cpus_per_gpu={JobId("42"): 3}))
    assert [c.command for c in plan.changes] == [
        "update JobId=42 TresPerNode=gres:gpu:3 NumNodes=2 MinCPUsNode=5"]


# --- QOS and association CPU limits reach sizing --------------------------------------------

class Answers:
    """A FAKE for the Gate's reads: slurmctld's config (accounting on), one partition with a
    QOS, that QOS's and the associations' limits (GPUs and CPUs)."""

    def __init__(self) -> None:
        self.out = {
            ("scontrol", "show", "config"): "AccountingStorageEnforce = associations,limits,qos\n"
                                            "AccountingStorageType = accounting_storage/slurmdbd\n",
            ("scontrol", "show", "partition", "-o"): "PartitionName=gpu MaxNodes=UNLIMITED "
                                                     "MaxCPUsPerNode=UNLIMITED QoS=part\n",
            ("sacctmgr", "-nP", "show", "qos"): "part|cpu=16,gres/gpu=8|cpu=6\nnormal||\n",
            ("sacctmgr", "-nP", "show", "assoc"): "alice|lab||cpu=8|cpu=4\n|lab|||\n",
        }

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        argv = tuple(args)
        out = next((v for k, v in self.out.items() if argv[:len(k)] == k), "")
        return CommandResult(args=argv, returncode=0, stdout=out, stderr="", duration_s=0.0)


def test_the_gate_passes_qos_and_association_cpu_limits_to_sizing() -> None:
    gate = Gate(cast(SlurmAdapter, type("A", (), {"runner": Answers()})()), Grants())
    gate._check_enforcement()
    limits = gate.limits(NODES, 0.0)
    assert limits is not None
    assert limits["gpu"].max_cpus_per_node == 6 and limits["gpu"].max_cpus_per_job == 16
    assert gate.assoc == {("alice", "lab", ""): TresLimits(cpus_per_job=8, cpus_per_node=4)}
    held = job(gpus=0, held=True, intent=Intent(deadline=1e9, gpus_min=1, gpus_max=8))
    alice = job_limits(held, limits, gate.assoc)
    bob = job_limits(replace(held, user="bob"), limits, gate.assoc)
    assert alice is not None and bob is not None
    assert (alice.cpu_cap(1), bob.cpu_cap(1), bob.cpu_cap(2)) == (4, 6, 6)
    for who, cpus in ((held, 4), (replace(held, user="bob"), 6)):
        got = size_job(who, 4, settings=SizingConfig(), limits=limits, assoc=gate.assoc,
                       nodes=NODES)
        assert isinstance(got, Sized) and (got.gpus, got.cpus_per_node) == (4, cpus), got
