"""The engine's `Gated` hook (policies/capabilities.py): a policy's own `futile(snapshot)` is asked
instead of `decide` only where the engine's skip rule is exact, and a True answer skips the call
as the engine skips its own futile ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from sim_helpers import FakePolicy

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision
from slurm_rl.policies.capabilities import CycleState, Gated
from slurm_rl.sim.config import EngineConfig
from slurm_rl.sim.engine import Simulator
from slurm_rl.sim.run import load_jobs, resolve_trace_path
from slurm_rl.sim.trace import TraceJob


def _trace() -> tuple[TraceJob, ...]:
    return load_jobs(resolve_trace_path("data:itp-deadline-cluster10.csv"), "itp-deadline",
                     "0:80")


def _cfg(**kw: object) -> EngineConfig:
    values: dict[str, object] = {"nodes": 4, "gpus_per_node": 4, "audit": True, "tick_s": 60.0,
                                 **kw}
    return EngineConfig(**values)  # type: ignore[arg-type]


@dataclass
class GatedFakePolicy(FakePolicy):
    """A test-only Gated policy: `FakePolicy` (Preempting, Resizing; decides with `fn`) whose
    `futile` answers `rule(snapshot)`, recording the times it was asked and decided at."""

    rule: Callable[[ClusterSnapshot], bool] = lambda s: False
    asked: list[float] = field(default_factory=list)
    decided: list[float] = field(default_factory=list)
    handed: list[bool] = field(default_factory=list)
    """Per decide call: whether the cycle its futile wrote into reached it."""

    def futile(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> bool:
        self.asked.append(snapshot.time)
        if cycle is not None:
            cycle.write("fake", snapshot.time)
        return self.rule(snapshot)

    def decide(self, snapshot: ClusterSnapshot, cycle: CycleState | None = None) -> Decision:
        self.decided.append(snapshot.time)
        self.handed.append(cycle is not None and cycle.read("fake") == snapshot.time)
        return super().decide(snapshot)


def _fifo() -> Callable[[ClusterSnapshot], Decision]:
    fifo = policies.make("fifo")
    return fifo.decide


def test_never_futile_decides_as_the_policy_without_the_hook() -> None:
    jobs = _trace()
    plain = Simulator(jobs, FakePolicy(fn=_fifo()), _cfg()).run()
    gated = GatedFakePolicy(fn=_fifo())
    assert isinstance(gated, Gated)
    result = Simulator(jobs, gated, _cfg()).run()
    assert result.jobs == plain.jobs and result.decisions == plain.decisions > 0
    assert gated.asked == gated.decided  # asked first, at every decision point
    assert gated.handed and all(gated.handed)  # each decide got the cycle its futile wrote


def _odd_minute(t: float) -> bool:
    return int(t // 60) % 2 == 1


def test_a_futile_call_is_skipped() -> None:
    """`futile` True at odd minutes: decide is never called there, and is called at every
    other point asked; only those calls count as decisions."""
    gated = GatedFakePolicy(fn=_fifo(), rule=lambda s: _odd_minute(s.time))
    result = Simulator(_trace(), gated, _cfg()).run()
    skipped = [t for t in gated.asked if _odd_minute(t)]
    assert skipped and not any(_odd_minute(t) for t in gated.decided)
    assert [t for t in gated.asked if not _odd_minute(t)] == gated.decided
    assert result.decisions == len(gated.decided) > 0
    assert len(result.jobs) == len(_trace())


@pytest.mark.parametrize("cfg", [{"decision_delay_s": 30.0}, {"skip_futile": False},
                                 {"decide_on_events": False}])
def test_not_asked_where_skipping_is_not_exact(cfg: dict[str, object]) -> None:
    """With a decision delay, without skip_futile, or on a fixed cycle the engine never asks
    `futile`: it asks `decide` at every decision point, as for any policy."""
    always = GatedFakePolicy(fn=_fifo(), rule=lambda s: True)
    result = Simulator(_trace(), always, _cfg(**cfg)).run()
    assert always.asked == [] and len(always.decided) == result.decisions > 0
