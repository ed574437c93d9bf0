"""On the real test cluster: the actuator's GPU update of pending jobs (test_pending_update.py
is the pure side).

- A job a live resize grew from 1 to 2 GPUs restarts on 2, though the policy gives the same
  job, pending, 1 GPU: the actuator leaves the count of a job a resize just released alone
  (restart.py, `Sequencer.settling`). Measured live before the fix (docs/evaluation.md): the
  actuator set it back to 1 GPU 0.8 s after the release, and it needed a second resize.
- A deadline-only job the daemon sized (4 GPUs, 8 CPUs) that is still pending and then gets
  1 GPU from the policy gets 2 CPUs with it (`MinCPUsNode`), not its old 8.

The policies are TEST DOUBLES giving fixed counts: what is tested is the daemon's commands
against Slurm 22.05.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import room_on_two_nodes, squeue
from sqlalchemy import select

from slurm_rl.config import Config, ResizeConfig
from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobOrder, JobView, Policy, Resize
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.cli import scope_rule
from slurm_rl.daemon.loop import Daemon, DaemonOptions
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import Action, ActionJob
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import SubprocessRunner
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


class GrowPendingAtOne:
    """TEST DOUBLE policy: the job pending: 1 GPU (a range job's pending count); running at
    1 GPU for 2 s: grow it to 2. `seen` records (state, GPUs) as the policy saw the job."""

    name = "grow-pending-at-one"

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self.seen: list[tuple[str, int]] = []

    def may_resize(self, job: JobView) -> bool:
        return job.name == self.job_name

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        for j in snapshot.jobs:
            if j.name != self.job_name:
                continue
            self.seen.append((j.state.value, j.gpus))
            if j.state.is_pending:
                return Decision(policy=self.name, order=(JobOrder(job_id=j.id, rank=0, gpus=1,
                                                                  reason="test"),))
            if j.state.is_running and j.gpus == 1 and j.start_time is not None \
                    and snapshot.time - j.start_time >= 2:
                return Decision(policy=self.name, resizes=(
                    Resize(job_id=j.id, gpus=2, reason="test: grow"),))
        return Decision(policy=self.name)


class SizeThenOne:
    """TEST DOUBLE policy: the job pending: 4 GPUs until the daemon sized it (it then asks for
    GPUs and is no longer held), 1 GPU after."""

    name = "size-then-one"

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        for j in snapshot.pending:
            if j.name == self.job_name:
                gpus = 1 if j.gpus > 0 and not j.held else 4
                return Decision(policy=self.name, order=(JobOrder(job_id=j.id, rank=0,
                                                                  gpus=gpus, reason="test"),))
        return Decision(policy=self.name)


@pytest.fixture
def job_name() -> Iterator[str]:
    name = f"pgu{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "-n", name], capture_output=True)


def _daemon(tmp_path: Path, name: str, policy: Policy, options: DaemonOptions) -> Daemon:
    engine = make_engine(tmp_path / "d.db")
    upgrade(engine)
    runner = SubprocessRunner()
    return Daemon(adapter=SlurmAdapter(runner, scope=scope_rule(Config(), name)),
                  executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                  policy=policy, options=options)


def _actions(daemon: Daemon, job_id: str) -> list[tuple[ActionKind, ActionStatus, str]]:
    with daemon.sessions() as session:
        return [(a.kind, a.status, " ".join(a.argv)) for a in session.scalars(
            select(Action).join(ActionJob, ActionJob.action_id == Action.id)
            .where(ActionJob.job_id == job_id).order_by(Action.id))]


def test_a_grown_job_restarts_at_its_new_count_though_pending_counts_differ(
        tmp_path: Path, job_name: str) -> None:
    room_on_two_nodes(2)
    comment = compose_comment("", Intent(gpus_min=1, gpus_max=2, elastic=True))
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", job_name, "--gres=gpu:1", "-t", "3", "-o", "/dev/null",
         f"--comment={comment}", "--wrap", "trap 'echo ck' USR1; sleep 90 & wait; sleep 90"],
        capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    policy = GrowPendingAtOne(job_name)
    # No grace: the signal, requeue, update and release in one cycle; the next cycle follows at
    # once, while the job waits for its begin time (now+1) and its count is the resize's.
    daemon = _daemon(tmp_path, job_name, policy, DaemonOptions(resize=ResizeConfig(
        grace_s=0.0, restart_cost_s=1.0, max_per_hour=4)))
    try:
        deadline = time.monotonic() + 120
        released = False
        row: list[str] = []
        while time.monotonic() < deadline:
            daemon.cycle()
            released = released or any(k is ActionKind.RESIZE_RELEASE
                                       for k, _, _ in _actions(daemon, job_id))
            row = squeue([job_id], "State,tres-per-node")[job_id]
            if released and row[0] == "RUNNING" or row[0] in ENDED:
                break
            if not released:
                time.sleep(1.0)
        actions = _actions(daemon, job_id)
    finally:
        daemon.sessions.kw["bind"].dispose()
    assert row == ["RUNNING", "gres:gpu:2"], (row, policy.seen, actions)
    release = [i for i, (k, s, _) in enumerate(actions)
               if k is ActionKind.RESIZE_RELEASE and s is ActionStatus.DONE]
    assert len(release) == 1, actions
    assert ("PENDING", 2) in policy.seen, policy.seen  # the policy gave it 1 while pending
    assert not [a for k, _, a in actions[release[0]:] if k is ActionKind.TRES_PER_NODE], actions


def test_a_sized_pending_job_s_cpus_follow_its_new_gpu_count(tmp_path: Path,
                                                             job_name: str) -> None:
    comment = compose_comment("", Intent(deadline=time.time() + 3600, gpus_min=1, gpus_max=4))
    # Held (awaiting sizing) and not eligible for 10 minutes: it stays pending once released.
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--begin=now+600", "-J", job_name, "-t", "3",
         "-o", "/dev/null", f"--comment={comment}", "--wrap", "sleep 5"],
        capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    daemon = _daemon(tmp_path, job_name, SizeThenOne(job_name), DaemonOptions())
    seen: list[list[str]] = []
    try:
        for _ in range(4):
            daemon.cycle()
            seen.append(squeue([job_id], "State,tres-per-node,MinCpus")[job_id])
            if seen[-1][1:] == ["gres:gpu:1", "2"]:
                break
            time.sleep(0.5)
        actions = _actions(daemon, job_id)
    finally:
        daemon.sessions.kw["bind"].dispose()
    assert ["PENDING", "gres:gpu:4", "8"] in seen, (seen, actions)  # as sized
    assert seen[-1] == ["PENDING", "gres:gpu:1", "2"], (seen, actions)
    update = [a for k, s, a in actions if k is ActionKind.TRES_PER_NODE and s is
              ActionStatus.DONE]
    assert update == [f"scontrol update JobId={job_id} TresPerNode=gres:gpu:1 MinCPUsNode=2"], \
        actions


class FixedCount:
    """TEST DOUBLE policy: the job, pending, gets `gpus` (whatever its range says)."""

    name = "fixed-count"

    def __init__(self, job_name: str, gpus: int) -> None:
        self.job_name, self.gpus = job_name, gpus

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name, order=tuple(
            JobOrder(job_id=j.id, rank=0, gpus=self.gpus, reason="test")
            for j in snapshot.pending if j.name == self.job_name))


def test_a_pending_job_s_gpu_count_stays_inside_its_range(tmp_path: Path,
                                                          job_name: str) -> None:
    # Range 1-2, not eligible for 10 minutes (it stays pending). A policy asking 4 GPUs for it
    # is not followed (the daemon acts as operator: the owner's range bounds it); 2 is.
    comment = compose_comment("", Intent(gpus_min=1, gpus_max=2))
    out = subprocess.run(
        ["sbatch", "--parsable", "--begin=now+600", "-J", job_name, "--gres=gpu:1", "-t", "3",
         "-o", "/dev/null", f"--comment={comment}", "--wrap", "sleep 5"],
        capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    policy = FixedCount(job_name, 4)
    daemon = _daemon(tmp_path, job_name, policy, DaemonOptions())
    try:
        daemon.cycle()
        wide = squeue([job_id], "State,tres-per-node")[job_id]
        policy.gpus = 2
        daemon.cycle()
        inside = squeue([job_id], "State,tres-per-node")[job_id]
        actions = _actions(daemon, job_id)
    finally:
        daemon.sessions.kw["bind"].dispose()
    assert wide == ["PENDING", "gres:gpu:1"], actions
    assert inside == ["PENDING", "gres:gpu:2"], actions
    updates = [a for k, s, a in actions if k is ActionKind.TRES_PER_NODE]
    assert updates == [f"scontrol update JobId={job_id} TresPerNode=gres:gpu:2"], actions
