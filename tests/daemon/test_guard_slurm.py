"""On the real test cluster: `rl`'s queue-health guard in the live daemon turns on for a job
that starves behind a long run, requeues that run for it, and turns off once the job runs.

The guard's regime, in seconds instead of hours: `rl` itself never requeues a run that has
lasted 1 s (`protect_run_s`, 6 h by default), and the guard acts for a job that has waited 5 s
behind runs of 5 s or more (`guard_wait_s`, `guard_victim_run_s`: 30 min and 6 h by default).
The cluster is full: an 8-GPU `--rl-elastic` job on two nodes (it ignores the checkpoint signal
and sleeps on) and jobs outside the daemon's scope on every other free GPU. A 1-GPU managed job
pinned to the elastic job's first node can not start; `gittins` ranks it some ten times above
the 8-GPU run (its index per GPU), more than its margin asks. So the guard puts it first and
asks for the requeue, the daemon signals, requeues and releases the elastic job, the 1-GPU job
starts, and the guard is off again. With `guard=off` nothing is requeued and the test fails
waiting for the guard.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, squeue, wait_for
from sqlalchemy import select
from test_metrics import scrape, value

from slurm_rl.core import Intent
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.models import Action, ActionJob
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.submit.intent import compose_comment

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

OUTSIDE = "out-"
"""Fillers' names begin so: outside the daemon's --only-name-prefix, never managed."""
GUARD_OPTIONS = ("protect_run_s=1", "guard_wait_s=5", "guard_victim_run_s=5", "guard_check_s=0")
"""`[daemon] policy_options`: the guard's regime within seconds (the module's docstring)."""


def _free_gpus(timeout_s: float = 60.0) -> dict[str, int]:
    """Free GPUs per usable node, once two nodes are wholly free (room for the 8-GPU job;
    other sessions share the cluster)."""
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = SlurmAdapter().poll_nodes()
        free: dict[str, int] = {n.name: n.gpus_free for n in nodes if n.state.usable}
        whole = [n.name for n in nodes if n.state.usable and n.gpus_total == 4
                 and n.gpus_free == 4]
        if len(whole) >= 2:
            return free
        if time.monotonic() > deadline:
            pytest.fail(f"the shared cluster kept fewer than 2 free nodes: {free}")
        time.sleep(1)


def _sbatch(jobs: Jobs, name: str, *args: str) -> str:
    """Submit a job of this test (cancelled at its end by the `jobs` fixture)."""
    out = subprocess.run(["sbatch", "--parsable", "-J", name, "-t", "3", "-o", "/dev/null",
                          "-e", "/dev/null", *args], capture_output=True, text=True, check=True)
    job_id = out.stdout.strip().split(";")[0]
    jobs.ids.append(job_id)
    return job_id


def _submit_elastic(jobs: Jobs, tag: str, nodes: tuple[str, str]) -> str:
    """An 8-GPU elastic job on `nodes` that lives through the checkpoint signal."""
    return _sbatch(jobs, f"{jobs.prefix}{tag}", "-N", "2", "-w", ",".join(nodes),
                   "--gres=gpu:4", f"--comment={compose_comment('', Intent(elastic=True))}",
                   "--wrap", "trap '' USR1; sleep 170")


def _submit_filler(jobs: Jobs, node: str, gpus: int) -> str:
    """A plain job on `gpus` GPUs of `node`, named outside the daemon's name prefix."""
    return _sbatch(jobs, f"{OUTSIDE}{jobs.prefix}fill-{node}", "-w", node,
                   f"--gres=gpu:{gpus}", "--wrap", "sleep 170")


def _slurm_rl(*args: str) -> str:
    out = subprocess.run([SLURM_RL, *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_guard_requeues_a_long_run_for_a_starving_job_and_turns_off(
        jobs: Jobs, tmp_path: Path) -> None:
    free = _free_gpus()
    x, y = sorted(n for n, f in free.items() if f == 4)[:2]
    victim = _submit_elastic(jobs, "victim", (x, y))
    fillers = [_submit_filler(jobs, n, f) for n, f in sorted(free.items())
               if n not in (x, y) and f > 0]
    ours = [victim, *fillers]
    wait_for(lambda: all(squeue(ours, "State").get(j, [""])[0] == "RUNNING" for j in ours),
             30, "the cluster to fill")
    starving = jobs.submit("starve", intent=Intent(), gpus=1, sleep=2, extra=["-w", x])
    assert squeue([starving], "State")[starving][0] == "PENDING"

    db = tmp_path / "g.db"
    config = tmp_path / "slurm-rl.toml"
    options = ", ".join(f'"{o}"' for o in GUARD_OPTIONS)
    config.write_text(f'[database]\npath = "{db}"\n'
                      f'[daemon]\npolicy = "rl"\ninterval_s = 1\npolicy_options = [{options}]\n'
                      '[metrics]\naddress = "127.0.0.1:0"\n'
                      '[resize]\ngrace_s = 3\n')
    log_path = tmp_path / "daemon.log"
    log = log_path.open("w")
    proc = subprocess.Popen([SLURM_RL, "daemon", "--config", str(config),
                             "--only-name-prefix", jobs.prefix], stderr=log)
    stopped = False
    try:
        found = wait_for(lambda: re.search(r"metrics at (http://\S+/metrics)",
                                           log_path.read_text()), 60, "the metrics line")
        url = found.group(1)

        # On: the cycle that saw the job starve, observed (metrics come after its commit).
        wait_for(lambda: value(scrape(url), "slurm_rl_guard_fallback") == 1, 40,
                 "the guard to turn on")
        on = scrape(url)
        # Held still while status and explain read what the daemon stored: the guard stays on
        # until the requeued job's GPUs let the starving one start (grace_s, then requeue).
        proc.send_signal(signal.SIGSTOP)
        stopped = True
        status = _slurm_rl("status", "--db", str(db))
        explain = _slurm_rl("explain", "--db", str(db), starving)
        proc.send_signal(signal.SIGCONT)
        stopped = False
        assert value(on, "slurm_rl_guard_switches_total") == 1
        text = log_path.read_text()
        assert re.search(rf"guard: on for rl because job {starving} \(1 GPUs\) waited \d+ (s|min) "
                         r"while 1 running job\(s\) the fallback would requeue", text), text
        guard_lines = [ln for ln in status.splitlines() if ln.startswith("guard: ")]
        assert len(guard_lines) == 1 and f"job {starving} (1 GPUs)" in guard_lines[0], status
        assert "1 starving job(s) first, 1 requeue(s)" in guard_lines[0], status
        assert re.search(r"^decision at .* by rl .*: rank 0\b", explain, re.M), explain
        assert re.search(rf"^  guard: 1 starving job\(s\) first, .* job {starving} ",
                         explain, re.M), explain

        # Off: the elastic job was requeued, the starving job started.
        wait_for(lambda: "guard: off for rl (no job starves)" in log_path.read_text(), 40,
                 "the guard to turn off")
        wait_for(lambda: value(scrape(url), "slurm_rl_guard_fallback") == 0, 10,
                 "the gauge to read 0")
        off = scrape(url)
        after = _slurm_rl("status", "--db", str(db))
    finally:
        if stopped:
            proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        log.close()
    text = log_path.read_text()
    assert code == 0, text
    assert value(off, "slurm_rl_guard_switches_total") == 2, text
    assert text.count("guard: on for rl") == 1 and text.count("guard: off for rl") == 1, text
    assert not [ln for ln in after.splitlines() if ln.startswith("guard: ")], after
    assert squeue([starving], "State")[starving][0] in ("RUNNING", "COMPLETING", "COMPLETED")

    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as session:
            actions = {j: [(a.kind, a.status) for a in session.scalars(
                select(Action).join(ActionJob, ActionJob.action_id == Action.id)
                .where(ActionJob.job_id == j).order_by(Action.id))] for j in ours}
    finally:
        engine.dispose()
    restarts = [(k, s) for k, s in actions[victim] if k in (
        ActionKind.PREEMPT_SIGNAL, ActionKind.PREEMPT_REQUEUE, ActionKind.PREEMPT_RELEASE)]
    assert restarts == [(ActionKind.PREEMPT_SIGNAL, ActionStatus.DONE),
                        (ActionKind.PREEMPT_REQUEUE, ActionStatus.DONE),
                        (ActionKind.PREEMPT_RELEASE, ActionStatus.DONE)], actions[victim]
    assert all(not actions[j] for j in fillers), actions  # outside the scope: never touched
