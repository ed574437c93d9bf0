"""Retention: old rows go in small batches; what the daemon still reads stays. And the
quarantine of records the poll could not parse."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, func, select, text
from sqlalchemy.orm import Session

from slurm_rl.core import (
    Decision,
    GpuSample,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
)
from slurm_rl.db.actions import (
    ActionOutcome,
    ActionSpec,
    finish_actions,
    plan_actions,
    record_decision,
)
from slurm_rl.db.kinds import ActionKind
from slurm_rl.db.models import (
    Action,
    DecisionEntry,
    DecisionRow,
    GpuSampleRow,
    Job,
    JobEvent,
    QuarantinedRecord,
)
from slurm_rl.db.quarantine import record_quarantined
from slurm_rl.db.repo import record_node_samples, upsert_jobs
from slurm_rl.db.retention import DAY_S, prune

NOW = 2_000_000_000.0
OLD = NOW - 30 * DAY_S


def view(i: int, state: JobState) -> JobView:
    return JobView(id=JobId(str(i)), user="u", name=f"j{i}", partition="p", state=state,
                   submit_time=OLD, gpus=1)


def count(session: Session, model: type) -> int:
    return int(session.execute(select(func.count()).select_from(model)).scalar_one())


def ids(session: Session, column: object) -> set[str]:
    return {str(r[0]) for r in session.execute(select(column))}  # type: ignore[call-overload]


def decide(session: Session, at: float, cycle: int, jobs: list[int]) -> int:
    order = tuple(JobOrder(job_id=JobId(str(j)), rank=k, reason="r") for k, j in enumerate(jobs))
    return record_decision(session, Decision(policy="p", order=order), cycle_id=cycle, at=at,
                           dry_run=False)


def act(session: Session, at: float, cycle: int, jobs: list[int], *, finish: bool = True
        ) -> int:
    spec = ActionSpec(kind=ActionKind.SITE_FACTOR, job_ids=tuple(JobId(str(j)) for j in jobs),
                      argv=("scontrol", "update", f"JobId={','.join(map(str, jobs))}",
                            "SiteFactor=5"), cycle_id=cycle)
    [action_id] = plan_actions(session, [spec], at=at)
    if finish:
        finish_actions(session, [ActionOutcome(action_id=action_id, exit_code=0)], at=at)
    return action_id


def populate(session: Session) -> dict[str, int]:
    # 1 pending, 2 finished long ago (entries/actions only), 3 finished long ago (nothing
    # refers to it), 4 finished recently.
    upsert_jobs(session, [view(1, JobState.PENDING), view(2, JobState.PENDING),
                          view(3, JobState.PENDING), view(4, JobState.PENDING)], now=OLD)
    upsert_jobs(session, [view(2, JobState.COMPLETED), view(3, JobState.COMPLETED)],
                now=OLD + 1)
    upsert_jobs(session, [view(4, JobState.COMPLETED)], now=NOW - 10)
    old_only = decide(session, OLD, 1, [1, 2])       # 1's only (latest) entry: kept
    decide(session, OLD + 5, 2, [2])                 # 2 finished: goes
    session.commit()
    node = NodeView(name=NodeName("n"), state=NodeState.IDLE, gpus_total=1,
                    samples=(GpuSample(index=0, util_pct=1.0),), sampled_at=OLD)
    record_node_samples(session, [node], now=OLD)
    record_node_samples(session, [NodeView(name=NodeName("n"), state=NodeState.IDLE,
                                           gpus_total=1, samples=node.samples,
                                           sampled_at=NOW - 5)], now=NOW)
    record_quarantined(session, [("9", "bad line", "x"), (None, "no id", "y")], OLD)
    record_quarantined(session, [("8", "bad line", "z")], NOW)
    session.commit()
    return {
        "old_only": old_only,
        "covers_pending": act(session, OLD, 1, [1, 2]),
        "finished_only": act(session, OLD, 2, [2]),
        "planned": act(session, OLD, 3, [2], finish=False),
        "recent": act(session, NOW - 5, 4, [4]),
    }


def test_prune_keeps_what_the_daemon_reads_and_deletes_the_rest(session: Session) -> None:
    made = populate(session)
    report = prune(session, now=NOW, retention_days=14, batch=100)
    assert not report.backlog
    # Decisions: the old one with job 1's latest entry stays, the other goes.
    assert ids(session, DecisionRow.id) == {str(made["old_only"])}
    assert ids(session, DecisionEntry.job_id) == {"1"}
    # Actions: the one covering pending job 1, the PLANNED one and the recent one stay.
    assert ids(session, Action.id) == {str(made[k]) for k in
                                       ("covers_pending", "planned", "recent")}
    # Jobs: 3 (finished long ago, nothing names it) goes; 2 is still named by kept actions.
    assert ids(session, Job.job_id) == {"1", "2", "4"}
    assert count(session, GpuSampleRow) == 1
    assert ids(session, QuarantinedRecord.job_id) == {"8"}
    events = session.execute(select(JobEvent.at)).scalars().all()
    assert events and min(events) >= NOW - 14 * DAY_S
    assert report.line().startswith("pruned ")
    # Nothing more to do, and the database is consistent.
    again = prune(session, now=NOW, retention_days=14, batch=100)
    assert again.total == 0 and again.line() == "pruned nothing"
    assert session.execute(text("PRAGMA foreign_key_check")).all() == []


def test_prune_deletes_at_most_a_batch_per_table(session: Session) -> None:
    node = NodeName("n")
    for k in range(25):
        record_node_samples(session, [NodeView(
            name=node, state=NodeState.IDLE, gpus_total=1,
            samples=(GpuSample(index=0),), sampled_at=OLD + k)], now=OLD)
    session.commit()
    report = prune(session, now=NOW, retention_days=1, batch=10)
    assert report.gpu_samples == 10 and report.backlog
    assert prune(session, now=NOW, retention_days=1, batch=10).gpu_samples == 10
    last = prune(session, now=NOW, retention_days=1, batch=10)
    assert last.gpu_samples == 5 and not last.backlog


def test_prune_with_nothing_to_do_is_cheap(session: Session) -> None:
    jobs = [view(i, JobState.PENDING) for i in range(5000)]
    upsert_jobs(session, jobs, now=NOW)
    decide(session, NOW, 1, list(range(5000)))
    session.commit()
    # Cheap = no query reads a whole table or index: every table each pruning query reads is
    # searched through an index (SQLite's EXPLAIN QUERY PLAN: SEARCH, never SCAN).
    # (Not timed: a timed test flakes on a loaded host; benchmarks/bench_retention.py times it.)
    selects: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
             executemany: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append((statement, params))

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert prune(session, now=NOW, retention_days=1, batch=2000).total == 0
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(selects) >= 7  # one per table pruned
    for statement, params in selects:
        plan = [str(row[-1]) for row in session.connection().exec_driver_sql(
            "EXPLAIN QUERY PLAN " + statement, params)]
        full = [line for line in plan if line.startswith("SCAN")]
        assert not full, (statement, plan)


def test_quarantine_inserts_then_bumps(session: Session) -> None:
    assert record_quarantined(session, [("5", "17 fields", "a|b"), ("5", "17 fields", "a|c"),
                                        (None, "undecodable", "\udcff")], 100.0) == 2
    assert record_quarantined(session, [("5", "17 fields", "a|d")], 200.0) == 0
    rows = {(r.job_id, r.reason): r for r in session.execute(
        select(QuarantinedRecord)).scalars()}
    five = rows[("5", "17 fields")]
    assert (five.count, five.first_seen, five.last_seen, five.excerpt) == (3, 100.0, 200.0,
                                                                           "a|d")
    assert rows[(None, "undecodable")].excerpt == "?"
