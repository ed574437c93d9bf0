"""Helpers for the simulator tests (imported as `sim_helpers`): traces, test-only policies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slurm_rl.core import ClusterSnapshot, Decision, JobView
from slurm_rl.sim.config import EngineConfig, TimeLimitEstimate
from slurm_rl.sim.engine import SimResult, Simulator
from slurm_rl.sim.trace import TraceJob

EXACT_LIMITS = TimeLimitEstimate(factor=1.0, round_up_s=0.0, min_s=0.0)
"""Time limit = duration: planning with true durations."""


def job(i: int | str, submit: float, duration: float, gpus: int = 1, **kw: object) -> TraceJob:
    return TraceJob(id=str(i), submit=submit, duration=duration, gpus=gpus, **kw)  # type: ignore[arg-type]


ONE_STEP = {"restart_grace_s": 0.0, "requeue_s": 0.0}
"""The one-step restart model (no grace, no requeue step: a restart is the restore delay
alone), for tests whose expected times are worked out in it."""


FREE = {"restart_rules": False}
"""Free restarts: every preemption and resize that fits is applied, to any running job (the
engine's default is the daemon's rules: only jobs that opted in), for tests of the restart
mechanics themselves."""


def run(jobs: Sequence[TraceJob], policy: object, nodes: int = 1, gpus_per_node: int = 4,
        **cfg: object) -> SimResult:
    config = EngineConfig(nodes=nodes, gpus_per_node=gpus_per_node, audit=True, **cfg)  # type: ignore[arg-type]
    return Simulator(jobs, policy, config).run()  # type: ignore[arg-type]


def by_id(result: SimResult) -> dict[str, tuple[float, float]]:
    """job id -> (start, end)."""
    return {r.job_id: (r.start, r.end) for r in result.jobs}


@dataclass
class OrderOnlyFakePolicy:
    """A test-only policy: `fn(snapshot) -> Decision` (default: no opinion), recording every
    snapshot it sees. Declares no capability: may only order jobs, and is asked only when
    that can matter."""

    fn: Callable[[ClusterSnapshot], Decision] | None = None
    name: str = "fake"
    seen: list[ClusterSnapshot] = field(default_factory=list)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.seen.append(snapshot)
        return self.fn(snapshot) if self.fn else Decision(policy=self.name)


@dataclass
class FakePolicy(OrderOnlyFakePolicy):
    """`OrderOnlyFakePolicy` that may also preempt and resize any job (Preempting, Resizing):
    asked whenever anything changes while a job is pending or running."""

    def may_preempt(self, job: JobView) -> bool:
        return True

    def may_resize(self, job: JobView) -> bool:
        return True
