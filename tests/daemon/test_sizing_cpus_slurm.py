"""On the real test cluster: the CPUs of deadline-only jobs (daemon/sizing.py, resize.py).

- A job the daemon sized to 6 GPUs on 2 nodes (6 CPUs each) and then shrinks to 2 GPUs by a
  resize runs on 1 node with 4 CPUs. Without its CPUs in the same update Slurm keeps the job's
  12 CPUs, which no 8-CPU node holds, and starts it on 2 nodes again, with 4 GPUs (measured by
  hand on this cluster before the fix).
- [sizing] cpus_from_history: a job whose owner ran the model before gets that run's CPUs per
  GPU. The test cluster has no accounting (`sacct`: "Slurm accounting storage is disabled"):
  the earlier run's `sacct` line is answered by a FAKE wrapped around the real commands, and a
  model whose earlier run only real `sacct` is asked about falls back to the site's value.

The policy in both is a TEST DOUBLE giving fixed counts: what is tested is the daemon's sizing
and resize commands against Slurm 22.05, not a policy.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from cluster_jobs import squeue
from sqlalchemy import select

from slurm_rl.config import Config, ResizeConfig, SizingConfig
from slurm_rl.core import (
    ClusterSnapshot,
    Decision,
    Intent,
    JobId,
    JobOrder,
    JobState,
    JobView,
    Policy,
    Resize,
)
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.cli import scope_rule
from slurm_rl.daemon.loop import Daemon, DaemonOptions
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import Action, ActionJob
from slurm_rl.db.repo import upsert_jobs
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import CommandResult, SubprocessRunner
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ELASTIC_SCRIPT = """#!/bin/bash
trap 'echo checkpoint' USR1
n=0
while [ "$n" -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
"""
"""An elastic job's stand-in: survives the checkpoint signal (USR1) and runs ~2 minutes."""


class SizeThenShrink:
    """TEST DOUBLE policy: the job pending: 6 GPUs (until it is shrunk); running at 6 for 2 s:
    a resize to 2."""

    name = "size-then-shrink"

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self.shrunk = False

    def may_resize(self, job: JobView) -> bool:
        return job.name == self.job_name

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        for j in snapshot.jobs:
            if j.name != self.job_name:
                continue
            if j.state.is_pending:
                return Decision(policy=self.name, order=(JobOrder(
                    job_id=j.id, rank=0, gpus=None if self.shrunk else 6, reason="test"),))
            if j.state.is_running and j.gpus == 6 and j.start_time is not None \
                    and snapshot.time - j.start_time >= 2:
                self.shrunk = True
                return Decision(policy=self.name, resizes=(
                    Resize(job_id=j.id, gpus=2, reason="test: shrink"),))
        return Decision(policy=self.name)


class FixedCount:
    """TEST DOUBLE policy: every pending job of the prefix gets 2 GPUs."""

    name = "fixed-count"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name, order=tuple(
            JobOrder(job_id=j.id, rank=r, gpus=2, reason="test")
            for r, j in enumerate(j for j in snapshot.pending if j.name.startswith(self.prefix))))


class AnswersSacct(SubprocessRunner):
    """The real commands, but `sacct` for the jobs in `alloc` answered by a FAKE (the test
    cluster has no accounting); other `sacct` calls reach the real one."""

    def __init__(self, alloc: dict[str, str]) -> None:
        super().__init__()
        self.alloc = alloc

    def run(self, args: Sequence[str], *, timeout_s: float | None = None,
            input: str | None = None, env: Mapping[str, str | None] | None = None
            ) -> CommandResult:
        argv = tuple(args)
        if argv[0] == "sacct" and "-j" in argv and argv[argv.index("-j") + 1] in self.alloc:
            return CommandResult(args=argv, returncode=0, duration_s=0.0, stderr="",
                                 stdout=self.alloc[argv[argv.index("-j") + 1]] + "\n")
        return super().run(args, timeout_s=timeout_s, input=input, env=env)


SUBMITTED: list[str] = []
"""The jobs a test submitted, cancelled by id after it (scancel -n takes one name only)."""


@pytest.fixture
def prefix() -> Iterator[str]:
    yield f"szc{uuid.uuid4().hex[:8]}"
    if SUBMITTED:
        subprocess.run(["scancel", *SUBMITTED], capture_output=True)
        SUBMITTED.clear()


def _submit(name: str, intent: Intent, script: Path) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "-J", name, "-t", "5", "-o", "/dev/null",
         "-e", "/dev/null", f"--comment={compose_comment('', intent)}", str(script)],
        capture_output=True, text=True, check=True)
    SUBMITTED.append(out.stdout.strip().split(";")[0])
    return SUBMITTED[-1]


def _daemon(db: Path, prefix: str, policy: Policy, runner: SubprocessRunner,
            options: DaemonOptions) -> Daemon:
    engine = make_engine(db)
    upgrade(engine)
    return Daemon(adapter=SlurmAdapter(runner, scope=scope_rule(Config(), prefix)),
                  executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                  policy=policy, options=options)


def _room(timeout_s: float = 120.0) -> None:
    """Other sessions share the cluster: wait for 2 nodes with 3 GPUs and 6 CPUs free."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = [n for n in SlurmAdapter().poll_nodes()
                if n.gpus_free >= 3 and n.cpus_total - n.cpus_alloc >= 6]
        if len(free) >= 2:
            return
        if time.monotonic() > deadline:
            pytest.fail("the shared cluster stayed too busy for a 2-node job")
        time.sleep(2)


def test_a_sized_job_shrunk_by_a_resize_takes_its_cpus_along(tmp_path: Path,
                                                             prefix: str) -> None:
    _room()
    script = tmp_path / "job.sh"
    script.write_text(ELASTIC_SCRIPT)
    job_id = _submit(prefix, Intent(deadline=time.time() + 3600, gpus_min=1, gpus_max=8,
                                    elastic=True, model="resnet50"), script)
    daemon = _daemon(tmp_path / "d.db", prefix, SizeThenShrink(prefix), SubprocessRunner(),
                     DaemonOptions(resize=ResizeConfig(grace_s=1.0, restart_cost_s=1.0,
                                                       max_per_hour=4)))
    seen: list[list[str]] = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        daemon.cycle()
        row = squeue([job_id], "State,tres-per-node,NumCPUs,NumNodes")[job_id]
        if not seen or seen[-1] != row:
            seen.append(row)
        if row[0] == "RUNNING" and row[1] == "gres:gpu:2" or row[0] not in ("PENDING",
                                                                          "RUNNING"):
            break
        time.sleep(1.0)
    with daemon.sessions() as session:
        actions = [(a.kind, a.status, " ".join(a.argv)) for a in session.scalars(
            select(Action).join(ActionJob, ActionJob.action_id == Action.id)
            .where(ActionJob.job_id == job_id).order_by(Action.id))]
    assert ["RUNNING", "gres:gpu:3", "12", "2"] in seen, (seen, actions)  # as sized
    assert seen[-1] == ["RUNNING", "gres:gpu:2", "4", "1"], (seen, actions)  # shrunk, CPUs too
    size = [a for k, s, a in actions if k is ActionKind.SIZE_RELEASE and s is ActionStatus.DONE]
    assert size and "TresPerNode=gres:gpu:3 NumNodes=2 MinCPUsNode=6" in size[0], actions
    release = [a for k, s, a in actions
               if k is ActionKind.RESIZE_RELEASE and s is ActionStatus.DONE]
    assert release and "TresPerNode=gres:gpu:2 NumNodes=1 MinCPUsNode=4" in release[0], actions


def test_cpus_per_gpu_from_the_owners_earlier_run_of_the_model(tmp_path: Path,
                                                               prefix: str) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name
    db = tmp_path / "d.db"
    runner = AnswersSacct({"990001": "billing=6,cpu=6,gres/gpu=2,mem=4G,node=1"})
    daemon = _daemon(db, prefix, FixedCount(prefix), runner,
                     DaemonOptions(sizing=SizingConfig(cpus_from_history=True)))
    # Models of this test only: the daemon records every job squeue shows, and other tests'
    # runs (by the same user) must not be the latest of the model.
    models = (f"{prefix}-a", f"{prefix}-b")
    with daemon.sessions() as session:  # earlier runs the daemon saw complete
        upsert_jobs(session, [JobView(
            id=JobId(i), user=user, name="earlier", partition="gpu", state=JobState.COMPLETED,
            submit_time=time.time() - 900, end_time=time.time() - 600, gpus=2,
            intent=Intent(model=model, gpus_min=1, gpus_max=8))
            for i, model in zip(("990001", "990002"), models, strict=True)], now=time.time())
        session.commit()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    ids = [_submit(prefix + s, Intent(deadline=time.time() + 3600, gpus_min=1, gpus_max=8,
                                      model=model), script)
           for s, model in zip("ab", models, strict=True)]
    daemon.cycle()
    got = squeue(ids, "tres-per-node,NumCPUs")
    # The first: the earlier run's 6 CPUs over 2 GPUs. The second: real sacct has no answer
    # (no accounting here): the site's value, 8 CPUs over 4 GPUs a node.
    assert got[ids[0]] == ["gres:gpu:2", "6"], got
    assert got[ids[1]] == ["gres:gpu:2", "4"], got
