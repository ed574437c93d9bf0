"""No buying priority with deadlines, in the simulator: one user ("greedy")
puts a tight deadline and the critical class on every job, four honest users ask for feasible
deadlines, each within the share. Without the urgent share greedy's jobs run first and the
honest ones miss; with it the honest ones are met and greedy never has more than the share
ahead of them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from slurm_rl.core import ClusterSnapshot, Decision, JobView, ServiceClass
from slurm_rl.policies import make
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.results import SimResult
from slurm_rl.sim.trace import TraceJob

NODES, PER_NODE = 2, 4
HONEST = ("alice", "bob", "carol", "dave")
BUDGET = 0.25 * NODES * PER_NODE  # the default urgent_share: 2 of 8 GPUs


def scenario(named: bool) -> list[TraceJob]:
    """greedy: 8 one-GPU jobs of 1000 s every 1000 s (t = 0..3000), each due 1100 s after it is
    submitted (met only if started at once). Four honest users: 2 such jobs each at t = 0 (within
    their share), due at t = 3500 (met if started by t = 2500). `named`: with users; else every
    user is empty."""
    def user(name: str) -> str:
        return name if named else ""

    jobs = [TraceJob(id=f"greedy-{b}-{i}", submit=1000.0 * b, duration=1000.0, gpus=1,
                     time_limit_s=1000.0, deadline=1000.0 * b + 1100, user=user("greedy"))
            for b in range(4) for i in range(8)]
    jobs += [TraceJob(id=f"{u}-{i}", submit=0.0, duration=1000.0, gpus=1, time_limit_s=1000.0,
                      deadline=3500.0, user=user(u)) for u in HONEST for i in range(2)]
    return jobs


def is_greedy(job: JobView) -> bool:
    return job.name.startswith("greedy")  # the trace id: also when users are empty


@dataclass
class Critical:
    """Test harness, not a fake of Slurm: the trace format has no service-class column, so this
    wrapper gives greedy's pending jobs the critical class before the policy sees them (each
    view rewritten once, so the policy's per-view memo still holds), and records, at every
    decision, the GPUs greedy has ahead of the honest users: its running deadline jobs' GPUs plus
    its pending jobs ranked before the last honest pending job (when there are any such)."""

    policy: object
    name: str = "deadline"
    ahead: list[float] = field(default_factory=list)
    _views: dict[int, tuple[JobView, JobView]] = field(default_factory=dict)

    def _critical(self, v: JobView) -> JobView:
        if not (v.state.is_pending and is_greedy(v) and v.intent is not None):
            return v
        seen = self._views.get(id(v))
        if seen is None or seen[0] is not v:
            it = dataclasses.replace(v.intent, service_class=ServiceClass.CRITICAL)
            seen = self._views[id(v)] = (v, dataclasses.replace(v, intent=it))
        return seen[1]

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        snapshot = ClusterSnapshot(time=snapshot.time, nodes=snapshot.nodes,
                                   jobs=tuple(map(self._critical, snapshot.jobs)))
        d: Decision = self.policy.decide(snapshot)  # type: ignore[attr-defined]
        pending = {j.id: j for j in snapshot.pending}
        ranked = [pending[o.job_id] for o in sorted(d.order, key=lambda o: o.rank)]
        honest = [k for k, j in enumerate(ranked) if not is_greedy(j)]
        if honest:
            before = sum(j.gpus for j in ranked[:honest[-1]] if is_greedy(j))
            if before:
                held = sum(j.gpus for j in snapshot.running
                           if is_greedy(j) and j.intent and j.intent.deadline is not None)
                self.ahead.append(held + before)
        return d


def run(policy: str, named: bool) -> tuple[SimResult, Critical]:
    harness = Critical(make(policy), name=policy)
    config = EngineConfig(nodes=NODES, gpus_per_node=PER_NODE)
    return Simulator(scenario(named), harness, config).run(), harness  # type: ignore[arg-type]


def met(result: SimResult, greedy: bool) -> tuple[int, int, float]:
    """(deadlines met, jobs, average JCT) of greedy's jobs or of the honest ones."""
    jobs = [r for r in result.jobs if r.job_id.startswith("greedy") == greedy]
    hit = sum(1 for r in jobs if r.deadline is not None and r.end <= r.deadline)
    return hit, len(jobs), sum(r.end - r.submit for r in jobs) / len(jobs)


@pytest.mark.parametrize("policy", ["deadline", "edf"])
def test_a_greedy_user_gets_no_more_than_the_share_ahead(policy: str) -> None:
    before, seen_before = run(policy, named=False)  # no users: never capped (as before the cap)
    after, seen_after = run(policy, named=True)
    assert len(before.jobs) == len(after.jobs) == 40  # everything ran
    honest_before, honest_after = met(before, greedy=False), met(after, greedy=False)
    # Without the share greedy's tight deadlines run first and every honest deadline is missed;
    # with it every honest deadline is met, and the honest jobs finish sooner.
    assert honest_before[0] == 0 and honest_after[:2] == (8, 8)
    assert honest_after[2] < honest_before[2]
    # Greedy had the whole cluster ahead of the honest users; now never more than the share.
    assert max(seen_before.ahead) > BUDGET
    assert seen_after.ahead and max(seen_after.ahead) <= BUDGET
    # Greedy still gets GPUs nobody else is waiting for (work-conserving), and finishes.
    greedy_after = met(after, greedy=True)
    assert greedy_after[1] == 32 and greedy_after[0] > 0
