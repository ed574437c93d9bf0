"""The audit trail: policy decisions, and the action log that makes actuation crash-safe.

The actuator writes each action PLANNED (and commits) immediately before its command runs, and
finishes it (and commits) immediately after. A daemon that starts and finds actions still
PLANNED knows they were interrupted: it checks Slurm and finishes them as DONE or ABANDONED,
never running them again blindly (see `ActionStatus`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from slurm_rl.core import Decision, JobId

from .bounds import storable_count, storable_int, storable_text
from .kinds import ActionKind, ActionStatus, EntryKind
from .models import Action, ActionJob, DecisionEntry, DecisionRow

MAX_OUTPUT_CHARS = 8000
"""Command output kept per action (the tail, where errors are)."""

_actions = cast(Table, Action.__table__)
_action_jobs = cast(Table, ActionJob.__table__)
_decisions = cast(Table, DecisionRow.__table__)
_entries = cast(Table, DecisionEntry.__table__)


class ActionLogError(RuntimeError):
    """An action that is unknown, or finished already (an outcome is never overwritten)."""


@dataclass(frozen=True, kw_only=True)
class ActionSpec:
    """An action about to run."""

    kind: ActionKind
    job_ids: tuple[JobId, ...]
    argv: tuple[str, ...]
    cycle_id: int
    decision_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class ActionOutcome:
    action_id: int
    exit_code: int | None
    output: str = ""
    status: ActionStatus | None = None
    """None: DONE when exit_code is 0, else FAILED. Give ABANDONED when reconciling."""


@dataclass(frozen=True, kw_only=True)
class ActionRecord:
    """A stored action, as `pending_actions` returns it."""

    id: int
    kind: ActionKind
    job_ids: tuple[JobId, ...]
    argv: tuple[str, ...]
    cycle_id: int
    decision_id: int | None
    status: ActionStatus
    started_at: float


def next_cycle_id(session: Session) -> int:
    """One more than the highest cycle id recorded (1 for a new database)."""
    highest = max(
        session.execute(select(func.max(_decisions.c.cycle_id))).scalar_one() or 0,
        session.execute(select(func.max(_actions.c.cycle_id))).scalar_one() or 0,
    )
    return int(highest) + 1


def record_decision(
    session: Session, decision: Decision, *, cycle_id: int, at: float, dry_run: bool
) -> int:
    """Store a decision and one entry per job it mentions; returns the decision's id.

    Every job mentioned must already be stored (`upsert_jobs` runs first in a cycle).
    """
    decision_id = session.execute(
        insert(_decisions).returning(_decisions.c.id),
        {"cycle_id": cycle_id, "at": at, "policy": decision.policy, "dry_run": dry_run,
         "notes": [storable_text(n) for n in decision.notes]},
    ).scalar_one()
    # A policy's numbers derive from users' intents: bounded like them (NULL if unstorable).
    entries = [
        {"decision_id": decision_id, "job_id": o.job_id, "kind": EntryKind.ORDER,
         "rank": storable_int(o.rank), "gpus": storable_count(o.gpus),
         "reason": storable_text(o.reason)}
        for o in decision.order
    ]
    entries += [
        {"decision_id": decision_id, "job_id": r.job_id, "kind": EntryKind.RESIZE,
         "rank": None, "gpus": storable_count(r.gpus), "reason": storable_text(r.reason)}
        for r in decision.resizes
    ]
    entries += [
        {"decision_id": decision_id, "job_id": p.job_id, "kind": EntryKind.PREEMPT,
         "rank": None, "gpus": None, "reason": storable_text(p.reason)}
        for p in decision.preemptions
    ]
    if entries:
        session.execute(insert(_entries), entries)
    return int(decision_id)


def plan_actions(session: Session, specs: Sequence[ActionSpec], *, at: float) -> list[int]:
    """Write actions as PLANNED and COMMIT; returns their ids, in the order given.

    Call immediately before running the commands: once this returns, a crash can no longer lose
    the fact that they may have run.
    """
    if not specs:
        return []
    rows = [
        {"cycle_id": s.cycle_id, "decision_id": s.decision_id, "kind": s.kind,
         "argv": [storable_text(x, None) for x in s.argv], "status": ActionStatus.PLANNED,
         "started_at": at}
        for s in specs
    ]
    stmt = insert(_actions).returning(_actions.c.id, sort_by_parameter_order=True)
    ids = [int(r[0]) for r in session.execute(stmt, rows)]
    links = [
        {"action_id": action_id, "job_id": job_id}
        for action_id, spec in zip(ids, specs, strict=True)
        for job_id in dict.fromkeys(spec.job_ids)
    ]
    if links:
        session.execute(insert(_action_jobs), links)
    session.commit()
    return ids


def finish_actions(session: Session, outcomes: Sequence[ActionOutcome], *, at: float) -> None:
    """Record how PLANNED actions ended and COMMIT. Raises ActionLogError, writing nothing,
    if any of them is unknown or already finished."""
    if not outcomes:
        return
    ids = [o.action_id for o in outcomes]
    if len(set(ids)) != len(ids):
        raise ActionLogError("finish_actions: an action is listed twice")
    planned = set(
        session.execute(
            select(_actions.c.id).where(
                _actions.c.id.in_(ids), _actions.c.status == ActionStatus.PLANNED
            )
        ).scalars()
    )
    missing = [i for i in ids if i not in planned]
    if missing:
        session.rollback()
        raise ActionLogError(f"actions {missing} are not planned (unknown or finished)")
    rows = []
    for o in outcomes:
        status = o.status
        if status is None:
            status = ActionStatus.DONE if o.exit_code == 0 else ActionStatus.FAILED
        if status is ActionStatus.PLANNED:
            raise ActionLogError(f"action {o.action_id}: an outcome can not be PLANNED")
        rows.append({"b_id": o.action_id, "status": status, "finished_at": at,
                     "exit_code": storable_int(o.exit_code),
                     "output": storable_text(o.output[-MAX_OUTPUT_CHARS:], MAX_OUTPUT_CHARS)})
    stmt = update(_actions).where(_actions.c.id == bindparam("b_id"))
    session.connection().execute(stmt, rows)
    session.commit()


def pending_actions(session: Session) -> list[ActionRecord]:
    """Actions still PLANNED (interrupted by a crash), oldest first, with their jobs."""
    actions = session.execute(
        select(_actions).where(_actions.c.status == ActionStatus.PLANNED).order_by(_actions.c.id)
    ).all()
    if not actions:
        return []
    jobs: dict[int, list[JobId]] = {a.id: [] for a in actions}
    for action_id, job_id in session.execute(
        select(_action_jobs.c.action_id, _action_jobs.c.job_id)
        .where(_action_jobs.c.action_id.in_(list(jobs)))
        .order_by(_action_jobs.c.action_id, _action_jobs.c.job_id)
    ):
        jobs[action_id].append(JobId(job_id))
    return [
        ActionRecord(
            id=a.id, kind=a.kind, job_ids=tuple(jobs[a.id]), argv=tuple(a.argv),
            cycle_id=a.cycle_id, decision_id=a.decision_id, status=a.status,
            started_at=a.started_at,
        )
        for a in actions
    ]
