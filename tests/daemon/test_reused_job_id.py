"""A job id Slurm gives again (a slurmctld started with fresh state numbers jobs from 1; ids
wrap at MaxJobId) is another job: the daemon believes of it only its own intent. Daemon cycles
on squeue output recorded from the 22.05 test cluster, the second with job 4120 submitted anew
by another user (FAKE runner: recorded output, empty answers to the gate's queries)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from slurm_rl import policies
from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobId
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.handle import DaemonOptions
from slurm_rl.daemon.loop import Daemon
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import SQUEUE_FIELDS
from slurm_rl.slurm.runner import CommandResult

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_poll import END, RECORDED, SQUEUE, Recorded  # noqa: E402

JOB = "4120"
OTHER = "{rl1:d=1796999999,g=2-3,s=500,m=resnet50}"


class Quiet(Recorded):
    """The recorded squeue and sinfo; every other command (the gate's scontrol show config,
    show partition, sacctmgr) answers nothing, as on a cluster without limits."""

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            env: object = None, input: str | None = None) -> CommandResult:
        if args[0] in ("squeue", "sinfo"):
            return super().run(args, timeout_s=timeout_s, env=env)  # type: ignore[arg-type]
        return CommandResult(args=tuple(args), returncode=0, stdout="", stderr="",
                             duration_s=0.0)


class Seeing:
    """fifo, remembering the intent each snapshot showed for JOB."""

    name = "fifo"

    def __init__(self) -> None:
        self.inner = policies.make("fifo")
        self.seen: list[Intent | None] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.seen.append(next(j.intent for j in snapshot.jobs if j.id == JobId(JOB)))
        return self.inner.decide(snapshot)


def resubmitted(text: str) -> str:
    """JOB submitted again, later, by another user, with another intent."""
    out = []
    for chunk in text.split(END)[:-1]:
        fields = chunk.split(RECORDED.field_mark)
        if fields[0] == JOB:
            fields[SQUEUE_FIELDS.index("UserName")] = "bo"
            fields[SQUEUE_FIELDS.index("SubmitTime")] = "2026-12-02T09:00:00"
            fields[SQUEUE_FIELDS.index("Comment")] = OTHER
        out.append(RECORDED.field_mark.join(fields) + END)
    return "".join(out)


def test_a_reused_job_id_is_decided_on_with_its_own_intent(tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    runner = Quiet(SQUEUE)
    policy = Seeing()
    daemon = Daemon(adapter=SlurmAdapter(runner, framing=lambda: RECORDED),
                    executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                    policy=policy, options=DaemonOptions(dry_run=True), clock=lambda: 1.8e9)
    daemon.cycle()
    old = policy.seen[-1]
    assert old is not None and (old.gpus_min, old.gpus_max) == (1, 4)
    runner.squeue = resubmitted(SQUEUE)
    daemon.cycle()
    new = policy.seen[-1]
    assert new is not None
    assert (new.deadline, new.gpus_min, new.gpus_max, new.total_steps) == (
        1796999999.0, 2, 3, 500)
    engine.dispose()


def test_a_value_set_for_the_old_job_is_set_again_for_the_new_one(tmp_path: Path) -> None:
    """The daemon remembers the queue value it gave each pending job, to not repeat it; the
    new job with the old one's id has not been given it."""
    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    runner = Quiet(SQUEUE)
    daemon = Daemon(adapter=SlurmAdapter(runner, framing=lambda: RECORDED),
                    executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                    policy=policies.make("fifo"), clock=lambda: 1.8e9)
    first = daemon.cycle()
    assert (first.commands, first.jobs_updated) == (1, 1)
    assert daemon.cycle().commands == 0  # given already
    runner.squeue = resubmitted(SQUEUE)
    again = daemon.cycle()
    assert (again.commands, again.jobs_updated) == (1, 1)
    engine.dispose()
