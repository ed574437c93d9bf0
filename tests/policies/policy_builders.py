"""Hand-built snapshots for the policy tests: small builders with sensible defaults."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from typing import Any

import pytest

from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
)
from slurm_rl.sim import trace
from slurm_rl.sim.trace import TraceJob

NOW = 10_000.0

LIAR = Progress(steps_done=4103, steps_total=4104, rate=100_000.0, updated_at=NOW - 5)
"""Almost done after 30 GPU-seconds: more steps, and a faster rate, than resnet50 reaches."""

UNSTANDING_CLAIMS = pytest.mark.parametrize("claims", [
    {"progress": LIAR, "attained_gpu_s": 30.0},  # progress not believed (estimates.py)
    {"claim_ratio": math.inf},  # the owner's claims not believed
    {"claim_overrun": True},  # run past its claims: about as long again as it has run
], ids=["unbelieved-progress", "owner-not-believed", "overrun"])
"""The three ways a running job's prediction does not stand as its estimate
(`estimates.claims_stand`), as JobView fields of a resnet50 job, for a test's `claims`."""


def job(jid: str, *, state: JobState = JobState.PENDING, submit: float = 0.0, gpus: int = 1,
        intent: Intent | None = None, progress: Progress | None = None,
        start: float | None = None, **kw: Any) -> JobView:
    if state.is_running and start is None:
        start = submit
    return JobView(id=JobId(jid), state=state, submit_time=submit, gpus=gpus, intent=intent,
                   progress=progress, start_time=start, **kw)


def running(jid: str, **kw: Any) -> JobView:
    return job(jid, state=JobState.RUNNING, **kw)


def nodes(*alloc: int, total: int = 4) -> tuple[NodeView, ...]:
    """One node per entry, `total` GPUs each, `alloc` of them in use."""
    return tuple(NodeView(name=NodeName(f"node{i + 1}"), state=NodeState.MIXED if a else
                          NodeState.IDLE, gpus_total=total, gpus_alloc=a)
                 for i, a in enumerate(alloc))


def snap(*jobs: JobView, nodes: tuple[NodeView, ...] = (), time: float = NOW) -> ClusterSnapshot:
    return ClusterSnapshot(time=time, jobs=tuple(jobs), nodes=nodes)


def ids(decision: Decision) -> list[str]:
    """Pending job ids in rank order."""
    return [o.job_id for o in sorted(decision.order, key=lambda o: o.rank)]


def order_of(decision: Decision, jid: str) -> Any:
    return next(o for o in decision.order if o.job_id == jid)


def preempted(decision: Decision) -> list[str]:
    return sorted(p.job_id for p in decision.preemptions)


class TableOracle:
    """A `capabilities.Oracle` read from a table (job id -> true remaining seconds), for
    oracle policies on hand-built snapshots (the simulator's own is `sim.engine.SimOracle`)."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    def remaining_s(self, job_id: JobId) -> float | None:
        return self.table.get(job_id)


def oracle_policy(name: str, truth: dict[str, float], **options: Any) -> Any:
    """Oracle policy `name` with `truth` bound as its oracle."""
    from slurm_rl.policies import make
    from slurm_rl.policies.capabilities import OracleReading

    policy = make(name, **options)
    assert isinstance(policy, OracleReading)
    policy.bind_oracle(TableOracle(truth))
    return policy


def itp_jobs(count: int, elastic: bool) -> tuple[TraceJob, ...]:
    """The first `count` jobs of the shipped ITP cluster01 deadline trace; with `elastic`, every
    third one gets a 1-8 GPU range, every other of those elastic (the gate tests' mix)."""
    folder = resources.files("slurm_rl") / "data" / "traces"
    jobs = trace.window(trace.load(str(folder / "itp-deadline-cluster01.csv"),
                                   "itp-deadline").jobs, 0, count)
    if not elastic:
        return jobs
    return tuple(dataclasses.replace(j, gpus_min=1, gpus_max=8, elastic=i % 2 == 0)
                 if i % 3 == 0 else j for i, j in enumerate(jobs))
