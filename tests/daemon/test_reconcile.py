"""Finishing interrupted actions from what Slurm shows, and what the action log then knows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.orm import Session

from slurm_rl.cli import main
from slurm_rl.core import Decision, JobId, JobState, JobView, Preempt, Resize
from slurm_rl.daemon.actuator import Change
from slurm_rl.daemon.reconcile import Seen, parse_sprio, resolve, seen
from slurm_rl.daemon.store import explain_job, known_site_factors, record_finished
from slurm_rl.db.actions import (
    ActionOutcome,
    ActionSpec,
    finish_actions,
    pending_actions,
    plan_actions,
    record_decision,
)
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import upsert_jobs


def job(i: int, **kw: object) -> JobView:
    base: dict[str, object] = dict(id=JobId(str(i)), state=JobState.PENDING,
                                   submit_time=float(i), gpus=1, nodes=1)  # before the actions
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def sf(value: int, *ids: int) -> Change:
    return Change(kind=ActionKind.SITE_FACTOR, job_ids=tuple(JobId(str(i)) for i in ids),
                  fields=(("SiteFactor", str(value)),))


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    engine = make_engine(tmp_path / "t.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        yield s
    engine.dispose()


# Recorded: `sprio -h -j 59 -o "%i %S"` on the test cluster (22.05) after SiteFactor=321.
SPRIO = "             59 321\n"


def test_parse_sprio() -> None:
    assert parse_sprio(SPRIO) == {"59": 321}


def test_seen_per_kind() -> None:
    assert seen(sf(5, 1), job(1), {JobId("1"): 5}) is Seen.APPLIED
    assert seen(sf(5, 1), job(1), {JobId("1"): 0}) is Seen.NOT_APPLIED
    assert seen(sf(5, 1), job(1, held=True), {}) is Seen.UNKNOWN
    assert seen(sf(5, 1), job(1, state=JobState.RUNNING), {}) is Seen.GONE
    assert seen(sf(5, 1), None, {}) is Seen.GONE
    prio = Change(kind=ActionKind.PRIORITY, job_ids=(JobId("1"),), fields=(("Priority", "7"),))
    assert seen(prio, job(1, priority=7), {}) is Seen.APPLIED
    assert seen(prio, job(1, priority=1), {}) is Seen.NOT_APPLIED
    tres = Change(kind=ActionKind.TRES_PER_NODE, job_ids=(JobId("1"),),
                  fields=(("TresPerNode", "gres:gpu:4"), ("NumNodes", "2")))
    assert seen(tres, job(1, gpus=8, nodes=2), {}) is Seen.APPLIED
    assert seen(tres, job(1, gpus=4, nodes=1), {}) is Seen.NOT_APPLIED


def _plan(session: Session, *changes: Change) -> list[int]:
    return plan_actions(session, [ActionSpec(kind=c.kind, job_ids=c.job_ids, argv=c.argv,
                                             cycle_id=1) for c in changes], at=10.0)


def test_resolve_done_abandoned_and_split(session: Session) -> None:
    upsert_jobs(session, [job(i) for i in range(1, 6)], now=1.0)
    _plan(session, sf(9, 1, 2), sf(8, 3), sf(7, 4, 5))
    records = pending_actions(session)
    jobs = {j.id: j for j in [job(1), job(2, state=JobState.RUNNING), job(3), job(4), job(5)]}
    shown = {JobId("1"): 9, JobId("3"): 0, JobId("4"): 7}   # 5: held, unverifiable
    a, b, c = resolve(records, jobs, shown)
    assert a.status is ActionStatus.DONE and a.applied is None       # 1 shows it, 2 started
    assert b.status is ActionStatus.ABANDONED and b.applied is None  # 3 does not show it
    assert c.status is ActionStatus.ABANDONED and c.applied == sf(7, 4)
    assert "not re-run" in a.note


def test_an_action_is_not_reconciled_against_a_later_job_of_the_same_id(
        session: Session) -> None:
    # An action PLANNED for the old job 2 (slurmctld since restarted with fresh state, or the
    # id wrapped): the new job 2, submitted later, showing the same value is no sign of it.
    upsert_jobs(session, [job(1), job(2)], now=1.0)
    _plan(session, sf(9, 1, 2), sf(8, 2))
    records = pending_actions(session)
    jobs = {j.id: j for j in [job(1), job(2, submit_time=500.0)]}
    a, b = resolve(records, jobs, {JobId("1"): 9, JobId("2"): 8})
    assert a.status is ActionStatus.DONE and a.applied is None and "1 no longer" in a.note
    assert b.status is ActionStatus.ABANDONED and b.applied is None


def test_known_site_factors_are_not_inherited_by_a_reused_id(session: Session) -> None:
    upsert_jobs(session, [job(1), job(2)], now=1.0)
    (a,) = _plan(session, sf(50, 1, 2))
    finish_actions(session, [ActionOutcome(action_id=a, exit_code=0)], at=11.0)
    assert known_site_factors(session) == {"1": 50, "2": 50}
    upsert_jobs(session, [job(2, user="bo", submit_time=500.0)], now=500.0)
    session.commit()
    assert known_site_factors(session) == {"1": 50}  # the new job 2's value is unknown


def test_known_site_factors_follow_the_latest_finished_action(session: Session) -> None:
    upsert_jobs(session, [job(i) for i in range(1, 5)]
                + [job(9, state=JobState.COMPLETED)], now=1.0)
    ids = _plan(session, sf(50, 1, 2, 3, 9), sf(40, 4))
    finish_actions(session, [ActionOutcome(action_id=ids[0], exit_code=1,
                                           status=ActionStatus.DONE),
                             ActionOutcome(action_id=ids[1], exit_code=0)], at=11.0)
    # Job 3 was refused within the batch: split off as FAILED (a later id).
    record_finished(session, sf(50, 3), status=ActionStatus.FAILED, output="refused",
                    cycle_id=1, decision_id=None, exit_code=1, at=11.0)
    # Job 4 gets a new value that is still PLANNED: the old DONE one is what Slurm has.
    _plan(session, sf(60, 4))
    session.commit()
    assert known_site_factors(session) == {"1": 50, "2": 50, "4": 40}


def test_explain_lists_the_actions_of_a_job(session: Session) -> None:
    upsert_jobs(session, [job(i) for i in range(1, 8)], now=1.0)
    (a,) = _plan(session, sf(50, *range(1, 8)))
    finish_actions(session, [ActionOutcome(action_id=a, exit_code=0)], at=11.0)
    info = explain_job(session, "3")
    assert info.job is not None and info.entry is None
    (act,) = info.actions
    assert act.status is ActionStatus.DONE
    assert act.command == "scontrol update JobId=3,…(+6 jobs) SiteFactor=50"


def test_explain_says_a_resize_or_preemption_was_not_applied(tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "t.db")
    upgrade(engine)
    with make_session_factory(engine)() as session:
        upsert_jobs(session, [job(2, state=JobState.RUNNING), job(3, state=JobState.RUNNING)],
                    now=1.0)
        record_decision(session, Decision(
            policy="p", resizes=(Resize(job_id=JobId("2"), gpus=8, reason="grow"),),
            preemptions=(Preempt(job_id=JobId("3"), reason="make room"),)),
            cycle_id=1, at=2.0, dry_run=False)
        session.commit()
    engine.dispose()
    for job_id, line in (("2", "resize, 8 GPUs (applied when it pays and is allowed: see the "
                               "actions)\n  reason: grow"),
                         ("3", "preempt (applied to a job that opted in to restarts "
                               "(--rl-elastic) when allowed: see the actions)\n  reason: make "
                               "room")):
        shown = CliRunner().invoke(main, ["explain", job_id, "--db", str(tmp_path / "t.db")])
        assert shown.exit_code == 0, shown.output
        assert f"(cycle 1): {line}" in shown.output
