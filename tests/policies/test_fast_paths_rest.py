"""sjf and gittins against their code before the fast paths (reference_sjf_gittins), and the
simulator's `ClusterSnapshot.running_changes` against the snapshots themselves."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import reference_sjf_gittins as ref
from hypothesis import HealthCheck, given, settings
from test_fast_paths import histories

from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView
from slurm_rl.policies import make
from slurm_rl.sim import trace
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator


def _window(count: int, cluster: str = "01", start: int = 0) -> tuple[trace.TraceJob, ...]:
    folder = resources.files("slurm_rl") / "data" / "traces"
    return trace.window(trace.load(str(folder / f"itp-deadline-cluster{cluster}.csv"),
                                   "itp-deadline").jobs, start, count)


def _same(old: Any, new: Any) -> None:
    assert (new.jobs, new.intervals, new.decisions, new.preemptions, new.notes) == (
        old.jobs, old.intervals, old.decisions, old.preemptions, old.notes)


@pytest.mark.parametrize(("options", "count", "load", "cluster"), [
    ({}, 500, 1.0, "01"),
    ({"margin": 0.0}, 400, 1.2, "03"),  # preempts whenever higher: many preemptions
    ({"margin": 0.2, "restart_cost_s": 0.0}, 400, 1.0, "05"),
])
def test_gittins_in_the_simulator_as_before(options: dict[str, Any], count: int, load: float,
                                            cluster: str) -> None:
    jobs = _window(count, cluster)
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4,
                          restart_rules=False)  # free: the preemptive path compared
    old = Simulator(jobs, ref.Gittins(**options), config).run()
    new = Simulator(jobs, make("gittins", **options), config).run()
    assert new.preemptions > 0
    _same(old, new)


@pytest.mark.parametrize(("options", "count", "load"), [
    ({}, 600, 1.0), ({"min_history": 1, "history_window": 3}, 400, 1.2)])
def test_sjf_in_the_simulator_as_before(options: dict[str, Any], count: int,
                                        load: float) -> None:
    jobs = _window(count, "06")
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, load, 4), gpus_per_node=4,
                          restart_rules=False)  # free: the preemptive path compared
    _same(Simulator(jobs, ref.Sjf(**options), config).run(),
          Simulator(jobs, make("sjf", **options), config).run())


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_gittins_and_sjf_decide_as_before(history: tuple[dict[str, Any], list[ClusterSnapshot]]
                                          ) -> None:
    """On plain snapshots (no shared running ids, no running_changes), repeated or not."""
    _, snaps = history
    for old, new in ((ref.Gittins(margin=0.0), make("gittins", margin=0.0)),
                     (ref.Sjf(min_history=1), make("sjf", min_history=1))):
        for s in snaps:
            assert new.decide(s) == old.decide(s)


class _Watch:
    """Checks each snapshot's running_changes against the snapshot it follows."""

    name = "watch"

    def __init__(self) -> None:
        self.last: ClusterSnapshot | None = None
        self.checked = 0

    def reset(self) -> None:
        self.last = None

    def observe(self, snapshot: ClusterSnapshot) -> None:  # (Observing: every event)
        last, self.last = self.last, snapshot
        ids = snapshot.running_ids
        changes = snapshot.running_changes
        if last is None or changes is None or changes.since is not last.running_ids:
            return
        self.checked += 1
        before = {j.id: j for j in last.running}
        now = {j.id: j for j in snapshot.running}
        fixed = ("state", "start_time", "gpus", "nodes", "restarts", "time_limit_s")
        moved = [j for j in snapshot.running if j.id not in before or any(
            getattr(j, f) != getattr(before[j.id], f) for f in fixed)]
        assert [j.id for j in changes.started] == [j.id for j in moved]
        assert changes.started == tuple(moved)
        pending: dict[JobId, JobView] = {j.id: j for j in snapshot.pending}
        assert changes.stopped == tuple((j.id, pending.get(j.id)) for j in last.running
                                        if j.id not in now)
        if not moved and not changes.stopped:
            assert ids == last.running_ids

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.observe(snapshot)
        return Decision(policy=self.name)


def test_running_changes_tell_what_started_and_stopped() -> None:
    # tiresias preempts (requeued jobs: stopped, pending again, restarted); the watcher sees
    # the same snapshots as the policy
    jobs = _window(300, "01")
    config = EngineConfig(nodes=trace.nodes_for_load(jobs, 1.0, 4), gpus_per_node=4,
                          restart_rules=False)  # free: every start and stop
    watch, policy = _Watch(), make("tiresias")

    class Both:
        name = "tiresias"

        def may_preempt(self, job: JobView) -> bool:
            return policy.may_preempt(job)  # type: ignore[attr-defined,no-any-return]

        def reset(self) -> None:
            policy.reset()  # type: ignore[attr-defined]
            watch.reset()

        def observe(self, snapshot: ClusterSnapshot) -> None:
            watch.observe(snapshot)

        def decide(self, snapshot: ClusterSnapshot) -> Decision:
            watch.observe(snapshot)
            return policy.decide(snapshot)

    result = Simulator(jobs, Both(), config).run()  # type: ignore[arg-type]
    assert result.preemptions > 0 and watch.checked > 100
