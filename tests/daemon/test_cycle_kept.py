"""A steady-state daemon cycle does again only what changed: the gate vets only changed views
(gate.py), `deadline` keeps each reason once read and the JobOrders it has not changed
(policies/deadline), and the decision's record skips, unread, an entry that is the very JobOrder
recorded last cycle (loop.py). Over a sequence of cycles in which jobs are submitted, finish,
vanish, report progress, are given GPUs, one writes a malformed comment, and the clock passes
planned starts and deadlines, the same daemon with all of that forgotten before every cycle
(everything worked out afresh) stores the same decision entries and runs the same commands.
Daemon cycles on squeue records shaped like those recorded from the 22.05 test cluster (FAKE
runner: recorded-shape output; scontrol's GPU updates show in the next squeue)."""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import select

from slurm_rl import policies
from slurm_rl.core import Intent, Progress
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.guarded import GuardedPolicy
from slurm_rl.daemon.loop import Daemon
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import Action, DecisionEntry, DecisionRow
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import SQUEUE_FIELDS
from slurm_rl.slurm.runner import CommandResult
from slurm_rl.submit.intent import compose_comment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_poll import END, RECORDED, SQUEUE, Recorded  # noqa: E402

T0 = 1.8e9
FIELD = {name: i for i, name in enumerate(SQUEUE_FIELDS)}
TEMPLATE = next(c for c in SQUEUE.split(END) if c.startswith("4120")).split(RECORDED.field_mark)


class Queue(Recorded):
    """A FAKE runner: squeue prints `self.records` (one list of fields per job), sinfo the
    recorded nodes; an scontrol update of TresPerNode changes those jobs' records, as Slurm
    does; every other command (the gate's reads) answers nothing."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        super().__init__("")
        self.records = records

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            env: object = None, input: str | None = None) -> CommandResult:
        if args[0] == "squeue":
            self.squeue = "".join(RECORDED.field_mark.join(f) + END
                                  for f in self.records.values())
        if args[0] in ("squeue", "sinfo"):
            return super().run(args, timeout_s=timeout_s, env=env)  # type: ignore[arg-type]
        for line in (input or "").splitlines():
            words = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            if "TresPerNode" in words:
                for jid in words["JobId"].split(","):
                    if jid in self.records:
                        self.records[jid][FIELD["tres-per-node"]] = words["TresPerNode"]
        return CommandResult(args=tuple(args), returncode=0, stdout="", stderr="",
                             duration_s=0.0)


def record(jid: int, comment: str, gpus: int, state: str = "PENDING") -> list[str]:
    f = list(TEMPLATE)
    f[FIELD["JobID"]] = f[FIELD["ArrayJobID"]] = str(jid)
    f[FIELD["tres-per-node"]] = f"gres:gpu:{gpus}"
    f[FIELD["Comment"]] = comment
    f[FIELD["State"]] = state
    f[FIELD["Name"]] = f"job{jid}"
    f[FIELD["Reason"]] = "JobHeldUser" if jid % 3 == 0 else "Priority"  # a third held
    return f


def intent(rng: random.Random, now: float) -> Intent:
    kind = rng.randrange(4)
    if kind == 0:
        return Intent(deadline=now + rng.choice((300, 3600, 20_000)), total_steps=5000,
                      model="resnet50", hard=rng.random() < 0.3)
    if kind == 1:
        return Intent(gpus_min=1, gpus_max=rng.choice((2, 4, 8)))
    if kind == 2:
        return Intent(deadline=now + 7200)  # no steps: duration unknown
    return Intent()


def daemon(tmp_path: Path, name: str, records: dict[str, list[str]],
           clock: list[float]) -> tuple[Daemon, Any]:
    engine = make_engine(tmp_path / f"{name}.db")
    upgrade(engine)
    runner = Queue(records)
    policy = GuardedPolicy("deadline", lambda: policies.make("deadline"), policies.make("fifo"))
    return Daemon(adapter=SlurmAdapter(runner, framing=lambda: RECORDED),
                  executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                  policy=policy, clock=lambda: clock[0]), engine


def stored(engine: Any) -> tuple[list[Any], list[Any]]:
    with make_session_factory(engine)() as s:
        entries = [(d.cycle_id, e.job_id, e.rank, e.gpus, e.reason) for e, d in s.execute(
            select(DecisionEntry, DecisionRow).join(
                DecisionRow, DecisionRow.id == DecisionEntry.decision_id)
            .order_by(DecisionEntry.id)).all()]
        actions = [(a.cycle_id, a.kind, tuple(a.argv), a.status) for a in s.execute(
            select(Action).order_by(Action.id)).scalars()]
    return entries, actions


def test_kept_work_stores_and_acts_as_work_done_afresh(tmp_path: Path) -> None:
    rng = random.Random(7)
    clock = [T0]
    records = {str(1000 + i): record(1000 + i, compose_comment("", intent(rng, T0)),
                                     1 + i % 4) for i in range(60)}
    kept, kept_db = daemon(tmp_path, "kept", {k: list(v) for k, v in records.items()}, clock)
    fresh, fresh_db = daemon(tmp_path, "fresh", {k: list(v) for k, v in records.items()}, clock)
    queues = [d.adapter.runner.records for d in (kept, fresh)]  # type: ignore[attr-defined]
    next_id = 2000
    reused = 0
    for step in range(14):
        if step:
            clock[0] += rng.choice((0.0, 60.0, 600.0, 4000.0))
            change = rng.randrange(5)
            for q in queues:  # the same change to both clusters
                r = random.Random(step)
                ids = sorted(q)
                if change == 0:  # submitted, one of them urgent
                    q[str(next_id)] = record(next_id, compose_comment("", Intent(
                        deadline=clock[0] + 900, total_steps=100, model="resnet50")), 1)
                    q[str(next_id + 1)] = record(next_id + 1, compose_comment(
                        "", intent(r, clock[0])), 2)
                elif change == 1:  # finished, and gone from squeue
                    q[ids[r.randrange(len(ids))]][FIELD["State"]] = "CANCELLED"
                    del q[ids[r.randrange(len(ids))]]
                elif change == 2:  # progress reported in the comment
                    jid = ids[r.randrange(len(ids))]
                    q[jid][FIELD["Comment"]] = compose_comment("", Intent(
                        total_steps=5000, model="resnet50"), Progress(
                        steps_done=r.randrange(5000), steps_total=5000, rate=20.0))
                elif change == 3:  # a malformed comment: that job only is left out
                    q[ids[r.randrange(len(ids))]][FIELD["Comment"]] = "{rl1:d=soon,g=9-x}"
            if change == 0:
                next_id += 2
        fresh._recorded = {}  # forget all kept work: everything afresh
        fresh.gate._vetted = {}
        assert isinstance(fresh.policy, GuardedPolicy) and fresh.policy.primary is not None
        fresh.policy.primary.reset()  # type: ignore[attr-defined]
        before = dict(kept._recorded)
        a, b = kept.cycle(), fresh.cycle()
        assert (a.ranked, a.entries_stored, a.commands, a.jobs_updated) == (
            b.ranked, b.entries_stored, b.commands, b.jobs_updated)
        reused += sum(1 for j, o in kept._recorded.items() if before.get(j) is o)
    assert stored(kept_db) == stored(fresh_db)
    assert reused > 100  # most entries of most cycles were kept, not worked out again
    kept_db.dispose()
    fresh_db.dispose()
