"""End to end on the real cluster: `slurm-rl daemon` orders jobs, shadow mode, scope."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from cluster_jobs import SLURM_RL, Jobs, run_daemon, site_factors, squeue, wait_for
from sqlalchemy import select

from slurm_rl.core import Intent, JobId, JobState, JobView
from slurm_rl.daemon.actuator import Change, ScontrolExecutor, _gpu_fields
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.kinds import ActionKind
from slurm_rl.db.models import Action, ActionJob, DecisionEntry, DecisionRow
from slurm_rl.slurm.runner import SubprocessRunner

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def db_rows(db: Path) -> tuple[list[DecisionRow], list[DecisionEntry], list[Action],
                                  list[ActionJob]]:
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as s:
            return (list(s.scalars(select(DecisionRow))), list(s.scalars(select(DecisionEntry))),
                    list(s.scalars(select(Action))), list(s.scalars(select(ActionJob))))
    finally:
        engine.dispose()


def test_tight_deadlines_submitted_last_start_first(jobs: Jobs, tmp_path: Path) -> None:
    # Fill all 16 GPUs, then queue four whole-node jobs without a deadline and, after them,
    # four with a tight one. Slurm alone would start them in submit order.
    for i in range(4):
        jobs.submit(f"block{i}", gpus=4, sleep=6)
    relaxed = [jobs.submit(f"relaxed{i}", intent=Intent(), gpus=4, sleep=2) for i in range(4)]
    deadline = time.time() + 240
    tight = [jobs.submit(f"tight{i}", intent=Intent(deadline=deadline), gpus=4, sleep=2)
             for i in range(4)]
    out = run_daemon(tmp_path / "d.db", jobs.prefix)
    assert "made 8 job updates" in out.stderr, out.stderr

    ours = relaxed + tight

    def all_started() -> dict[str, list[str]] | None:
        rows = squeue(ours, "State,StartTime")
        return rows if all(r[0] not in ("PENDING", "CONFIGURING") for r in rows.values()) \
            else None

    rows = wait_for(all_started, 90, "all eight jobs to start")
    start = {j: rows[j][1] for j in ours}  # ISO timestamps from Slurm compare as strings
    assert max(start[j] for j in tight) < min(start[j] for j in relaxed), start


def test_dry_run_changes_nothing_in_slurm_but_records_decisions(jobs: Jobs,
                                                                 tmp_path: Path) -> None:
    # Begin-time jobs wait without running; their priority and GPU request are visible.
    later = "now+3600"
    ids = [jobs.submit("dl", intent=Intent(deadline=time.time() + 600), begin=later),
           jobs.submit("range", intent=Intent(gpus_min=1, gpus_max=4), begin=later),
           jobs.submit("plain", intent=Intent(), begin=later)]
    twin = jobs.submit("twin", begin=later, outside=True)
    fields = "tres-per-node,NumNodes"
    before = squeue(ids, fields)
    assert site_factors(ids, twin) == dict.fromkeys(ids, 0)
    db = tmp_path / "dry.db"
    out = run_daemon(db, jobs.prefix, "--dry-run")
    # SiteFactor for all three; the GPU-range job may also get more GPUs if some are free.
    assert re.search(r"would make [34] job updates", out.stderr), out.stderr
    assert squeue(ids, fields) == before
    assert site_factors(ids, twin) == dict.fromkeys(ids, 0)
    decisions, entries, actions, _ = db_rows(db)
    assert [d.dry_run for d in decisions] == [True]
    assert sorted(e.job_id for e in entries) == sorted(ids)
    assert actions == []
    # The same cycle for real does change the priorities: the check above could see it.
    run_daemon(db, jobs.prefix)
    after = site_factors(ids, twin)
    assert all(after[j] > 0 for j in ids), after


def test_jobs_outside_the_scope_are_never_touched(jobs: Jobs, tmp_path: Path) -> None:
    later = "now+3600"
    plain = [jobs.submit(f"plain{i}", begin=later) for i in range(3)]
    managed = jobs.submit("managed", intent=Intent(deadline=time.time() + 600), begin=later)
    twin = jobs.submit("twin", begin=later, outside=True)
    fields = "tres-per-node,NumNodes"
    before = squeue(plain, fields)
    db = tmp_path / "scope.db"
    run_daemon(db, jobs.prefix)
    run_daemon(db, jobs.prefix)
    assert squeue(plain, fields) == before
    assert site_factors(plain, twin) == dict.fromkeys(plain, 0)
    _, entries, actions, links = db_rows(db)
    assert {lk.job_id for lk in links} == {managed}
    assert {e.job_id for e in entries} == {managed}
    assert len(actions) == 1
    assert site_factors([managed], twin)[managed] > 0
    # explain tells the two apart
    shown = explain(db, managed)
    assert "managed" in shown and " done exit 0: scontrol update JobId=" in shown, shown
    shown = explain(db, plain[0])
    assert "not managed (outside the daemon's scope)" in shown and "actions: none" in shown


def explain(db: Path, job_id: str) -> str:
    out = subprocess.run([SLURM_RL, "explain", job_id, "--db", str(db)], capture_output=True,
                         text=True, check=True)
    return out.stdout


def test_gpu_count_change_is_really_applied(jobs: Jobs, tmp_path: Path) -> None:
    # On 22.05 `TresPerNode=gres/gpu:N` is shown by squeue but not applied; the actuator's
    # form must change what the job really gets (CUDA_VISIBLE_DEVICES inside the job).

    out_file = tmp_path / "cvd.txt"
    sub = subprocess.run(
        ["sbatch", "--parsable", "-H", "-J", f"{jobs.prefix}gpus", "--gres=gpu:1", "-t", "1",
         "-o", str(out_file), "--wrap", "echo $CUDA_VISIBLE_DEVICES"],
        capture_output=True, text=True, check=True)
    job_id = sub.stdout.strip().split(";")[0]
    jobs.ids.append(job_id)
    view = JobView(id=JobId(job_id), state=JobState.PENDING, submit_time=0.0, gpus=1, nodes=1)
    fields = _gpu_fields(view, 3, 4)
    assert fields is not None
    change = Change(kind=ActionKind.TRES_PER_NODE, job_ids=(JobId(job_id),), fields=fields)
    result = ScontrolExecutor(SubprocessRunner()).run([change])
    assert result.outcomes[0].ok, result.result.stderr
    subprocess.run(["scontrol", "release", job_id], check=True)
    wait_for(lambda: out_file.exists() and out_file.read_text().strip() or None, 60,
             "the job to write its CUDA_VISIBLE_DEVICES")
    assert len(out_file.read_text().strip().split(",")) == 3, out_file.read_text()
