"""Conformance: every policy registered through the `slurm_rl.policies` entry points, including
one from an outside package (tests/fixtures/outside_policy), keeps the contract (core.Policy)
and declares what it does (policies/capabilities.py); true durations reach oracle policies only.

The outside package is made visible the way an installed distribution is: a `.dist-info` with
the entry_points.txt its pyproject.toml declares, on sys.path (importlib.metadata finds it as it
finds any installed package; no pip, no network, the shared venv left as it is).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from policy_builders import NOW, TableOracle, job, nodes, running, snap

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobState, JobView, Policy
from slurm_rl.policies.capabilities import (
    Gated,
    Observing,
    OracleReading,
    Preempting,
    Resizing,
    Stateful,
)

OUTSIDE = Path(__file__).resolve().parents[1] / "fixtures" / "outside_policy"
SHIPPED = {"fifo", "deadline", "sjf", "sjf-oracle", "srtf-oracle", "edf", "edf-elastic",
           "tiresias", "elasticflow", "elasticflow-drop", "gittins", "srtf2d-oracle", "rl"}


@contextmanager
def outside_policy_installed(tmp: Path) -> Iterator[None]:
    project = tomllib.loads((OUTSIDE / "pyproject.toml").read_text())["project"]
    info = tmp / f"outside_policy-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
             for group, eps in project["entry-points"].items()]
    (info / "entry_points.txt").write_text("\n".join(lines))
    added = [str(tmp), str(OUTSIDE)]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            sys.path.remove(p)
        sys.modules.pop("outside_policy", None)


def _registered() -> tuple[str, ...]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, outside_policy_installed(Path(tmp)):
        return policies.names()


NAMES = _registered()


@pytest.fixture(autouse=True)
def _outside(tmp_path: Path) -> Iterator[None]:
    with outside_policy_installed(tmp_path):
        yield


def test_the_outside_policy_is_found_through_its_entry_point() -> None:
    assert set(NAMES) == SHIPPED | {"lifo"}
    assert type(policies.make("lifo")).__module__ == "outside_policy"


def test_listing_names_imports_no_policy_module() -> None:
    code = ("import sys; from slurm_rl import policies; policies.names(); "
            "print(sorted(m for m in sys.modules if m.startswith('slurm_rl.policies.') "
            "or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def _full() -> tuple[ClusterSnapshot, TableOracle]:
    """Two full 4-GPU nodes: a long running job with much service, a running elastic job with
    a range, and pending jobs (a deadline one, a small one, a held one, an unmanaged one)."""
    elastic = Intent(gpus_min=1, gpus_max=8, elastic=True,
                     total_steps=10_000, model="resnet50", batch_size=64)
    jobs = (
        running("long", gpus=4, submit=10, attained_gpu_s=90_000.0, time_limit_s=90_000),
        running("el", gpus=4, submit=20, intent=elastic, attained_gpu_s=400.0,
                predicted_remaining_s=5000.0),
        job("wide", gpus=3, submit=30, time_limit_s=600, intent=Intent(deadline=NOW + 900)),
        job("small", gpus=1, submit=40, predicted_remaining_s=60.0),
        job("held", gpus=1, submit=50, held=True),
        job("foreign", gpus=1, submit=60, managed=False),
    )
    truth = {"long": 50_000.0, "el": 5000.0, "wide": 300.0, "small": 60.0, "held": 10.0,
             "foreign": 5.0}
    return snap(*jobs, nodes=nodes(4, 4)), TableOracle(truth)


def _make(name: str, oracle: TableOracle | None = None) -> Policy:
    policy = policies.make(name)
    if isinstance(policy, OracleReading):
        policy.bind_oracle(oracle)
    return policy


def _check(policy: Policy, s: ClusterSnapshot, d: Decision, name: str) -> None:
    by_id = {j.id: j for j in s.jobs}
    assert isinstance(d, Decision) and d.policy == name
    ranked = [o.job_id for o in d.order]
    assert len(ranked) == len(set(ranked)), "a job ranked twice"
    for jid in ranked:
        j = by_id[jid]
        assert j.state.is_pending and j.managed, f"{jid} ranked but not a managed pending job"
    if d.preemptions:
        assert isinstance(policy, Preempting), "returns preemptions: must be Preempting"
        for p in d.preemptions:
            assert policy.may_preempt(by_id[p.job_id])
    if d.resizes:
        assert isinstance(policy, Resizing), "returns resizes: must be Resizing"
        for r in d.resizes:
            assert policy.may_resize(by_id[r.job_id])


@pytest.mark.parametrize("name", NAMES)
def test_decides_on_an_empty_snapshot(name: str) -> None:
    d = _make(name).decide(ClusterSnapshot(time=NOW, jobs=(), nodes=()))
    assert d == Decision(policy=name)


@pytest.mark.parametrize("name", NAMES)
def test_decides_on_a_full_snapshot_deterministically(name: str) -> None:
    s, oracle = _full()
    policy = _make(name, oracle)
    assert policy.name == name
    d = policy.decide(s)
    _check(policy, s, d, name)
    assert _make(name, oracle).decide(s) == d, "a fresh instance decides the same"
    if isinstance(policy, Stateful):
        policy.reset()
        assert policy.decide(s) == d, "after reset() it decides as a fresh instance"
    else:
        assert not isinstance(policy, Observing)
        assert policy.decide(s) == d, "declares no state: the same snapshot, the same decision"


@pytest.mark.parametrize("name", NAMES)
def test_oracles_are_named_and_declared_as_such(name: str) -> None:
    policy = policies.make(name)
    assert isinstance(policy, OracleReading) == name.endswith(policies.ORACLE_SUFFIX)
    assert (name in policies.ORACLES) == name.endswith(policies.ORACLE_SUFFIX)


def test_the_shipped_policies_declare_what_they_do() -> None:
    def caps(name: str) -> set[str]:
        p = policies.make(name)
        return {c.__name__ for c in (Preempting, Resizing, Stateful, Observing, OracleReading,
                                     Gated) if isinstance(p, c)}

    assert {n: caps(n) for n in sorted(SHIPPED)} == {
        "deadline": {"Gated", "Preempting", "Resizing", "Stateful"}, "edf": set(), "fifo": set(),
        "edf-elastic": {"Gated", "Preempting", "Resizing"},
        "elasticflow": {"Gated", "Preempting", "Resizing", "Stateful"},
        "elasticflow-drop": {"Gated", "Preempting", "Resizing", "Stateful"},
        "sjf": {"Stateful", "Observing"}, "sjf-oracle": {"OracleReading"},
        "srtf-oracle": {"Preempting", "OracleReading"},
        "srtf2d-oracle": {"Preempting", "OracleReading"}, "gittins": {"Preempting"},
        "tiresias": {"Preempting", "Stateful"}, "rl": {"Preempting", "Stateful", "Gated"}}


def test_the_full_snapshot_exercises_preemption_and_resizing() -> None:
    s, oracle = _full()
    assert _make("srtf-oracle", oracle).decide(s).preemptions
    assert _make("tiresias").decide(s).preemptions
    assert _make("elasticflow").decide(s).resizes
    assert _make("edf-elastic").decide(s).resizes


# --- true durations: only through the simulator's Oracle, only to OracleReading policies ------

def test_job_views_carry_no_true_duration() -> None:
    names = {f.name for f in dataclasses.fields(JobView)}
    assert not {n for n in names if "oracle" in n or "true" in n}
    assert "oracle_remaining_s" not in names


def test_the_daemon_never_binds_an_oracle() -> None:
    # The daemon names OracleReading only to refuse such a policy (test_daemon_policy.py);
    # it never binds or builds an oracle, and never reads true durations.
    daemon = Path(policies.__file__).resolve().parents[1] / "daemon"
    text = "".join(p.read_text() for p in daemon.glob("*.py"))
    for word in ("bind_oracle", "SimOracle", "true_remaining", "remaining_s("):
        assert word not in text


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_only_oracle_policies_get_the_simulators_oracle(name: str) -> None:
    from slurm_rl.sim.config import EngineConfig
    from slurm_rl.sim.engine import Simulator
    from slurm_rl.sim.trace import TraceJob

    policy = policies.make(name)
    bound: list[object] = []
    if isinstance(policy, OracleReading):
        bind = policy.bind_oracle

        def spy(oracle: object) -> None:
            bound.append(oracle)
            bind(oracle)  # type: ignore[arg-type]

        object.__setattr__(policy, "bind_oracle", spy)
    jobs = [TraceJob(id=str(i), submit=float(i), duration=50.0 + i, gpus=1 + i % 3)
            for i in range(12)]
    seen_fields: set[str] = set()
    decide = policy.decide

    def watch(s: ClusterSnapshot, *cycle: Any) -> Decision:  # (a Gated policy's CycleState)
        for j in s.jobs:
            seen_fields.update(k for k in vars(j) if not k.startswith("_"))
        return decide(s, *cycle)

    object.__setattr__(policy, "decide", watch)
    Simulator(jobs, policy, EngineConfig(nodes=2, gpus_per_node=4)).run()
    assert len(bound) == (1 if name in policies.ORACLES else 0)
    assert seen_fields <= {f.name for f in dataclasses.fields(JobView)}
    assert JobState.PENDING  # (the views were plain JobViews: no extra public fields)
