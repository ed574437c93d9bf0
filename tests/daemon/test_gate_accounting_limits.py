"""The gate's reads of slurmdbd's limits (daemon/gate.py): with accounting, every QOS's limits
are read (a job's own QOS limits it, not only a partition's), and a sacctmgr that stops
answering keeps the limits read before instead of lifting them. Answers are the output
recorded from a 22.05.8 cluster (tests/fixtures/slurm, see test_limits_recorded.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

from slurm_rl.core import JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.daemon.gate import LIMITS_REFRESH_S, Gate
from slurm_rl.daemon.limits import job_limits
from slurm_rl.daemon.trust import Grants
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))
JOB = JobView(id=JobId("7"), user="slurmrl-capped", account="rl", partition="gpu",
              state=JobState.PENDING, submit_time=0.0, gpus=1, qos="normal")


class RecordedSlurmdbd:
    """A FAKE runner for the gate's reads: a cluster with accounting, one partition without a
    QOS, and the recorded `sacctmgr show assoc` / `show qos` output; `down` makes sacctmgr fail
    as it does when slurmdbd does not answer."""

    def __init__(self) -> None:
        self.down = False
        self.out = {
            ("scontrol", "show", "config"): "AccountingStorageEnforce = associations,limits,qos\n"
                                            "AccountingStorageType = accounting_storage/slurmdbd\n",
            ("scontrol", "show", "partition", "-o"): "PartitionName=gpu MaxNodes=UNLIMITED "
                                                     "MaxCPUsPerNode=UNLIMITED QoS=N/A\n",
            ("sacctmgr", "-nP", "show", "qos"):
                (FIXTURES / "sacctmgr-show-qos-limits-22.05.txt").read_text(),
            ("sacctmgr", "-nP", "show", "assoc"):
                (FIXTURES / "sacctmgr-show-assoc-limits-22.05.txt").read_text(),
        }

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        argv = tuple(args)
        if self.down and argv[0] == "sacctmgr":
            return CommandResult(args=argv, returncode=1, stdout="", duration_s=0.0,
                                 stderr="sacctmgr: error: Problem talking to the database: "
                                        "Connection refused")
        out = next((v for k, v in self.out.items() if argv[:len(k)] == k), "")
        return CommandResult(args=argv, returncode=0, stdout=out, stderr="", duration_s=0.0)


def caps(gate: Gate, now: float, job: JobView) -> tuple[int, int]:
    limits = job_limits(job, gate.limits(NODES, now), gate.assoc)
    assert limits is not None
    return limits.max_total(), limits.per_node_cap()


def test_the_job_s_own_qos_and_association_limit_it_and_an_outage_keeps_them() -> None:
    runner = RecordedSlurmdbd()
    gate = Gate(cast(SlurmAdapter, type("A", (), {"runner": runner})()), Grants())
    gate._check_enforcement()
    under_qos = replace(JOB, user="slurmrl-uncapped", qos="slurmrl-deny")
    assert caps(gate, 0.0, JOB) == (2, 4)          # its association: MaxTRES=gres/gpu=2
    assert caps(gate, 0.0, under_qos) == (3, 2)    # its QOS: 3 a job, 2 a node
    assert caps(gate, 0.0, replace(JOB, user="slurmrl-uncapped")) == (16, 4)
    runner.down = True
    later = LIMITS_REFRESH_S + 1.0  # read again, and sacctmgr fails
    assert caps(gate, later, JOB) == (2, 4)
    assert caps(gate, later, under_qos) == (3, 2)
