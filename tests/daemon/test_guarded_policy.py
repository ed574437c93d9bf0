"""The daemon's policy fallback (guarded.py): pure logic, with fake policies named as fakes."""

from __future__ import annotations

import logging
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL

from slurm_rl.cli_common import parse_policy_options
from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Policy,
    Preempt,
    Resize,
)
from slurm_rl.daemon.guarded import GuardedPolicy, check_decision
from slurm_rl.policies.fifo import new as fifo


def snapshot() -> ClusterSnapshot:
    jobs = tuple(JobView(id=JobId(str(i)), state=JobState.PENDING, submit_time=float(i), gpus=1)
                 for i in (1, 2, 3))
    done = JobView(id=JobId("9"), state=JobState.RUNNING, submit_time=0.0, gpus=1)
    node = NodeView(name=NodeName("n1"), state=NodeState.IDLE, gpus_total=4)
    return ClusterSnapshot(time=10.0, jobs=(*jobs, done), nodes=(node,))


@dataclass
class FakeLifo:
    """A fake policy: last submitted first, or whatever `orders` says."""

    name: str = "fake"
    orders: tuple[JobOrder, ...] | None = None
    fail: Exception | None = None

    def decide(self, snap: ClusterSnapshot) -> Decision:
        if self.fail is not None:
            raise self.fail
        if self.orders is not None:
            return Decision(policy=self.name, order=self.orders)
        pending = sorted((j for j in snap.jobs if j.state.is_pending),
                         key=lambda j: -j.submit_time)
        return Decision(policy=self.name, order=tuple(
            JobOrder(job_id=j.id, rank=r, reason="fake") for r, j in enumerate(pending)))


def guarded(factory: object) -> GuardedPolicy:
    return GuardedPolicy("fake", factory, fifo())  # type: ignore[arg-type]


def ranked(d: Decision) -> list[str]:
    return [o.job_id for o in sorted(d.order, key=lambda o: o.rank)]


def test_a_working_policy_decides() -> None:
    g = guarded(FakeLifo)
    assert g.label == "fake" and ranked(g.decide(snapshot())) == ["3", "2", "1"]


def test_a_policy_that_can_not_be_built_falls_back_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Policy:
        raise FileNotFoundError("no such checkpoint: /x.pt")

    with caplog.at_level(logging.ERROR):
        g = guarded(broken)
        for _ in range(3):
            d = g.decide(snapshot())
    assert ranked(d) == ["1", "2", "3"] and d.policy == "fifo"
    assert g.label == "fifo (fallback for fake)"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["policy 'fake' could not be loaded (FileNotFoundError: no such "
                      "checkpoint: /x.pt); deciding with 'fifo'"]


@pytest.mark.parametrize("orders, why", [
    ((JobOrder(job_id=JobId("9"), rank=0),), "not pending"),
    ((JobOrder(job_id=JobId("1"), rank=0), JobOrder(job_id=JobId("1"), rank=1)), "twice"),
    ((JobOrder(job_id=JobId("1"), rank=math.nan),), "not a whole number"),  # type: ignore[arg-type]
    ((JobOrder(job_id=JobId("1"), rank=0, gpus=0),), "GPU count"),
    ((JobOrder(job_id=JobId("7"), rank=0),), "not pending"),
])
def test_a_decision_the_daemon_must_not_act_on_is_replaced(orders: tuple[JobOrder, ...],
                                                           why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_decision(Decision(policy="x", order=orders), snapshot())
    g = guarded(lambda: FakeLifo(orders=orders))
    d = g.decide(snapshot())
    assert d.policy == "fifo" and ranked(d) == ["1", "2", "3"]
    assert any("fallback for fake" in n for n in d.notes)


def test_a_policy_that_raises_falls_back_for_that_cycle_only() -> None:
    fake = FakeLifo(fail=RuntimeError("network returned NaN"))
    g = guarded(lambda: fake)
    assert g.decide(snapshot()).policy == "fifo"
    fake.fail = None
    assert g.decide(snapshot()).policy == "fake"


def test_reload_builds_the_policy_afresh() -> None:
    built: list[int] = []

    def factory() -> Policy:
        built.append(1)
        if len(built) == 1:
            raise OSError("checkpoint not there yet")
        return FakeLifo()

    g = guarded(factory)
    assert g.decide(snapshot()).policy == "fifo"
    assert g.reload() and g.decide(snapshot()).policy == "fake" and g.name == "fake"


def test_policy_options_are_parsed_and_checked() -> None:
    assert parse_policy_options(["checkpoint=/a=b.pt", "margin=0.5", "n=3", "x=true"]) == {
        "checkpoint": "/a=b.pt", "margin": 0.5, "n": 3, "x": True}
    for bad in ("noequals", "=1", "not an id=1"):
        with pytest.raises(ValueError, match="is not KEY=VALUE"):
            parse_policy_options([bad])
    assert parse_policy_options(["n=\u0663"]) == {"n": "\u0663"}  # only ASCII digits


def test_a_policy_option_may_be_a_json_list() -> None:
    assert parse_policy_options(["thresholds=[3600, 36000]"]) == {"thresholds": [3600, 36000]}
    with pytest.raises(ValueError, match=r"thresholds='\[3600,': not a JSON list"):
        parse_policy_options(["thresholds=[3600,"])


@pytest.mark.parametrize(("option", "why"), [
    ("thresholds=[100,50]", "strictly ascending"),
    ("thresholds=abc", "a number of GPU-seconds or a list"),
    ("nosuch=1", "unknown option(s) nosuch"),
])
def test_options_the_policy_refuses_are_a_usage_error_at_start(tmp_path: Path, option: str,
                                                               why: str) -> None:
    """Before: a TypeError at the first cycle, one ERROR line, and the fallback policy for as
    long as the daemon ran. Now: exit 2 naming the option, nothing created."""
    db = tmp_path / "x.db"
    out = subprocess.run([SLURM_RL, "daemon", "--db", str(db), "--once", "--policy", "tiresias",
                          "--policy-option", option], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "Error" in ln]
    assert len(errors) == 1 and why in errors[0] and "--policy-option" in errors[0], out.stderr
    assert "Traceback" not in out.stderr and not db.exists()


# --- the capability contract on the daemon's side (contract.py) -------------------------------


@dataclass
class FakeUndeclared:
    """A fake policy that resizes and preempts the running job 9 without declaring either."""

    name: str = "undeclared"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name,
                        order=(JobOrder(job_id=JobId("1"), rank=0, reason="first"),),
                        resizes=(Resize(job_id=JobId("9"), gpus=2, reason="grow"),),
                        preemptions=(Preempt(job_id=JobId("9"), reason="stop"),))


@dataclass
class FakeDeclared(FakeUndeclared):
    """The same decisions, declaring Resizing and Preempting; its own rule accepts job 9 only
    if `accept`."""

    name: str = "declared"
    accept: bool = True

    def may_resize(self, job: JobView) -> bool:
        return self.accept

    def may_preempt(self, job: JobView) -> bool:
        return self.accept


def test_resizes_and_preemptions_a_policy_does_not_declare_are_not_acted_on() -> None:
    """As the simulator refuses them (a SimulationError), the daemon drops them, with a note,
    and keeps the order (before: acted on, as if declared)."""
    policy = guarded(FakeUndeclared)
    d = policy.decide(snapshot())
    assert d.resizes == () and d.preemptions == ()
    assert [o.job_id for o in d.order] == ["1"]
    assert any("1 resize(s) without declaring Resizing" in n for n in d.notes)
    assert any("1 preempt(s) without declaring Preempting" in n for n in d.notes)


def test_a_declared_policy_keeps_what_its_own_rule_accepts() -> None:
    kept = guarded(FakeDeclared).decide(snapshot())
    assert [r.job_id for r in kept.resizes] == ["9"] and len(kept.preemptions) == 1
    assert not any("refused" in n or "without declaring" in n for n in kept.notes)
    refused = guarded(lambda: FakeDeclared(accept=False)).decide(snapshot())
    assert refused.resizes == () and refused.preemptions == ()
    assert any("resize of 9 refused (not a running job its may_resize accepts)" in n
               for n in refused.notes)


def test_a_resize_of_a_job_that_is_not_running_is_refused() -> None:
    pending_nine = ClusterSnapshot(time=10.0, jobs=tuple(
        JobView(id=JobId(i), state=JobState.PENDING, submit_time=1.0, gpus=1) for i in "19"),
        nodes=snapshot().nodes)
    d = guarded(FakeDeclared).decide(pending_nine)
    assert d.resizes == () and d.preemptions == ()
