"""On the real test cluster: the daemon grows a running elastic job, then shrinks it; the job
checkpoints on the signal, resumes from its checkpoint each time and completes.

The policy here is a TEST DOUBLE that asks for the two resizes (grow to 3 GPUs, then back to
1): what is tested is the daemon's resize path (judge, signal, grace, requeuehold, update,
release) against Slurm 22.05, and the job's view of it.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_jobs import room_on_two_nodes
from sqlalchemy import select

from slurm_rl.config import Config, ResizeConfig
from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobId, JobOrder, JobView, Resize
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

STEPS = 100
"""The job counts to this, 0.1 s a step (~10 s of work), checkpointing on SIGUSR1."""

JOB_SCRIPT = """#!/bin/bash
d={dir}
n=0
[ -f "$d/ck" ] && n=$(cat "$d/ck")
echo "start n=$n gpus=$CUDA_VISIBLE_DEVICES t=$(date +%s.%N)" >> "$d/log"
trap 'echo $n > "$d/ck.tmp" && mv "$d/ck.tmp" "$d/ck"; echo "checkpoint n=$n" >> "$d/log"' USR1
while [ "$n" -lt {steps} ]; do sleep 0.1; n=$((n + 1)); done
echo "done n=$n" >> "$d/log"
"""


class GrowThenShrink:
    """TEST DOUBLE policy: once the job has run 3 s at 1 GPU, 3 GPUs; once it has run 3 s at 3,
    1 GPU again; its pending runs first."""

    name = "grow-then-shrink"

    def __init__(self, job_name: str) -> None:
        self.job_name = job_name
        self.grown = False

    def may_resize(self, job: JobView) -> bool:
        return job.name == self.job_name

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        for j in snapshot.jobs:
            if j.name != self.job_name:
                continue
            if j.state.is_pending:
                return Decision(policy=self.name, order=(JobOrder(job_id=j.id, rank=0),))
            if not j.state.is_running or j.start_time is None:
                continue
            self.grown |= j.gpus == 3
            target = 1 if self.grown else 3
            if j.gpus != target and snapshot.time - j.start_time >= 3:
                return Decision(policy=self.name, resizes=(
                    Resize(job_id=j.id, gpus=target, reason="test: grow, then shrink"),))
        return Decision(policy=self.name)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    d.chmod(0o777)
    return d


@pytest.fixture
def job_name() -> Iterator[str]:
    name = f"rsz{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "-n", name], capture_output=True)


def _state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
                         capture_output=True, text=True)
    return out.stdout.strip()


def test_an_elastic_job_is_grown_then_shrunk_and_resumes_from_its_checkpoint(
        tmp_path: Path, workdir: Path, job_name: str) -> None:
    room_on_two_nodes(3)
    script = tmp_path / "elastic.sh"
    script.write_text(JOB_SCRIPT.format(dir=workdir, steps=STEPS))
    comment = compose_comment("", Intent(gpus_min=1, gpus_max=3, elastic=True))
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", job_name, "--gres=gpu:1", "-t", "5", "-o", "/dev/null",
         "-e", "/dev/null", f"--comment={comment}", str(script)],
        capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]

    engine = make_engine(tmp_path / "d.db")
    upgrade(engine)
    runner = SubprocessRunner()
    daemon = Daemon(
        adapter=SlurmAdapter(runner, scope=scope_rule(Config(), job_name)),
        executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
        policy=GrowThenShrink(job_name),
        options=DaemonOptions(resize=ResizeConfig(grace_s=2.0, restart_cost_s=1.0,
                                                  max_per_hour=4)))
    deadline = time.monotonic() + 180
    state = ""
    try:
        while time.monotonic() < deadline:
            daemon.cycle()
            state = _state(job_id)
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            time.sleep(1.0)
        with daemon.sessions() as session:
            actions = [(a.kind, a.status, a.started_at) for a in session.scalars(
                select(Action).join(ActionJob, ActionJob.action_id == Action.id)
                .where(ActionJob.job_id == job_id).order_by(Action.id))]
    finally:
        engine.dispose()

    log = (workdir / "log").read_text().splitlines()
    assert state == "COMPLETED", (state, log, actions)
    resize_kinds = [(k, s) for k, s, _ in actions
                    if k in (ActionKind.RESIZE_SIGNAL, ActionKind.REQUEUE_HOLD,
                             ActionKind.RESIZE_RELEASE)]
    assert resize_kinds == [
        (ActionKind.RESIZE_SIGNAL, ActionStatus.DONE), (ActionKind.REQUEUE_HOLD, ActionStatus.DONE),
        (ActionKind.RESIZE_RELEASE, ActionStatus.DONE)] * 2, actions

    starts = [dict(w.split("=", 1) for w in line.split()[1:]) for line in log
              if line.startswith("start ")]
    assert [len(s["gpus"].split(",")) for s in starts] == [1, 3, 1], log
    # Each run resumes from the checkpoint written on the signal just before its requeue.
    checkpoints = [int(line.split("=")[1]) for line in log if line.startswith("checkpoint ")]
    assert [int(s["n"]) for s in starts] == [0, *checkpoints[-2:]], log
    assert 0 < checkpoints[-2] < checkpoints[-1] < STEPS
    assert log[-1] == f"done n={STEPS}"

    # The restart after a requeue: how long from `requeuehold` to the job's new start.
    holds = [t for k, _, t in actions if k is ActionKind.REQUEUE_HOLD]
    gaps = [float(s["t"]) - h for s, h in zip(starts[1:], holds, strict=True)]
    assert all(0 < g < 15 for g in gaps), gaps
    print(f"requeuehold -> restarted: {', '.join(f'{g:.2f}s' for g in gaps)}")

    ctld = Path(os.environ.get("SLURM_RL_CLUSTER_DIR", "/var/tmp/slurm-rl-cluster"),
                "log", "slurmctld.log")
    if ctld.exists():
        text = ctld.read_text(errors="replace")
        assert f"Killing non-startable batch JobId={job_id}:" not in text


class OrdersNothing:
    """TEST DOUBLE policy: decides nothing (the restarted daemon only recovers)."""

    name = "orders-nothing"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return Decision(policy=self.name)


def test_a_job_left_held_by_an_interrupted_resize_is_released_by_the_next_daemon(
        tmp_path: Path, job_name: str) -> None:
    comment = compose_comment("", Intent(gpus_min=1, gpus_max=2, elastic=True))
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", job_name, "--gres=gpu:1", "-t", "2", "-o", "/dev/null",
         f"--comment={comment}", "--wrap", "sleep 60"], capture_output=True, text=True,
        check=True)
    job_id = out.stdout.strip().split(";")[0]
    engine = make_engine(tmp_path / "d.db")
    upgrade(engine)
    runner = SubprocessRunner()

    def daemon() -> Daemon:
        return Daemon(adapter=SlurmAdapter(runner, scope=scope_rule(Config(), job_name)),
                      executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
                      policy=OrdersNothing())

    try:
        first = daemon()
        deadline = time.monotonic() + 60
        while _state(job_id) != "RUNNING" and time.monotonic() < deadline:
            first.cycle()
            time.sleep(0.5)
        first.cycle()
        # The first daemon requeues the job held and dies before releasing it.
        with first.sessions() as session:
            assert first.resizer._run_logged(
                session, ActionKind.REQUEUE_HOLD, JobId(job_id),
                ("scontrol", "requeuehold", job_id), None, cycle_id=99, decision_id=None)
        assert first.resizer._wait_pending(JobId(job_id))
        time.sleep(2)
        assert _state(job_id) == "PENDING"  # held: it would wait forever
        second = daemon()
        second.cycle()
        deadline = time.monotonic() + 30
        while _state(job_id) != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _state(job_id) == "RUNNING"
        with second.sessions() as session:
            kinds = [(a.kind, a.status) for a in session.scalars(
                select(Action).join(ActionJob, ActionJob.action_id == Action.id)
                .where(ActionJob.job_id == job_id).order_by(Action.id))]
        assert kinds[-2:] == [(ActionKind.REQUEUE_HOLD, ActionStatus.DONE),
                              (ActionKind.RESIZE_RELEASE, ActionStatus.DONE)]
    finally:
        engine.dispose()
