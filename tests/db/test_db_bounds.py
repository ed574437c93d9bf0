"""Values SQLite can not hold: that job's field is dropped, every other job is written.

The poisonous views are built valid and then poisoned with `object.__setattr__`, bypassing any
validation the core dataclasses do (a parser bug or a future entry point must still not stop
the cycle at the database).
"""

from __future__ import annotations

import math
import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.core import (
    Decision,
    GpuSample,
    Intent,
    JobId,
    JobOrder,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
)
from slurm_rl.db.actions import record_decision
from slurm_rl.db.bounds import (
    TIME_MAX,
    bounded_intent,
    storable_count,
    storable_int,
    storable_real,
    storable_text,
    storable_time,
)
from slurm_rl.db.models import DecisionEntry, GpuSampleRow, Job, JobProgress
from slurm_rl.db.repo import record_node_samples, upsert_jobs

HUGE = 99999999999999999999999999


def poisoned(obj: object, **values: object) -> object:
    """`obj` with `values` set in place, bypassing the dataclass's own checks."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


def honest(i: int) -> JobView:
    return JobView(id=JobId(str(i)), user="ana", name=f"j{i}", partition="gpu",
                   state=JobState.PENDING, submit_time=1000.0 + i, gpus=2,
                   intent=Intent(deadline=2e9, total_steps=1000, batch_size=64),
                   progress=Progress(steps_done=10, steps_total=1000, rate=2.5,
                                     updated_at=1500.0))


def test_storable_predicates() -> None:
    assert storable_int(2**63 - 1) == 2**63 - 1 and storable_int(2**63) is None
    assert storable_int(True) is None and storable_int(1.0) is None
    assert storable_count(-1) is None and storable_count(3) == 3
    assert storable_real(math.nan) is None and storable_real(math.inf) is None
    assert storable_real(10**400) is None and storable_real(3) == 3.0
    assert storable_time(TIME_MAX) == TIME_MAX and storable_time(TIME_MAX + 1) is None
    assert storable_time(-1.0) is None
    assert storable_text("a\udcffb") == "a?b"
    assert len(storable_text("x" * 10_000)) == 4096


def test_bounded_intent_drops_only_the_bad_fields() -> None:
    intent = poisoned(Intent(deadline=2e9, total_steps=5, batch_size=8, gpus_min=1, gpus_max=2),
                      deadline=1e300, total_steps=HUGE, gpus_max=-3)
    assert isinstance(intent, Intent)
    safe, dropped = bounded_intent(intent)
    assert set(dropped) == {"deadline", "total_steps", "gpus_max"}
    assert safe is not None
    assert (safe.deadline, safe.total_steps, safe.gpus_max) == (None, None, None)
    assert (safe.batch_size, safe.gpus_min) == (8, 1)


def test_a_poisonous_job_does_not_stop_the_upsert(session: Session) -> None:
    bad = honest(2)
    poisoned(bad, submit_time=math.inf, gpus=HUGE, start_time=math.nan, name="x\udcff",
             time_limit_s=-math.inf)
    assert bad.intent is not None and bad.progress is not None
    poisoned(bad.intent, deadline=1e300, total_steps=HUGE, batch_size=2**63)
    poisoned(bad.progress, rate=math.nan, steps_total=HUGE, updated_at=math.inf)
    bad_progress = honest(3)
    assert bad_progress.progress is not None
    poisoned(bad_progress.progress, steps_done=HUGE)
    jobs = [honest(1), bad, bad_progress, honest(4)]

    result = upsert_jobs(session, jobs, now=time.time())
    session.commit()

    assert result.new == ("1", "2", "3", "4")
    assert set(result.dropped) == {
        ("2", "submit_time"), ("2", "gpus"), ("2", "start_time"), ("2", "time_limit_s"),
        ("2", "name"), ("2", "intent.deadline"), ("2", "intent.total_steps"),
        ("2", "intent.batch_size"), ("2", "progress.rate"), ("2", "progress.steps_total"),
        ("2", "progress.reported_at"), ("3", "progress.steps_done"),
    }
    row = session.get(Job, "2")
    assert row is not None
    assert (row.submit_time, row.gpus, row.start_time, row.time_limit_s) == (0.0, 0, None, None)
    assert (row.deadline, row.total_steps, row.batch_size) == (None, None, None)
    assert row.name == "x?" and row.user == "ana"
    progress = {p.job_id: p for p in session.execute(select(JobProgress)).scalars()}
    assert set(progress) == {"1", "2", "4"}  # 3's steps_done is unstorable: no row
    assert (progress["2"].steps_done, progress["2"].rate, progress["2"].steps_total) == (
        10, None, None)
    honest_row = session.get(Job, "4")
    assert honest_row is not None and honest_row.total_steps == 1000

    # The next poll with the same poison changes nothing and reports no edit.
    again = upsert_jobs(session, jobs, now=time.time())
    assert again.written == 0 and again.intent_changes == () and not again.intent_overrides


def test_poisonous_samples_and_decisions_are_stored_bounded(session: Session) -> None:
    node = NodeView(name=NodeName("n1"), state=NodeState.IDLE, gpus_total=4,
                    samples=(GpuSample(index=0, util_pct=50.0),
                             GpuSample(index=1, util_pct=10.0)), sampled_at=1000.0)
    poisoned(node.samples[0], util_pct=math.inf, power_w=math.nan)
    poisoned(node.samples[1], index=HUGE)
    poisoned(node, gpus_alloc=HUGE)
    assert record_node_samples(session, [node], now=1000.0) == 1
    sample = session.execute(select(GpuSampleRow)).scalar_one()
    assert (sample.gpu_index, sample.util_pct, sample.power_w) == (0, None, None)

    upsert_jobs(session, [honest(1)], now=1000.0)
    order = poisoned(JobOrder(job_id=JobId("1"), rank=0, gpus=2, reason="r"), rank=HUGE,
                     gpus=-5)
    assert isinstance(order, JobOrder)
    record_decision(session, Decision(policy="p", order=(order,)), cycle_id=1, at=1000.0,
                    dry_run=True)
    session.commit()
    entry = session.execute(select(DecisionEntry)).scalar_one()
    assert (entry.rank, entry.gpus) == (None, None)
