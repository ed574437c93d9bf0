"""What the daemon believes of a claimed intent (trust.py) and what Slurm lets a user ask for
(limits.py): pure logic, on hand-made views and recorded `scontrol show partition -o` text."""

from __future__ import annotations

from slurm_rl.config import TrustConfig
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
    ServiceClass,
)
from slurm_rl.daemon.actuator import PlanInputs, plan_changes
from slurm_rl.daemon.limits import (
    build_limits,
    parse_assoc_gpu_limits,
    parse_partitions,
    parse_qos_gpu_limits,
)
from slurm_rl.daemon.trust import Grants, accounting_enforce, vet
from slurm_rl.db.kinds import ActionKind, EventKind

# Recorded from the test cluster (Slurm 22.05.8), one partition of four 4-GPU nodes.
PARTITION_LINE = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
    "QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=node[1-4] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=32 TotalNodes=4 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=32,mem=62.50G,node=4,billing=32"
)


def nodes(n: int = 4, gpus: int = 4, partition: str = "gpu") -> tuple[NodeView, ...]:
    return tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=gpus,
                          partitions=(partition,)) for i in range(1, n + 1))


def job(intent: Intent | None, *, user: str = "alice", account: str = "", qos: str = "",
        gpus: int = 1, jid: str = "7") -> JobView:
    return JobView(id=JobId(jid), user=user, account=account, qos=qos, partition="gpu",
                   state=JobState.PENDING, submit_time=1000.0, gpus=gpus, intent=intent)


def test_partition_limits_from_the_recorded_line() -> None:
    limits = build_limits(nodes(), parse_partitions(PARTITION_LINE))
    assert limits["gpu"].gpus_per_node == 4
    assert limits["gpu"].max_nodes == 4
    assert limits["gpu"].max_total() == 16


def test_max_nodes_and_qos_limits_cap_the_total() -> None:
    line = PARTITION_LINE.replace("MaxNodes=UNLIMITED", "MaxNodes=2").replace("QoS=N/A", "QoS=p")
    qos = parse_qos_gpu_limits("p|cpu=8,gres/gpu=6|gres/gpu=3\nnormal||\n")
    assert qos == {"p": (6, 3), "normal": (None, None)}
    limits = build_limits(nodes(), parse_partitions(line), qos)["gpu"]
    assert limits.per_node_cap() == 3
    assert limits.max_total() == 6


def test_down_nodes_and_garbage_fields_do_not_raise_or_grant() -> None:
    down = tuple(NodeView(name=NodeName(f"n{i}"), state=NodeState.DOWN, gpus_total=8,
                          partitions=("gpu",)) for i in range(2))
    line = PARTITION_LINE.replace("MaxNodes=UNLIMITED", "MaxNodes=\u0663")
    limits = build_limits((*nodes(1), *down), parse_partitions(line + "\ngarbage\n\x00=\n"))
    assert limits["gpu"].max_total() == 4  # only the usable node counts


def test_critical_needs_a_grant() -> None:
    claim = Intent(service_class=ServiceClass.CRITICAL, deadline=2000.0)
    grants = Grants.from_config(TrustConfig(critical_users=("boss",), critical_qos=("high",))
                                ).with_enforcement("associations,limits,qos")
    vetted, found = vet(job(claim), grants, None)
    assert vetted.intent is not None
    assert vetted.intent.service_class is ServiceClass.STANDARD
    assert vetted.intent.deadline == 2000.0
    assert [f.kind for f in found] == [EventKind.CLASS_DENIED]
    for granted in (job(claim, user="boss"), job(claim, qos="high")):
        same, none = vet(granted, grants, None)
        assert same is granted and none == ()
    # an empty account/qos never matches a grant list that happens to hold ""
    empty = Grants(critical_accounts=frozenset({""}))
    assert vet(job(claim), empty, None)[0].intent.service_class is ServiceClass.STANDARD  # type: ignore[union-attr]


def test_account_and_qos_grants_count_only_where_slurm_enforces_them() -> None:
    claim = Intent(service_class=ServiceClass.CRITICAL)
    grants = Grants.from_config(TrustConfig(critical_accounts=("lab",), critical_qos=("high",)))
    by_account, by_qos = job(claim, account="lab"), job(claim, qos="high")
    for enforce, account_ok, qos_ok in (("none", False, False), ("associations", True, False),
                                        ("associations,limits,qos", True, True),
                                        ("safe", True, False), ("all", True, True)):
        g = grants.with_enforcement(enforce)
        assert (vet(by_account, g, None)[1] == ()) is account_ok, enforce
        assert (vet(by_qos, g, None)[1] == ()) is qos_ok, enforce
    assert accounting_enforce("AccountingStorageEnforce = associations,qos\nX = y\n") == \
        "associations,qos"
    assert accounting_enforce("garbage") == "none"


def test_deadline_beyond_the_horizon_is_not_believed() -> None:
    grants = Grants(deadline_horizon_s=3600.0)
    vetted, found = vet(job(Intent(deadline=1000.0 + 7200, hard=True)), grants, None)
    assert vetted.intent is not None and vetted.intent.deadline is None
    assert not vetted.intent.hard
    assert [f.kind for f in found] == [EventKind.DEADLINE_DROPPED]
    ok = job(Intent(deadline=1000.0 + 3600))
    assert vet(ok, grants, None) == (ok, ())


def test_gpu_range_capped_by_the_partition() -> None:
    limits = build_limits(nodes(), parse_partitions(PARTITION_LINE))
    vetted, found = vet(job(Intent(gpus_min=2, gpus_max=64)), Grants(), limits)
    assert vetted.intent is not None and (vetted.intent.gpus_min, vetted.intent.gpus_max) == (2, 16)
    assert [f.kind for f in found] == [EventKind.GPU_LIMITED]
    vetted, found = vet(job(Intent(gpus_min=20, gpus_max=40)), Grants(), limits)
    assert vetted.intent is not None and vetted.intent.gpus_min is None
    assert vetted.intent.gpus_max is None and len(found) == 1


def snapshot(*jobs: JobView) -> ClusterSnapshot:
    return ClusterSnapshot(time=2000.0, jobs=jobs, nodes=nodes())


def test_actuator_never_asks_beyond_the_partition() -> None:
    limits = build_limits(nodes(), parse_partitions(PARTITION_LINE.replace(
        "MaxNodes=UNLIMITED", "MaxNodes=1")))
    j = job(Intent(gpus_min=1, gpus_max=8))
    decision = Decision(policy="test",
                        order=(JobOrder(job_id=j.id, rank=0, gpus=8, reason="forged"),))
    plan = plan_changes(decision, snapshot(j), PlanInputs(limits=limits))
    assert not [c for c in plan.changes if c.kind is ActionKind.TRES_PER_NODE]
    assert any("exceed what partition 'gpu' allows this job (4)" in s.why for s in plan.skipped)
    # within the limit it is applied
    ok = Decision(policy="test", order=(JobOrder(job_id=j.id, rank=0, gpus=3, reason="fits"),))
    plan = plan_changes(ok, snapshot(j), PlanInputs(limits=limits))
    assert [c.fields for c in plan.changes if c.kind is ActionKind.TRES_PER_NODE] == [
        (("TresPerNode", "gres:gpu:3"),)]
    # an unknown partition: no GPU change at all
    other = plan_changes(ok, snapshot(j), PlanInputs(limits={}))
    assert not [c for c in other.changes if c.kind is ActionKind.TRES_PER_NODE]


def test_unsafe_job_ids_never_reach_scontrol() -> None:
    bad = job(Intent(), jid="7 Priority=99999\nupdate JobId=1")
    decision = Decision(policy="test",
                        order=(JobOrder(job_id=bad.id, rank=0, gpus=None, reason="x"),))
    plan = plan_changes(decision, snapshot(bad))
    assert plan.changes == ()
    assert "not a plain Slurm job id" in plan.skipped[0].why


def test_association_limits_narrow_the_partition() -> None:
    # `sacctmgr -nP show assoc format=User,Account,Partition,MaxTRES,MaxTRESPerNode` as slurmdbd
    # prints it (no slurmdbd on the test cluster: the format is from sacctmgr's documentation).
    text = ("|lab||gres/gpu=8|\n"           # the account: 8 GPUs a job
            "alice|lab||cpu=16,gres/gpu=2|\n"  # alice in lab: 2 a job
            "bob|lab|gpu||gres/gpu=1\n"       # bob in lab, partition gpu: 1 a node
            "carol|lab||cpu=4|\n")            # no GPU limit: not listed
    assoc = parse_assoc_gpu_limits(text)
    assert assoc == {("", "lab", ""): (8, None), ("alice", "lab", ""): (2, None),
                     ("bob", "lab", "gpu"): (None, 1)}
    limits = build_limits(nodes(), parse_partitions(PARTITION_LINE))
    wide = Intent(gpus_min=1, gpus_max=16)
    for user, top in (("alice", 2), ("bob", 4), ("carol", 8), ("dave", 8)):
        vetted, _ = vet(job(wide, user=user, account="lab"), Grants(), limits, assoc)
        assert vetted.intent is not None and vetted.intent.gpus_max == top, user
    other = job(wide, user="alice", account="elsewhere")
    assert vet(other, Grants(), limits, assoc)[0].intent.gpus_max == 16  # type: ignore[union-attr]


def test_actuator_never_asks_beyond_the_association() -> None:
    limits = build_limits(nodes(), parse_partitions(PARTITION_LINE))
    assoc = parse_assoc_gpu_limits("alice|lab||gres/gpu=2|\n")
    j = job(Intent(gpus_min=1, gpus_max=8), user="alice", account="lab")
    decision = Decision(policy="test",
                        order=(JobOrder(job_id=j.id, rank=0, gpus=3, reason="too many"),))
    plan = plan_changes(decision, snapshot(j), PlanInputs(limits=limits, assoc=assoc))
    assert not [c for c in plan.changes if c.kind is ActionKind.TRES_PER_NODE]
    assert any("allows this job (2)" in s.why for s in plan.skipped)
