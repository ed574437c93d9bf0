"""CPU limits the daemon reads (daemon/limits.py): the partition's MaxCPUsPerNode, the QOS's and
the association's cpu TRES, parsed from recorded command output; the GPU-only readers give what
they gave before. (GPU limits: test_trust.py.)"""

from __future__ import annotations

from dataclasses import replace

from slurm_rl.core import JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.daemon.limits import (
    PartitionLimits,
    TresLimits,
    build_limits,
    job_limits,
    parse_assoc_gpu_limits,
    parse_assoc_limits,
    parse_partitions,
    parse_qos_gpu_limits,
    parse_qos_limits,
)

# `scontrol show partition -o` on the test cluster (Slurm 22.05.8), recorded 2026-12-01.
LINE = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
    "QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=node[1-4] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=32 TotalNodes=4 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=32,mem=62.50G,node=4,billing=32")
NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))


def job() -> JobView:
    return JobView(id=JobId("42"), user="u", partition="gpu", state=JobState.PENDING,
                   submit_time=0.0, gpus=0)


def test_max_cpus_per_node_from_the_partition() -> None:
    assert build_limits(NODES, parse_partitions(LINE))["gpu"].cpu_cap(1) is None  # UNLIMITED
    six = build_limits(NODES, parse_partitions(LINE.replace("MaxCPUsPerNode=UNLIMITED",
                                                            "MaxCPUsPerNode=6")))["gpu"]
    assert six.max_cpus_per_node == 6 and six.cpu_cap(2) == 6
    odd = LINE.replace("MaxCPUsPerNode=UNLIMITED", "MaxCPUsPerNode=\u0666")  # not ASCII: no limit
    assert build_limits(NODES, parse_partitions(odd))["gpu"].max_cpus_per_node is None


def test_qos_cpu_limits_per_job_and_per_node() -> None:
    # `sacctmgr -nP show qos format=Name,MaxTRES,MaxTRESPerNode` (format from sacctmgr's
    # documentation: the test cluster has no slurmdbd).
    text = "p|cpu=12,gres/gpu=6|cpu=5,gres/gpu=3\nnormal||\nbad|cpu=x|cpu=-1\n"
    qos = parse_qos_limits(text)
    assert qos["p"] == TresLimits(gpus_per_job=6, gpus_per_node=3, cpus_per_job=12,
                                  cpus_per_node=5)
    assert qos["normal"] == qos["bad"] == TresLimits()
    assert parse_qos_gpu_limits(text) == {"p": (6, 3), "normal": (None, None),
                                          "bad": (None, None)}
    part = parse_partitions(LINE.replace("QoS=N/A", "QoS=p"))
    limits = build_limits(NODES, part, qos)["gpu"]
    assert (limits.max_total(), limits.per_node_cap()) == (6, 3)
    assert limits.cpu_cap(1) == 5   # per node
    assert limits.cpu_cap(3) == 4   # 12 a job over 3 nodes
    assert build_limits(NODES, part, parse_qos_gpu_limits(text))["gpu"].cpu_cap(1) is None


def test_association_cpu_limits_narrow_the_partition() -> None:
    text = ("|lab||cpu=64|\n"                  # the account: 64 CPUs a job
            "alice|lab||cpu=16,gres/gpu=2|\n"  # alice in lab: 16 CPUs and 2 GPUs a job
            "carol|lab|gpu||cpu=3\n")          # carol in lab, partition gpu: 3 a node
    assoc = parse_assoc_limits(text)
    assert assoc[("carol", "lab", "gpu")] == TresLimits(cpus_per_node=3)
    assert parse_assoc_gpu_limits(text) == {("alice", "lab", ""): (2, None)}  # as before
    limits = build_limits(NODES, parse_partitions(LINE))

    def cap(user: str, nodes: int) -> int | None:
        mine = job_limits(replace(job(), user=user, account="lab"), limits, assoc)
        assert mine is not None
        return mine.cpu_cap(nodes)

    assert cap("alice", 1) == 16 and cap("alice", 2) == 8
    assert cap("carol", 1) == 3
    assert cap("dave", 2) == 32  # the account's 64 over 2 nodes
    # A GPU-only pair (what gate.py passes until it reads parse_assoc_limits) still narrows.
    pair = job_limits(replace(job(), user="alice", account="lab"), limits,
                      parse_assoc_gpu_limits(text))
    assert pair is not None and pair.max_total() == 2 and pair.cpu_cap(1) is None


def test_cpu_cap_is_never_below_zero_nodes() -> None:
    lim = PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4, max_cpus_per_job=7)
    assert lim.cpu_cap(0) == 7 and lim.cpu_cap(2) == 3
