"""The stepped engine (reset / step / apply / run(until)) against the one-call run: same
results, the skip rule kept, the loop's contract enforced loudly."""

from __future__ import annotations

import math

import pytest
from sim_helpers import job

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.results import SimResult, SimulationError
from slurm_rl.sim.run import Sizing, load_jobs, resolve_trace_path, simulate
from slurm_rl.sim.trace import TraceJob


def _trace() -> tuple[TraceJob, ...]:
    return load_jobs(resolve_trace_path("data:itp-deadline-cluster10.csv"), "itp-deadline",
                     "0:80")


def _cfg(**kw: object) -> EngineConfig:
    values: dict[str, object] = {"nodes": 4, "gpus_per_node": 4, "audit": True, **kw}
    return EngineConfig(**values)  # type: ignore[arg-type]


def _same(a: SimResult, b: SimResult) -> None:
    assert a.jobs == b.jobs and a.intervals == b.intervals
    assert (a.decisions, a.preemptions, a.resizes, a.notes) == (
        b.decisions, b.preemptions, b.resizes, b.notes)


@pytest.mark.parametrize("name", ["fifo", "tiresias", "sjf", "gittins", "srtf-oracle"])
def test_stepping_by_hand_is_run(name: str) -> None:
    jobs = _trace()
    ref = Simulator(jobs, policies.make(name), _cfg()).run()
    policy = policies.make(name)
    sim = Simulator(jobs, policy, _cfg())
    points = 0
    while (point := sim.step()) is not None:
        assert point.time == sim.now == point.snapshot.time
        sim.apply(policy.decide(point.snapshot))
        points += 1
    assert sim.done and points == ref.decisions
    _same(sim.result(), ref)


@pytest.mark.parametrize("name", ["fifo", "tiresias", "sjf"])
def test_run_until_in_pieces_and_reset_repeat_the_run(name: str) -> None:
    jobs = _trace()
    ref = Simulator(jobs, policies.make(name), _cfg()).run()
    sim = Simulator(jobs, policies.make(name), _cfg())
    end = max(r.end for r in ref.jobs)
    for until in (0.0, end / 7, end / 3, end / 2):
        assert sim.run(until) is None and not sim.done
        assert math.isinf(sim.now) or sim.now < until
        assert sim.peek() >= until
    result = sim.run()
    _same(result, ref)
    sim.reset()  # a Stateful policy (tiresias, sjf) forgets the first episode
    _same(sim.run(), ref)
    sim.reset()
    assert sim.run(end + 3600) is not None  # (stale timers may follow the last end)


def test_skip_rule_holds_when_stepped() -> None:
    """An order-only driver is asked where the engine's own run asks an order-only policy."""
    jobs = [job("a", 0, 100, 4), job("b", 10, 50, 4), job("c", 20, 50, 1), job("d", 300, 5)]
    ref = Simulator(jobs, policies.make("fifo"), _cfg(nodes=1)).run()
    sim = Simulator(jobs, policies.make("fifo"), _cfg(nodes=1))
    times = []
    while (point := sim.step()) is not None:
        times.append(point.time)
        sim.apply(Decision(policy="driver"))
    assert len(times) == ref.decisions
    assert times == [100.0]  # b and c wait for a; d arrives alone on a free cluster


def test_job_seconds_and_counters() -> None:
    jobs = [job("a", 0, 100, 4), job("b", 10, 50, 4, deadline=200.0),
            job("c", 20, 50, 4, deadline=100.0)]
    sim = Simulator(jobs, policies.make("fifo"), _cfg(nodes=1))
    r = sim.run()
    assert sim.job_s == pytest.approx(sum(j.end - j.submit for j in r.jobs))
    assert (sim.completed, sim.deadlines_met) == (3, 1)  # b ends at 150, c at 200


def test_the_loop_contract_is_enforced() -> None:
    jobs = [job("a", 0, 10), job("b", 0, 10), job("c", 0, 10)]
    sim = Simulator(jobs, policies.make("fifo"), _cfg(nodes=1, gpus_per_node=1))
    with pytest.raises(SimulationError, match="without a decision point"):
        sim.apply(Decision(policy="x"))
    with pytest.raises(SimulationError, match="before the simulation is done"):
        sim.result()
    assert sim.step() is not None
    with pytest.raises(SimulationError, match="answered"):
        sim.step()
    with pytest.raises(SimulationError, match="answered"):
        sim.run()


class _Counting:
    """A Stateful fake (pure logic): counts its resets."""

    name = "counting"

    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name)


def test_simulate_takes_a_policy_object_and_resets_it_per_run() -> None:
    jobs = _trace()
    sizing = Sizing(gpus_per_node=4, load=1.0)
    by_name = simulate(jobs, "tiresias", sizing)
    policy = policies.make("tiresias")
    _same(simulate(jobs, policy, sizing), by_name)
    _same(simulate(jobs, policy, sizing), by_name)  # reused: reset between runs
    fake = _Counting()
    simulate(jobs, fake, sizing)
    sim = Simulator(jobs, fake, _cfg())
    sim.run()
    sim.reset()
    assert fake.resets == 3
    with pytest.raises(ValueError, match="by name"):
        simulate(jobs, policy, sizing, policy_options={"promote_knob": 2.0})
