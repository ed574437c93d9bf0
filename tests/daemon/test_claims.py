"""The daemon's memory of claims (daemon/claims.py): runs held to the end their claims stated,
each user's record kept in the database, and the views policies see marked accordingly."""

from __future__ import annotations

import math
from dataclasses import replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from slurm_rl.config import ClaimsConfig
from slurm_rl.core import ClusterSnapshot, Intent, JobId, JobState, JobView, Progress
from slurm_rl.daemon.claims import (
    ClaimChecker,
    Judged,
    describe_record,
    stored_record,
    user_ratio,
)
from slurm_rl.db.models import ClaimRecord

NOW = 1_800_000_000.0
RULES = ClaimsConfig(tolerance=2.0, allowance_s=10.0, remember=3)
TINY = Intent(total_steps=1, model="resnet50")  # claims about 0.15 s
HONEST = Intent(total_steps=4104, model="resnet50")  # claims about 600 s


def view(jid: str, user: str, *, state: JobState = JobState.PENDING, intent: Intent = HONEST,
         start: float | None = None, end: float | None = None, submit: float = NOW - 1000,
         progress: Progress | None = None) -> JobView:
    attained = 0.0 if start is None else (end or NOW) - start
    return JobView(id=JobId(jid), user=user, state=state, submit_time=submit, start_time=start,
                   end_time=end, gpus=1, time_limit_s=3600.0, intent=intent,
                   progress=progress, attained_gpu_s=attained)


def snap(*jobs: JobView, at: float = NOW) -> ClusterSnapshot:
    return ClusterSnapshot(time=at, jobs=tuple(jobs), nodes=())


def by_id(s: ClusterSnapshot) -> dict[str, JobView]:
    return {j.id: j for j in s.jobs}


def test_a_users_record_stretches_within_the_tolerance_and_drops_beyond_it() -> None:
    assert user_ratio([], RULES) == 1.0
    assert user_ratio([Judged(claimed_s=100, observed_s=105)], RULES) == 1.0  # the allowance
    assert user_ratio([Judged(claimed_s=100, observed_s=160)], RULES) == 1.5
    assert user_ratio([Judged(claimed_s=100, observed_s=160),
                       Judged(claimed_s=100, observed_s=211)], RULES) == math.inf


def test_a_run_past_its_claim_is_marked_and_its_owner_caught(session: Session) -> None:
    checker = ClaimChecker(RULES)
    liar = view("1", "b", state=JobState.RUNNING, intent=TINY, start=NOW - 60)
    queued = view("2", "b")
    other = view("3", "a")
    out = by_id(checker.check(session, snap(liar, queued, other)))
    assert out["1"].claim_overrun and out["1"].claim_ratio == math.inf
    assert out["2"].claim_ratio == math.inf and not out["2"].claim_overrun
    assert out["3"] is other  # untouched views stay the same objects
    # the next cycle hands out the same marked views while nothing changed
    again = by_id(checker.check(session, snap(liar, queued, other, at=NOW + 1)))
    assert again["2"] is out["2"]


def test_a_run_within_its_claim_is_left_alone(session: Session) -> None:
    checker = ClaimChecker(RULES)
    job = view("1", "a", state=JobState.RUNNING, start=NOW - 300)
    assert checker.check(session, snap(job)).jobs[0] is job


def test_a_finished_claim_is_stored_once_and_outlives_the_daemon(session: Session) -> None:
    checker = ClaimChecker(RULES)
    run = view("7", "b", state=JobState.RUNNING, intent=TINY, start=NOW - 5)
    checker.check(session, snap(run))  # within the allowance still
    done = view("7", "b", state=JobState.COMPLETED, intent=TINY, start=NOW - 5, end=NOW + 55)
    for t in (NOW + 60, NOW + 61):
        checker.check(session, snap(done, at=t))
    session.commit()
    rows = session.scalars(select(ClaimRecord)).all()
    assert [(r.job_id, r.user, round(r.claimed_s, 2), r.observed_s) for r in rows] == [
        ("7", "b", 0.15, 60.0)]
    # a new daemon reads the record: b's next claim is not believed, a's still is
    fresh = ClaimChecker(RULES)
    out = by_id(fresh.check(session, snap(view("8", "b"), view("9", "a"), at=NOW + 100)))
    assert out["8"].claim_ratio == math.inf and out["9"].claim_ratio == 1.0
    line = describe_record("b", stored_record(session, "b", RULES), RULES)
    assert line.startswith("claims of b: NOT believed (a job ran 60s against 0s claimed")


def test_a_reused_job_id_is_judged_apart_and_records_are_bounded(session: Session) -> None:
    checker = ClaimChecker(RULES)
    for i in range(5):  # the same id five times over (slurmctld restarted with fresh state)
        done = view("5", "a", state=JobState.COMPLETED, submit=NOW - 900 + i,
                    start=NOW - 700, end=NOW - 100)
        checker.check(session, snap(done))
    session.commit()
    assert session.scalar(select(func.count()).select_from(ClaimRecord)) == RULES.remember
    assert checker.record_of("a") == (1.0, RULES.remember)


def test_progress_no_run_could_have_made_catches_its_owner(session: Session) -> None:
    checker = ClaimChecker(RULES)
    tagged = view("1", "b", progress=Progress(steps_done=4103, steps_total=4104, rate=1e5))
    queued = view("2", "b")
    out = by_id(checker.check(session, snap(tagged, queued)))
    assert out["2"].claim_ratio == math.inf
    # progress merely not earned yet (a job requeued by Slurm keeps its earlier run's) is not
    requeued = view("3", "c", submit=NOW - 7200, progress=Progress(
        steps_done=4000, steps_total=4104, rate=6.8, updated_at=NOW - 600))
    assert checker.check(session, snap(requeued)).jobs[0] is requeued
    # Nor is a job the daemon preempted: Slurm dates it submitted at the requeue, 5 s ago, with
    # the progress of its first run. Its owner's other jobs stay believed.
    preempted = replace(view("4", "d", submit=NOW - 5, progress=Progress(
        steps_done=4000, steps_total=4104, rate=6.8, updated_at=NOW - 8)), restarts=1)
    other = view("5", "d")
    out = by_id(checker.check(session, snap(preempted, other)))
    assert out["5"].claim_ratio == 1.0 and out["4"].claim_ratio == 1.0
