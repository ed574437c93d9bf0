"""`deadline`'s simulator gate (`futile`, capabilities.Gated): the same results as when the
policy is asked at every event, with fewer calls, on rigid jobs and on a mix with elastic ones."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from policy_builders import itp_jobs

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.policies import deadline, make
from slurm_rl.policies.capabilities import Gated, Preempting, Resizing
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator


@dataclass
class AskedAtEveryEvent:
    """Test-only: `deadline` without its gate (Preempting and Resizing, not Gated), so the
    simulator asks `decide` at every event where a job is pending or running."""

    inner: deadline.DeadlinePolicy = field(default_factory=deadline.new)
    name: str = "deadline"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return self.inner.decide(snapshot)

    def may_resize(self, job: JobView) -> bool:
        return self.inner.may_resize(job)

    def may_preempt(self, job: JobView) -> bool:
        return self.inner.may_preempt(job)


def test_declares_the_gate() -> None:
    policy = make("deadline")
    assert all(isinstance(policy, c) for c in (Gated, Preempting, Resizing))
    assert not isinstance(AskedAtEveryEvent(), Gated)


@pytest.mark.parametrize(("count", "load", "elastic"),
                         [(400, 0.8, False), (400, 1.1, False), (300, 1.1, True)])
def test_the_gate_changes_no_result(count: int, load: float, elastic: bool) -> None:
    """The same jobs (starts, ends, GPUs, restarts), resizes and preemptions with the gate as
    when `decide` is asked at every event; the gate skips calls."""
    jobs = itp_jobs(count, elastic)
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4,
                          tick_s=60.0, audit=True)
    a = Simulator(jobs, make("deadline"), config).run()
    b = Simulator(jobs, AskedAtEveryEvent(), config).run()
    assert a.jobs == b.jobs
    assert (a.resizes, a.preemptions, a.dropped) == (b.resizes, b.preemptions, b.dropped)
    assert a.decisions < b.decisions
    if elastic:
        assert a.resizes > 0
