"""On the real test cluster: the daemon applies a real policy's preemptions. `tiresias` (with
a small threshold, 4 GPU-s, and no promotion) asks to stop two running jobs for two newer ones;
the elastic one checkpoints on the signal, is requeued, waits behind the job that preempted
it, restarts from its checkpoint and completes; the one that did not opt in is never requeued
(the cycle's notes say why).

Other sessions share the cluster, so the policy is shown a view of its own four jobs on the
two nodes they are pinned to (`-w`): OwnJobsView, a TEST DOUBLE around the real policy (the
daemon acts on Slurm's full view).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from slurm_rl.config import Config, ResizeConfig
from slurm_rl.core import ClusterSnapshot, Decision, Intent, Policy
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.cli import scope_rule
from slurm_rl.daemon.loop import Daemon, DaemonOptions
from slurm_rl.daemon.preempt import NOT_OPTED_IN
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.models import Action, ActionJob, DecisionRow
from slurm_rl.policies import make
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import SubprocessRunner
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 60
"""The elastic job counts to this, 0.1 s a step (~6 s of work), checkpointing on SIGUSR1."""

JOB_SCRIPT = """#!/bin/bash
d={dir}
n=0
[ -f "$d/ck" ] && n=$(cat "$d/ck")
echo "start n=$n t=$(date +%s.%N)" >> "$d/log"
trap 'echo $n > "$d/ck.tmp" && mv "$d/ck.tmp" "$d/ck"; echo "checkpoint n=$n" >> "$d/log"' USR1
while [ "$n" -lt {steps} ]; do sleep 0.1; n=$((n + 1)); done
echo "done n=$n" >> "$d/log"
"""

RESTARTS = (ActionKind.PREEMPT_SIGNAL, ActionKind.PREEMPT_REQUEUE, ActionKind.PREEMPT_RELEASE,
            ActionKind.RESIZE_SIGNAL, ActionKind.REQUEUE_HOLD, ActionKind.RESIZE_RELEASE)


class OwnJobsView:
    """TEST DOUBLE: shows the real `policy` only this test's jobs and the nodes they are pinned
    to (the shared cluster's other jobs would make its choice unpredictable), each shown as
    restartable: a policy that asks to requeue a job that did not opt in, which the daemon
    must refuse (the real policy, told, would not ask)."""

    def __init__(self, policy: Policy, prefix: str, nodes: tuple[str, ...]) -> None:
        self.policy = policy
        self.name = policy.name
        self.prefix = prefix
        self.nodes = nodes

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return self.policy.decide(replace(
            snapshot, jobs=tuple(replace(j, restartable=True) for j in snapshot.jobs
                                 if j.name.startswith(self.prefix)),
            nodes=tuple(n for n in snapshot.nodes if n.name in self.nodes)))


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"pre{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "-n", ",".join(f"{name}{s}" for s in "vnpq")],
                   capture_output=True)


def _squeue(job_id: str, fields: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", fields],
                         capture_output=True, text=True)
    return " ".join(out.stdout.split())


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def _free_nodes(count: int, timeout_s: float = 60.0) -> tuple[str, ...]:
    """Nodes with all their GPUs free (other sessions share the cluster)."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = sorted(n.name for n in SlurmAdapter().poll_nodes()
                      if n.state.usable and n.gpus_total == 4 and n.gpus_free == 4)
        if len(free) >= count:
            return tuple(free[:count])
        if time.monotonic() > deadline:
            pytest.fail(f"the shared cluster kept fewer than {count} free nodes: {free}")
        time.sleep(1)


def _submit(name: str, node: str, comment: str, *args: str) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "-J", name, "-w", node, "--gres=gpu:4", "-t", "2",
         "-o", "/dev/null", "-e", "/dev/null", f"--comment={comment}", *args],
        capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


def test_the_daemon_preempts_an_elastic_job_for_one_the_policy_ranks_first(
        tmp_path: Path, prefix: str) -> None:
    x, y = _free_nodes(2)
    work = tmp_path / "job"
    work.mkdir()
    work.chmod(0o777)
    script = tmp_path / "elastic.sh"
    script.write_text(JOB_SCRIPT.format(dir=work, steps=STEPS))
    elastic = compose_comment("", Intent(gpus_min=1, gpus_max=4, elastic=True))
    rigid = compose_comment("", Intent())
    victim = _submit(prefix + "v", x, elastic, str(script))
    fixed = _submit(prefix + "n", y, rigid, "--wrap", "sleep 5")

    engine = make_engine(tmp_path / "d.db")
    upgrade(engine)
    runner = SubprocessRunner()
    policy = make("tiresias", thresholds=(4.0,), promote_knob=0.0)
    daemon = Daemon(
        adapter=SlurmAdapter(runner, scope=scope_rule(Config(), prefix)),
        executor=ScontrolExecutor(runner), sessions=make_session_factory(engine),
        policy=OwnJobsView(policy, prefix, (x, y)),
        options=DaemonOptions(resize=ResizeConfig(grace_s=1.0, max_per_hour=1)))
    try:
        deadline = time.monotonic() + 20
        while not all(_squeue(j, "State") == "RUNNING" for j in (victim, fixed)):
            assert time.monotonic() < deadline, (_squeue(victim, "State"), _squeue(fixed,
                                                                                  "State"))
            daemon.cycle()
            time.sleep(0.5)
        time.sleep(1.5)  # both past 4 GPU-s: tiresias's lower queue
        # The view does not say `-w`: tiresias would stop the victim again for `second` if
        # that were still waiting when the victim runs again (the cap, 1 an hour, would refuse).
        first = _submit(prefix + "p", x, rigid, "--wrap", "sleep 4")
        second = _submit(prefix + "q", y, rigid, "--wrap", "sleep 1")
        deadline = time.monotonic() + 45
        while _squeue(victim, "State") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            assert time.monotonic() < deadline, (work / "log").read_text()
            daemon.cycle()
            time.sleep(0.5)
        for j in (first, second, fixed):
            while _squeue(j, "State") in ("PENDING", "RUNNING", "COMPLETING"):
                assert time.monotonic() < deadline, _squeue(j, "State")
                time.sleep(0.5)
        with daemon.sessions() as session:
            actions = {j: [(a.kind, a.status) for a in session.scalars(
                select(Action).join(ActionJob, ActionJob.action_id == Action.id)
                .where(ActionJob.job_id == j).order_by(Action.id))] for j in (victim, fixed)}
            notes = [n for row in session.scalars(select(DecisionRow)) for n in row.notes]
    finally:
        engine.dispose()

    # The victim: signalled, requeued, released — once — and it completed.
    restart = [(k, s) for k, s in actions[victim] if k in RESTARTS]
    assert restart == [(ActionKind.PREEMPT_SIGNAL, ActionStatus.DONE),
                       (ActionKind.PREEMPT_REQUEUE, ActionStatus.DONE),
                       (ActionKind.PREEMPT_RELEASE, ActionStatus.DONE)], actions
    assert _squeue(victim, "State,RestartCnt") == "COMPLETED 1"
    log = (work / "log").read_text().splitlines()
    starts = [dict(w.split("=", 1) for w in line.split()[1:]) for line in log
              if line.startswith("start ")]
    checkpoints = [int(line.split("=")[1]) for line in log if line.startswith("checkpoint ")]
    # It resumed from the checkpoint it wrote on the signal, and finished the count.
    assert [int(s["n"]) for s in starts] == [0, checkpoints[-1]], log
    assert 0 < checkpoints[-1] < STEPS and log[-1] == f"done n={STEPS}", log
    # The job that preempted it ran before the victim's second run began.
    ran = _squeue(first, "State,StartTime").split()
    assert ran[0] == "COMPLETED", ran
    assert _epoch(ran[1]) <= float(starts[1]["t"]) + 1.0, (ran, starts)
    # Slurm's StartTime is the current run's (what protect_run_s reads), not the first run's.
    again = _epoch(_squeue(victim, "StartTime"))
    assert abs(again - float(starts[1]["t"])) < 2.0, (again, starts)

    # The job that did not opt in: asked for, never touched, and the notes say why.
    assert not [k for k, _ in actions[fixed] if k in RESTARTS], actions[fixed]
    assert f"preemption of {fixed} skipped: {NOT_OPTED_IN}" in notes
    assert _squeue(fixed, "State,RestartCnt") == "COMPLETED 0"
