"""The gate vets a job again only when its polled view, its first intent, the grants or the
limits changed (gate.py): over sequences of polls in which views are kept, replaced and dropped,
first intents come and go, partition limits change and the clock passes the limits' refresh, it
admits what a gate vetting every job afresh admits (the same views, findings and events), and an
unchanged job is the same view object as the cycle before (the policy keeps its work per view).
Pure logic: the Gate's reads of Slurm come from a FAKE, the database is a real one."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from slurm_rl.core import (
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    ServiceClass,
)
from slurm_rl.daemon.gate import Admitted, Gate
from slurm_rl.daemon.poll import Polled
from slurm_rl.daemon.trust import Grants
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import JobEvent
from slurm_rl.db.repo import upsert_jobs
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import CommandResult

NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       partitions=("gpu",)) for i in range(1, 5))
PARTITIONS = ("PartitionName=gpu MaxNodes=UNLIMITED MaxCPUsPerNode=UNLIMITED QoS=N/A\n",
              "PartitionName=gpu MaxNodes=1 MaxCPUsPerNode=UNLIMITED QoS=N/A\n")


class Answers:
    """A FAKE for the Gate's reads of Slurm: no accounting, one partition whose line the test
    changes."""

    def __init__(self) -> None:
        self.partition = PARTITIONS[0]

    def run(self, args: Sequence[str], *, timeout_s: float | None = None) -> CommandResult:
        argv = tuple(args)
        out = {("scontrol", "show", "config"): "AccountingStorageType = accounting_storage/none\n",
               ("scontrol", "show", "partition", "-o"): self.partition}.get(argv, "")
        return CommandResult(args=argv, returncode=0, stdout=out, stderr="", duration_s=0.0)


def gate(runner: Answers) -> Gate:
    adapter = cast(SlurmAdapter, type("A", (), {"runner": runner,
                                                "scope": staticmethod(lambda r, t: True)})())
    return Gate(adapter, Grants(deadline_horizon_s=10_000.0))


def intent(rng: random.Random) -> Intent | None:
    kind = rng.randrange(5)
    if kind == 0:
        return None
    return Intent(deadline=1000.0 + rng.choice((500.0, 50_000.0)) if kind > 1 else None,
                  service_class=rng.choice((ServiceClass.STANDARD, ServiceClass.CRITICAL)),
                  gpus_min=rng.choice((None, 1, 6)), gpus_max=rng.choice((None, 8, 16)))


def view(rng: random.Random, jid: str) -> JobView:
    return JobView(id=JobId(jid), user="alice", partition="gpu", submit_time=1000.0,
                   state=rng.choice((JobState.PENDING, JobState.PENDING, JobState.RUNNING,
                                     JobState.COMPLETED)),
                   gpus=rng.randint(1, 4), managed=True, intent=intent(rng))


def events(session: Session) -> list[tuple[str, str, str | None]]:
    return [(e.job_id, e.kind.value, e.new) for e in session.execute(
        select(JobEvent).order_by(JobEvent.id)).scalars()]


def same(a: Admitted, b: Admitted) -> bool:
    return (a.jobs, a.limits, a.assoc, a.findings, a.quarantined) == (
        b.jobs, b.limits, b.assoc, b.findings, b.quarantined)


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_gate_admits_what_a_fresh_one_does(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    sessions = []
    for name in ("kept", "fresh"):
        engine = make_engine(tmp_path / f"{name}.db")
        upgrade(engine)
        sessions.append(make_session_factory(engine)())
    runners = (Answers(), Answers())
    kept, fresh = gate(runners[0]), gate(runners[1])
    pool = {str(i): view(rng, str(i)) for i in range(10)}
    firsts: dict[JobId, Intent | None] = {}
    now, before, shown_before = 0.0, None, {}
    for _ in range(15):
        now += rng.choice((0.0, 100.0, 400.0))  # limits are read again after 300 s
        if rng.randrange(4) == 0:
            runners[0].partition = runners[1].partition = rng.choice(PARTITIONS)
        for jid in rng.sample(sorted(pool), 3):
            pool[jid] = view(rng, jid)  # a changed record: a new view
        if len(pool) > 6:
            del pool[rng.choice(sorted(pool))]
        jid = str(rng.randrange(14))
        pool.setdefault(jid, view(rng, jid))
        for jid in rng.sample(sorted(pool), 2):  # first intents seen, and forgotten
            first = rng.choice(("drop", None, Intent(deadline=1200.0), Intent(gpus_min=2)))
            if first == "drop":
                firsts.pop(JobId(jid), None)
            else:
                firsts[JobId(jid)] = first  # type: ignore[assignment]
        polled = Polled(now=now, jobs=tuple(pool.values()), changed=(), user_comments={},
                        nodes=NODES, gpus_per_job=frozenset(), entries={})
        for session in sessions:  # the jobs' rows, which their events name
            upsert_jobs(session, list(pool.values()), now=now, user_comments={})
        got = kept.admit(sessions[0], polled, dict(firsts), now)
        fresh._vetted = {}  # vet every job again
        want = fresh.admit(sessions[1], polled, dict(firsts), now)
        assert same(got, want)
        if before is not None and got.limits == before.limits:
            for v in got.jobs:
                last = shown_before.get(v.id)
                if last is not None and last[0] is pool[v.id] and last[1] is firsts.get(
                        v.id, "none"):
                    assert v is last[2]  # unchanged: the very view the policy saw
        before = got
        shown_before = {v.id: (pool[v.id], firsts.get(v.id, "none"), v) for v in got.jobs}
    assert events(sessions[0]) == events(sessions[1])
    assert events(sessions[0])  # the sequence did find something to correct
    for s in sessions:
        s.close()


def test_a_first_intent_sets_whether_the_job_may_be_restarted(tmp_path: Path) -> None:
    # A running job may be requeued only if it opted in (--rl-elastic) with the intent the
    # daemon believes: the one first seen. A tag added later is not believed, and a first
    # intent that opted in stands when the tag is later changed.
    engine = make_engine(tmp_path / "g.db")
    upgrade(engine)
    session = make_session_factory(engine)()
    late = JobView(id=JobId("1"), user="alice", partition="gpu", submit_time=1000.0,
                   state=JobState.RUNNING, gpus=1, managed=True,
                   intent=Intent(elastic=True), restartable=True)
    first = JobView(id=JobId("2"), user="alice", partition="gpu", submit_time=1000.0,
                    state=JobState.RUNNING, gpus=1, managed=True,
                    intent=Intent(deadline=1500.0), restartable=False)
    polled = Polled(now=1100.0, jobs=(late, first), changed=(), user_comments={},
                    nodes=NODES, gpus_per_job=frozenset(), entries={})
    upsert_jobs(session, [late, first], now=1100.0, user_comments={})
    got = gate(Answers()).admit(session, polled, {JobId("1"): None,
                                                   JobId("2"): Intent(elastic=True)}, 1100.0)
    by_id = {v.id: v for v in got.jobs}
    assert by_id[JobId("1")].intent is None and not by_id[JobId("1")].restartable
    assert by_id[JobId("2")].restartable
    session.close()
