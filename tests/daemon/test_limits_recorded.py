"""Association and QOS limits as slurmdbd prints them (daemon/limits.py), on output recorded from
a test cluster of Slurm 22.05.8 with `AccountingStorageTRES=gres/gpu`, after

    sacctmgr -i modify user slurmrl-capped set MaxTRES=gres/gpu=2
    sacctmgr -i modify user slurmrl-capnode set MaxTRESPerJob=cpu=6 MaxTRESPerNode=gres/gpu=1,cpu=4
    sacctmgr -i add user slurmrl-cappart account=rl partition=gpu MaxTRES=gres/gpu=1
    sacctmgr -i modify account rl-critical set MaxTRES=gres/gpu=8
    sacctmgr -i modify qos slurmrl-deny set MaxTRESPerJob=gres/gpu=3 MaxTRESPerNode=gres/gpu=2

(tests/fixtures/slurm/sacctmgr-show-*-limits-22.05.txt; `MaxTRESPerJob` is shown as MaxTRES).
The live side is test_assoc_limits_slurm.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_rl.core import JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.daemon.limits import (
    TresLimits,
    build_limits,
    job_limits,
    parse_assoc_limits,
    parse_partitions,
    parse_qos_limits,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
# `sacctmgr -nP show assoc format=User,Account,Partition,MaxTRES,MaxTRESPerNode`
ASSOC = (FIXTURES / "sacctmgr-show-assoc-limits-22.05.txt").read_text()
# `sacctmgr -nP show qos format=Name,MaxTRES,MaxTRESPerNode`
QOS = (FIXTURES / "sacctmgr-show-qos-limits-22.05.txt").read_text()
# `scontrol show partition -o` on the same cluster (QoS=N/A: the partition has no QOS)
PARTITION = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
    "QoS=N/A DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=node[1-4] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=32 TotalNodes=4 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=32,mem=62.50G,node=4,billing=32")
NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))


def job(user: str, account: str = "rl", partition: str = "gpu") -> JobView:
    return JobView(id=JobId("7"), user=user, account=account, partition=partition,
                   state=JobState.PENDING, submit_time=0.0, gpus=1)


def test_the_recorded_associations_parse_to_their_limits() -> None:
    assert parse_assoc_limits(ASSOC) == {
        ("slurmrl-capped", "rl", ""): TresLimits(gpus_per_job=2),
        ("slurmrl-capnode", "rl", ""): TresLimits(gpus_per_node=1, cpus_per_job=6,
                                                   cpus_per_node=4),
        ("slurmrl-cappart", "rl", "gpu"): TresLimits(gpus_per_job=1),
        ("", "rl-critical", ""): TresLimits(gpus_per_job=8),
    }  # the associations without limits (root, rl, slurmrl-uncapped) are left out


def test_each_user_s_job_is_capped_by_its_own_association() -> None:
    limits = build_limits(NODES, parse_partitions(PARTITION))
    assoc = parse_assoc_limits(ASSOC)

    def caps(j: JobView) -> tuple[int, int, int | None]:
        mine = job_limits(j, limits, assoc)
        assert mine is not None
        return mine.max_total(), mine.per_node_cap(), mine.cpu_cap(1)

    assert caps(job("slurmrl-uncapped")) == (16, 4, None)   # the partition's 4 nodes x 4 GPUs
    assert caps(job("slurmrl-capped")) == (2, 4, None)      # MaxTRES=gres/gpu=2
    assert caps(job("slurmrl-capped", account="other")) == (16, 4, None)  # not that association
    assert caps(job("slurmrl-capnode")) == (4, 1, 4)        # 1 GPU and 4 CPUs a node, 4 nodes
    assert caps(job("slurmrl-cappart")) == (1, 4, None)     # its association in partition gpu
    assert caps(job("anyone", account="rl-critical")) == (8, 4, None)  # the account's limit


def test_the_recorded_qos_limits_narrow_a_partition_with_that_qos() -> None:
    qos = parse_qos_limits(QOS)
    assert qos == {"normal": TresLimits(), "critical": TresLimits(),
                   "slurmrl-deny": TresLimits(gpus_per_job=3, gpus_per_node=2)}
    part = parse_partitions(PARTITION.replace("QoS=N/A", "QoS=slurmrl-deny"))
    limits = build_limits(NODES, part, qos)["gpu"]
    assert (limits.max_total(), limits.per_node_cap()) == (3, 2)


def test_a_job_s_own_qos_narrows_its_limits() -> None:
    # The partition has no QOS; a job under slurmrl-deny gets that QOS's 3 a job, 2 a node.
    limits = build_limits(NODES, parse_partitions(PARTITION), parse_qos_limits(QOS))
    assoc = parse_assoc_limits(ASSOC)
    caps = {}
    for user, qos in (("slurmrl-uncapped", "normal"), ("slurmrl-uncapped", "slurmrl-deny"),
                      ("slurmrl-capped", "slurmrl-deny"), ("slurmrl-capnode", "slurmrl-deny")):
        mine = job_limits(replace(job(user), qos=qos), limits, assoc)
        assert mine is not None
        caps[user, qos] = (mine.max_total(), mine.per_node_cap())
    assert caps == {("slurmrl-uncapped", "normal"): (16, 4),
                    ("slurmrl-uncapped", "slurmrl-deny"): (3, 2),
                    ("slurmrl-capped", "slurmrl-deny"): (2, 2),     # its association's 2
                    ("slurmrl-capnode", "slurmrl-deny"): (3, 1)}    # its association's 1 a node
