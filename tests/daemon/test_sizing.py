"""Deadline-only jobs sized by the daemon (daemon/sizing.py): which jobs wait for it, what each
gets (pure), and on the real cluster: rlsbatch submits one held, one daemon cycle sizes and
releases it, and it runs with the chosen GPUs and the site's CPUs per GPU."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_jobs import Jobs, run_daemon, squeue, wait_for

from slurm_rl.config import SizingConfig
from slurm_rl.core import Intent, JobId, JobState, JobView, NodeName, NodeState, NodeView
from slurm_rl.daemon.limits import PartitionLimits
from slurm_rl.daemon.sizing import Sized, awaiting_sizing, cpus_per_node, size_job

RLSBATCH = str(Path(sys.executable).with_name("rlsbatch"))

NODES = tuple(NodeView(name=NodeName(f"node{i}"), state=NodeState.IDLE, gpus_total=4,
                       cpus_total=8, partitions=("gpu",)) for i in range(1, 5))
LIMITS = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4)}


def job(gpus: int = 0, lo: int | None = 1, hi: int | None = 8, held: bool = True) -> JobView:
    return JobView(id=JobId("42"), user="u", partition="gpu", state=JobState.PENDING,
                   submit_time=0.0, gpus=gpus, held=held,
                   intent=Intent(deadline=1e9, gpus_min=lo, gpus_max=hi, model="resnet50"))


def size(chosen: int | None, *, settings: SizingConfig | None = None,
         limits: dict[str, PartitionLimits] | None = LIMITS, fallback: bool = False
         ) -> Sized | str:
    return size_job(job(), chosen, settings=settings or SizingConfig(), limits=limits,
                    assoc=None, nodes=NODES, fallback=fallback)


def shape(s: Sized | str) -> tuple[int, int, int, int]:
    assert isinstance(s, Sized), s
    return s.gpus, s.per_node, s.nodes, s.cpus_per_node


def test_which_jobs_wait_for_sizing() -> None:
    assert awaiting_sizing(job(), "JobHeldUser")
    assert not awaiting_sizing(job(), "JobHeldAdmin")  # an admin's hold is never released
    assert not awaiting_sizing(job(gpus=2), "JobHeldUser")  # asked for GPUs: not ours
    assert awaiting_sizing(job(gpus=2), "JobHeldUser", retry=True)  # our update, no release
    assert not awaiting_sizing(job(lo=None, hi=None), "JobHeldUser")  # no range
    assert not awaiting_sizing(job(), "Priority")


@pytest.mark.parametrize(("chosen", "expected"), [
    (None, (1, 1, 1, 2)),   # no count from the policy: the range minimum
    (3, (3, 3, 1, 6)),      # one node: 2 CPUs per GPU (8 CPUs over 4 GPUs)
    (6, (6, 3, 2, 6)),      # two nodes of 3
    (5, (4, 4, 1, 8)),      # 5 does not split over 2 nodes: lowered to 4
    (16, (8, 4, 2, 8)),     # capped at [sizing] max_gpus
])
def test_the_policys_count_within_range_site_and_nodes(chosen: int | None,
                                                       expected: tuple[int, ...]) -> None:
    assert shape(size(chosen)) == expected


def test_the_users_limits_cap_the_count() -> None:
    tight = {"gpu": PartitionLimits(name="gpu", gpus_per_node=4, max_nodes=4,
                                    max_gpus_per_job=2)}
    assert shape(size(8, limits=tight)) == (2, 2, 1, 4)
    assert size(4, limits=None) == "partition 'gpu' has no known GPU limits"
    assert shape(size(8, fallback=True)) == (1, 1, 1, 2)


def test_cpus_per_gpu_from_the_site_capped_by_the_node() -> None:
    assert shape(size(2, settings=SizingConfig(cpus_per_gpu=3))) == (2, 2, 1, 6)
    assert shape(size(4, settings=SizingConfig(cpus_per_gpu=3))) == (4, 4, 1, 8)
    assert cpus_per_node(5, 0, NODES) is None  # no node has 5 GPUs


def test_the_scontrol_lines() -> None:
    s = size(6)
    assert isinstance(s, Sized)
    assert s.lines(1) == ("update JobId=42 TresPerNode=gres:gpu:3 NumNodes=2 MinCPUsNode=6",
                          "release 42")


# --- on the real cluster -------------------------------------------------------------------------

@pytest.mark.slurm
def test_a_deadline_only_job_is_sized_released_and_runs(jobs: Jobs, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nsleep 30\n")
    db = tmp_path / "daemon.db"
    name = f"{jobs.prefix}sized"
    # 2 h of resnet50 on one GPU, due in 90 minutes: one GPU is not enough.
    proc = subprocess.run([RLSBATCH, "-J", name, "-o", "/dev/null", "-t", "5",
                           "--rl-deadline", "+90m", "--rl-model", "resnet50",
                           "--rl-steps", "40000", str(script)],
                          capture_output=True, text=True, env={"SLURM_RL_DB": str(db),
                                                               **_env()})
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    jobs.ids.append(job_id)
    assert "the slurm-rl daemon picks this job's GPUs (1-8) and CPUs" in proc.stderr
    assert "the job stays held until the daemon runs" in proc.stderr  # no daemon ran yet
    assert squeue([job_id], "State,Reason")[job_id] == ["PENDING", "JobHeldUser"]

    run_daemon(db, jobs.prefix)  # one cycle, as the other daemon tests run it
    con = sqlite3.connect(db)
    rows = con.execute("SELECT a.status, a.argv FROM actions a JOIN action_jobs j ON "
                       "j.action_id = a.id WHERE a.kind = 'size_release' AND j.job_id = ?",
                       (job_id,)).fetchall()
    con.close()
    assert [r[0] for r in rows] == ["done"], rows
    _, tres, cpus, nodes = squeue([job_id], "Reason,tres-per-node,NumCPUs,NumNodes")[job_id]
    per_node = int(tres.rsplit(":", 1)[1])
    gpus = per_node * int(nodes)
    # 2 GPUs at least meet the deadline; the deadline policy may add spare ones (up to 8).
    assert 2 <= gpus <= 8, (tres, nodes)
    assert int(cpus) == 2 * gpus  # 8 CPUs over 4 GPUs per node: 2 per GPU
    # Released: it starts once the GPUs are free (other tests share the cluster).
    wait_for(lambda: squeue([job_id], "State")[job_id] == ["RUNNING"], 120, "the job to run")
    detail = subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True,
                            text=True, check=True).stdout
    assert f"GRES=gpu:{per_node}(IDX:" in detail


def test_the_bare_deadline_and_model_form_is_sized_and_runs(jobs: Jobs, tmp_path: Path) -> None:
    # The seed's form: a deadline and a model, no GPU, CPU, time or steps request at all.
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nsleep 5\n")
    db = tmp_path / "daemon.db"
    proc = subprocess.run([RLSBATCH, "-J", f"{jobs.prefix}bare", "-o", "/dev/null",
                           "--rl-deadline", "+6h", "--rl-model", "resnet50", str(script)],
                          capture_output=True, text=True, env={"SLURM_RL_DB": str(db),
                                                               **_env()})
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    jobs.ids.append(job_id)
    assert squeue([job_id], "State,Reason")[job_id] == ["PENDING", "JobHeldUser"]
    run_daemon(db, jobs.prefix)
    _, tres, cpus, nodes = squeue([job_id], "Reason,tres-per-node,NumCPUs,NumNodes")[job_id]
    gpus = int(tres.rsplit(":", 1)[1]) * int(nodes)
    assert 1 <= gpus <= 8 and int(cpus) == 2 * gpus, (tres, cpus, nodes)
    wait_for(lambda: squeue([job_id], "State")[job_id][0] in ("RUNNING", "COMPLETED"), 120,
             "the job to start")


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "SLURM_RL_CONFIG": ""}


def test_a_refused_update_is_not_followed_by_the_release(tmp_path: Path) -> None:
    """scontrol reading stdin goes on after a refused line: the release is a second process,
    run only if the update was taken, so a job is never released with no GPUs (FakeSlurm)."""
    from fake_slurm import FakeSlurm

    from slurm_rl.daemon.sizing import Sizer
    from slurm_rl.db.engine import make_engine, make_session_factory
    from slurm_rl.db.migrate import upgrade
    from slurm_rl.db.repo import upsert_jobs

    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        upsert_jobs(s, [JobView(id=JobId("7"), state=JobState.PENDING, submit_time=900.0,
                                gpus=0)], now=1000.0)
        s.commit()
    sized = Sized(job_id=JobId("7"), gpus=2, per_node=2, nodes=1, cpus_per_node=4, why="")
    for fail_on, want in (("TresPerNode", False), ("", True)):
        fake = FakeSlurm()
        fake.fail_on = fail_on
        with make_session_factory(engine)() as s:
            assert Sizer(fake, SizingConfig(), clock=lambda: 1000.0)._run(
                s, sized, 1, cycle_id=1, decision_id=None) is want
        released = any("release 7" in (i or "") for _, i in fake.calls)
        assert released is want, fake.calls
    engine.dispose()


def test_an_unfinished_sizing_of_a_reused_id_is_not_retried(tmp_path: Path) -> None:
    """A SIZE_RELEASE left FAILED for the old job 7 makes the daemon retry sizing job 7; a
    later job with the same id (slurmctld restarted with fresh state) is not that job."""
    from slurm_rl.daemon.sizing import unfinished_sizing
    from slurm_rl.db.actions import ActionOutcome, ActionSpec, finish_actions, plan_actions
    from slurm_rl.db.engine import make_engine, make_session_factory
    from slurm_rl.db.kinds import ActionKind
    from slurm_rl.db.migrate import upgrade
    from slurm_rl.db.repo import upsert_jobs

    engine = make_engine(tmp_path / "x.db")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        upsert_jobs(s, [JobView(id=JobId("7"), state=JobState.PENDING, submit_time=900.0,
                                gpus=2)], now=1000.0)
        (a,) = plan_actions(s, [ActionSpec(kind=ActionKind.SIZE_RELEASE, job_ids=(JobId("7"),),
                                           argv=("scontrol", "release", "7"), cycle_id=1)],
                            at=1000.0)
        finish_actions(s, [ActionOutcome(action_id=a, exit_code=1)], at=1001.0)
        assert unfinished_sizing(s, [JobId("7")]) == ["7"]
        upsert_jobs(s, [JobView(id=JobId("7"), user="bo", state=JobState.PENDING,
                                submit_time=5000.0, gpus=2)], now=5000.0)
        s.commit()
        assert unfinished_sizing(s, [JobId("7")]) == []
    engine.dispose()


def test_the_last_resort_without_limits_keeps_to_the_sites_cap() -> None:
    # after max_wait_cycles without readable limits the range minimum is set as operator:
    # never above [sizing] max_gpus, whatever minimum the comment claims
    from slurm_rl.daemon.sizing import _minimum

    wide = tuple(NodeView(name=NodeName("big"), state=NodeState.IDLE, gpus_total=16,
                          cpus_total=32, partitions=("gpu",)) for _ in range(1))
    got = _minimum(job(lo=16, hi=16), SizingConfig(max_gpus=4), wide)
    assert got is not None and (got.gpus, got.per_node, got.nodes) == (4, 4, 1)
    own = _minimum(job(lo=2, hi=16), SizingConfig(max_gpus=4), wide)
    assert own is not None and own.gpus == 2
