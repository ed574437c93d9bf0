"""Decisions and the action log: planned before, finished after, never lost or repeated."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from slurm_rl.core import Decision, JobId, JobOrder, JobState, JobView, Preempt, Resize
from slurm_rl.db.actions import (
    MAX_OUTPUT_CHARS,
    ActionLogError,
    ActionOutcome,
    ActionSpec,
    finish_actions,
    next_cycle_id,
    pending_actions,
    plan_actions,
    record_decision,
)
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus, EntryKind
from slurm_rl.db.models import Action, DecisionEntry, DecisionRow
from slurm_rl.db.repo import upsert_jobs


def _jobs(session: Session, n: int = 3) -> None:
    upsert_jobs(session, [
        JobView(id=JobId(str(i)), state=JobState.PENDING, submit_time=float(i), gpus=1)
        for i in range(1, n + 1)
    ], now=0.0)
    session.commit()


def spec(*ids: str, kind: ActionKind = ActionKind.SITE_FACTOR, cycle: int = 1) -> ActionSpec:
    return ActionSpec(kind=kind, job_ids=tuple(JobId(i) for i in ids), cycle_id=cycle,
                      argv=("scontrol", "update", f"JobId={','.join(ids)}", "SiteFactor=100"))


def test_a_decision_is_stored_with_an_entry_per_job(session: Session) -> None:
    _jobs(session)
    assert next_cycle_id(session) == 1
    decision = Decision(
        policy="deadline",
        order=(JobOrder(job_id=JobId("2"), rank=0, gpus=4, reason="slack 10s"),
               JobOrder(job_id=JobId("1"), rank=1, reason="no deadline; by age")),
        resizes=(Resize(job_id=JobId("3"), gpus=2, reason="free GPUs"),),
        preemptions=(Preempt(job_id=JobId("3"), reason="hard deadline at risk"),),
        notes=("42 pending",),
    )
    decision_id = record_decision(session, decision, cycle_id=7, at=99.0, dry_run=True)
    session.commit()
    row = session.get(DecisionRow, decision_id)
    assert row is not None
    assert (row.cycle_id, row.at, row.policy, row.dry_run, row.notes) == (
        7, 99.0, "deadline", True, ["42 pending"])
    entries = session.execute(
        select(DecisionEntry.job_id, DecisionEntry.kind, DecisionEntry.rank, DecisionEntry.gpus,
               DecisionEntry.reason).where(DecisionEntry.decision_id == decision_id)
        .order_by(DecisionEntry.id)
    ).all()
    assert [tuple(e) for e in entries] == [
        ("2", EntryKind.ORDER, 0, 4, "slack 10s"),
        ("1", EntryKind.ORDER, 1, None, "no deadline; by age"),
        ("3", EntryKind.RESIZE, None, 2, "free GPUs"),
        ("3", EntryKind.PREEMPT, None, None, "hard deadline at risk"),
    ]
    assert next_cycle_id(session) == 8


def test_planned_then_done(session: Session) -> None:
    _jobs(session)
    [action_id] = plan_actions(session, [spec("1", "2")], at=10.0)
    [pending] = pending_actions(session)
    assert (pending.id, pending.kind, pending.job_ids, pending.status, pending.started_at) == (
        action_id, ActionKind.SITE_FACTOR, ("1", "2"), ActionStatus.PLANNED, 10.0)
    assert pending.argv == ("scontrol", "update", "JobId=1,2", "SiteFactor=100")
    finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=0)], at=11.0)
    assert pending_actions(session) == []
    row = session.get(Action, action_id, populate_existing=True)
    assert row is not None
    assert (row.status, row.finished_at, row.exit_code) == (ActionStatus.DONE, 11.0, 0)


def test_a_nonzero_exit_is_failed_and_the_outcome_is_never_overwritten(session: Session) -> None:
    _jobs(session)
    [action_id] = plan_actions(session, [spec("1")], at=1.0)
    long_output = "x" * (MAX_OUTPUT_CHARS + 10) + "END"
    finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=1, output=long_output)],
                   at=2.0)
    row = session.get(Action, action_id, populate_existing=True)
    assert row is not None and row.status is ActionStatus.FAILED
    assert row.output is not None and len(row.output) == MAX_OUTPUT_CHARS
    assert row.output.endswith("END")
    with pytest.raises(ActionLogError, match="not planned"):
        finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=0)], at=3.0)
    with pytest.raises(ActionLogError):
        finish_actions(session, [ActionOutcome(action_id=12345, exit_code=0)], at=3.0)


def test_finish_actions_writes_all_or_nothing(session: Session) -> None:
    _jobs(session)
    a, b = plan_actions(session, [spec("1"), spec("2", "3", kind=ActionKind.TRES_PER_NODE)],
                        at=1.0)
    with pytest.raises(ActionLogError):
        finish_actions(session, [ActionOutcome(action_id=a, exit_code=0),
                                 ActionOutcome(action_id=999, exit_code=0)], at=2.0)
    assert [p.id for p in pending_actions(session)] == [a, b]
    finish_actions(session, [
        ActionOutcome(action_id=a, exit_code=0),
        ActionOutcome(action_id=b, exit_code=None, output="not reflected by Slurm",
                      status=ActionStatus.ABANDONED),
    ], at=2.0)
    statuses = session.execute(select(Action.status).order_by(Action.id)).scalars().all()
    assert statuses == [ActionStatus.DONE, ActionStatus.ABANDONED]


def test_plan_is_durable_across_a_crash(engine: Engine, db_path: Path) -> None:
    with make_session_factory(engine)() as session:
        _jobs(session)
    # A separate process plans an action and dies (SIGKILL) before finishing it.
    script = textwrap.dedent(f"""
        import os, signal
        from slurm_rl.core import JobId
        from slurm_rl.db.actions import ActionSpec, plan_actions
        from slurm_rl.db.engine import make_engine, make_session_factory
        from slurm_rl.db.kinds import ActionKind
        session = make_session_factory(make_engine({str(db_path)!r}))()
        plan_actions(session, [ActionSpec(kind=ActionKind.TRES_PER_NODE, job_ids=(JobId("3"),),
                     argv=("scontrol", "update", "JobId=3", "TresPerNode=gres:gpu:2"),
                     cycle_id=4)], at=5.0)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    restarted = make_engine(db_path)
    with make_session_factory(restarted)() as session:
        [pending] = pending_actions(session)
        assert (pending.kind, pending.job_ids, pending.cycle_id) == (
            ActionKind.TRES_PER_NODE, ("3",), 4)
        finish_actions(session, [ActionOutcome(
            action_id=pending.id, exit_code=None, status=ActionStatus.DONE,
            output="reconciled: Slurm shows the new GPU count")], at=6.0)
        assert pending_actions(session) == []
        assert next_cycle_id(session) == 5
    restarted.dispose()


def test_an_action_for_an_unknown_job_is_refused(session: Session) -> None:
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError):
        plan_actions(session, [spec("nope")], at=1.0)
    session.rollback()
    assert pending_actions(session) == []
