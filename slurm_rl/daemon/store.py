"""The daemon's own reads and writes, on top of `slurm_rl.db` (which owns the schema).

`known_site_factors`: the SiteFactor Slurm has for each pending job as far as the action log
knows (22.05 shows it nowhere for held jobs). `record_finished` stores an action that needs no
command (the applied part of a reconciled one, the failed part of a partly failed one).
`set_notes` adds the cycle's timing to its decision row. `explain_job` gathers what
`slurm-rl explain` prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from slurm_rl.core import JobId, JobState
from slurm_rl.daemon.actuator import Change, parse_change
from slurm_rl.db.actions import ActionOutcome, ActionSpec, finish_actions, plan_actions
from slurm_rl.db.kinds import ActionKind, ActionStatus, EntryKind
from slurm_rl.db.models import Action, ActionJob, DecisionEntry, DecisionRow, Job, JobEvent

_actions = Action.__table__
_links = ActionJob.__table__
_jobs = Job.__table__
_PENDING = [s for s in JobState if s.is_pending]
CHUNK = 5000


def known_site_factors(session: Session) -> dict[JobId, int]:
    """For each job stored as pending: the value of its latest finished SiteFactor action, if
    that action is DONE (FAILED or ABANDONED last: unknown, so the next plan sets it again).
    Actions planned before the job's submit time were for another job of the same id (or for
    it before a requeue): they count for nothing."""
    latest = session.execute(
        select(_links.c.job_id, func.max(_actions.c.id))
        .join(_actions, _actions.c.id == _links.c.action_id)
        .join(_jobs, _jobs.c.job_id == _links.c.job_id)
        .where(_actions.c.kind == ActionKind.SITE_FACTOR,
               _actions.c.status != ActionStatus.PLANNED,
               _actions.c.started_at >= _jobs.c.submit_time,
               _jobs.c.state.in_(_PENDING))
        .group_by(_links.c.job_id)
    ).all()
    action_ids = sorted({int(r[1]) for r in latest})
    values: dict[int, int] = {}
    for i in range(0, len(action_ids), CHUNK):
        rows = session.execute(
            select(_actions.c.id, _actions.c.argv)
            .where(_actions.c.id.in_(action_ids[i:i + CHUNK]),
                   _actions.c.status == ActionStatus.DONE)
        )
        for action_id, argv in rows:
            value = dict(parse_change(ActionKind.SITE_FACTOR, argv).fields).get("SiteFactor")
            if value is not None:
                values[int(action_id)] = int(value)
    return {JobId(job): values[aid] for job, aid in latest if aid in values}


def record_finished(
    session: Session, change: Change, *, status: ActionStatus, output: str, cycle_id: int,
    decision_id: int | None, exit_code: int | None, at: float,
) -> int:
    """Store an action that is already finished (no command runs for it); returns its id."""
    spec = ActionSpec(kind=change.kind, job_ids=change.job_ids, argv=change.argv,
                      cycle_id=cycle_id, decision_id=decision_id)
    (action_id,) = plan_actions(session, [spec], at=at)
    finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=exit_code,
                                           output=output, status=status)], at=at)
    return action_id


def set_notes(session: Session, decision_id: int, notes: Sequence[str]) -> None:
    table = DecisionRow.__table__
    session.execute(update(table).where(table.c.id == decision_id).values(notes=list(notes)))


# --- explain ----------------------------------------------------------------------------------

GUARD_NOTE = "guard: "
"""How a note from a policy's guard begins (policies/guard.py NOTE)."""


def guard_note(notes: object) -> str:
    """The first guard note of a decision's stored notes ("" when none)."""
    if isinstance(notes, list):
        for n in notes:
            if isinstance(n, str) and n.startswith(GUARD_NOTE):
                return n[len(GUARD_NOTE):]
    return ""

@dataclass(frozen=True, kw_only=True)
class EntryInfo:
    kind: EntryKind
    at: float
    policy: str
    dry_run: bool
    cycle_id: int
    rank: int | None
    gpus: int | None
    reason: str
    guard: str = ""
    """The decision's note from the policy's guard, if it has one (policies/guard.py)."""


@dataclass(frozen=True, kw_only=True)
class ActionInfo:
    id: int
    kind: ActionKind
    status: ActionStatus
    started_at: float
    finished_at: float | None
    exit_code: int | None
    command: str
    """The command, with the job list shortened when it names many jobs."""
    output: str


@dataclass(frozen=True, kw_only=True)
class JobExplanation:
    job: Job | None
    entry: EntryInfo | None
    actions: tuple[ActionInfo, ...]
    events: tuple[JobEvent, ...]


def explain_job(session: Session, job_id: str) -> JobExplanation:
    job = session.get(Job, job_id)
    entry_row = session.execute(
        select(DecisionEntry, DecisionRow)
        .join(DecisionRow, DecisionRow.id == DecisionEntry.decision_id)
        .where(DecisionEntry.job_id == job_id)
        .order_by(DecisionEntry.decision_id.desc())
        .limit(1)
    ).first()
    entry = None
    if entry_row is not None:
        e, d = entry_row
        entry = EntryInfo(kind=e.kind, at=d.at, policy=d.policy, dry_run=d.dry_run,
                          cycle_id=d.cycle_id, rank=e.rank, gpus=e.gpus, reason=e.reason,
                          guard=guard_note(d.notes))
    actions = tuple(
        ActionInfo(id=a.id, kind=a.kind, status=a.status, started_at=a.started_at,
                   finished_at=a.finished_at, exit_code=a.exit_code,
                   command=_short_command(a.kind, a.argv, job_id), output=a.output or "")
        for a in session.execute(
            select(Action).join(ActionJob, ActionJob.action_id == Action.id)
            .where(ActionJob.job_id == job_id).order_by(Action.id)
        ).scalars()
    )
    events = tuple(session.execute(
        select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.at, JobEvent.id)
    ).scalars())
    return JobExplanation(job=job, entry=entry, actions=actions, events=events)


def _short_command(kind: ActionKind, argv: Sequence[str], job_id: str) -> str:
    change = parse_change(kind, argv)
    if len(change.job_ids) <= 4:
        return " ".join(argv)
    rest = " ".join(f"{k}={v}" for k, v in change.fields)
    return f"scontrol update JobId={job_id},…(+{len(change.job_ids) - 1} jobs) {rest}"
