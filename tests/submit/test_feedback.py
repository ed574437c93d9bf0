"""Feedback at submission (submit/feedback.py): the estimate worked by hand, the refusal and its
suggestions, and the read-only view of a database the daemon's own code wrote."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from slurm_rl import config
from slurm_rl.core import (
    Decision,
    Intent,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
    Progress,
    ServiceClass,
)
from slurm_rl.db.actions import record_decision
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.db.migrate import upgrade
from slurm_rl.db.repo import record_node_samples, upsert_jobs
from slurm_rl.submit.cmdline import Opt
from slurm_rl.submit.feedback import (
    DEFAULT_CONFIG,
    DEFAULT_DB,
    DEFAULT_INTERVAL_S,
    Snapshot,
    Unavailable,
    assess,
    locate,
    parse_time_limit,
    predict,
    read_snapshot,
    start_gpus,
)

NOW = 1_800_000_000.0
H = 3600.0


def snap(total: int = 8, running: list[tuple[float, int]] | None = None,
         pending: list[tuple[float, int, float]] | None = None) -> Snapshot:
    return Snapshot(NOW - 5, total, running or [], pending or [])


# --- the estimate, by hand ----------------------------------------------------------------------

def test_free_gpus_start_now() -> None:
    assert predict(snap(8, [(NOW + H, 4)]), NOW, 4, 2 * H, NOW + 3 * H) == (NOW, NOW + 2 * H)


def test_a_job_waits_for_running_jobs_to_end() -> None:
    # 8 GPUs: 6 busy until +1h, 2 until +2h; 4 needed -> at +1h (6 free then).
    s = snap(8, [(NOW + H, 6), (NOW + 2 * H, 2)])
    assert predict(s, NOW, 4, H, NOW + 9 * H) == (NOW + H, NOW + 2 * H)


def test_earlier_deadlines_go_first_later_ones_after() -> None:
    # A pending job with an earlier deadline takes 6 of 8 GPUs for 3h; one with a later
    # deadline does not count.
    s = snap(8, [], [(NOW + 2 * H, 6, 3 * H), (NOW + 9 * H, 8, 5 * H)])
    assert predict(s, NOW, 4, H, NOW + 5 * H) == (NOW + 3 * H, NOW + 4 * H)
    assert predict(s, NOW, 2, H, NOW + 5 * H) == (NOW, NOW + H)
    critical = snap(8, [], [(-math.inf, 8, H)])
    assert predict(critical, NOW, 1, H, NOW + 5 * H) == (NOW + H, NOW + 2 * H)


def test_unknown_ends_and_impossible_counts_give_no_start() -> None:
    assert predict(snap(8, [(math.inf, 8)]), NOW, 1, H, NOW + H)[0] == math.inf
    assert predict(snap(8), NOW, 9, H, NOW + H) == (math.inf, None)
    assert predict(snap(8), NOW, 2, None, NOW + H) == (NOW, None)


@pytest.mark.parametrize(("text", "seconds"), [
    ("60", 3600), ("5:30", 330), ("1:02:03", 3723), ("2-0", 172800), ("1-2:30", 95400),
    ("1-0:0:10", 86410), (None, None), ("UNLIMITED", None), ("infinite", None), ("0", None),
    ("1:x", None), ("\uff11", None),
])
def test_slurm_time_limits(text: str | None, seconds: float | None) -> None:
    assert parse_time_limit(text) == seconds


def test_the_starting_gpu_count() -> None:
    cmd = [Opt("gres", "gpu:2", "command line"), Opt("nodes", "3", "command line")]
    assert start_gpus(cmd, {}, [], []) == 6
    assert start_gpus([], {}, [], ["--gres=gpu:3", "--nodes=2"]) == 6  # from --rl-gpus 6-8
    assert start_gpus([Opt("gpus", "a100:4", "command line")], {}, [], []) == 4
    assert start_gpus([], {"SBATCH_GRES": "gpu:1"}, [Opt("gres", "gpu:4", "job.sh line 2")],
                      []) == 1
    assert start_gpus([], {}, [], []) == 0


# --- what is said, what is refused -------------------------------------------------------------

def said(snapshot: Snapshot, *, deadline: float, hard: bool = False, gpus: int = 2,
         limit: float | None = 2 * H, steps: int | None = None, model: str | None = None,
         force: bool = False) -> tuple[list[str], str | None]:
    return assess(deadline=deadline, hard=hard, gpus=gpus, time_limit_s=limit,
                  total_steps=steps, model=model, batch_size=None, now=NOW, force=force,
                  snapshot=snapshot)


def test_a_feasible_deadline() -> None:
    lines, refusal = said(snap(), deadline=NOW + 3 * H)
    assert refusal is None
    assert len(lines) == 1 and lines[0].startswith("rlsbatch: predicted start ")
    assert "(2 GPUs, run time from its time limit; daemon's view 5s old)" in lines[0]
    assert lines[0].endswith("looks feasible (1h00m to spare)")


def test_an_infeasible_hard_deadline_is_refused_with_a_gpu_count_and_a_deadline() -> None:
    busy = snap(8, [(NOW + H, 4)])
    lines, refusal = said(busy, deadline=NOW + 1.5 * H, hard=True)
    assert lines == [] and refusal is not None
    assert refusal.startswith("--rl-deadline: the hard deadline ")
    assert "looks infeasible: predicted start " in refusal
    # 3 GPUs are free now and, on the generic speed-up curve, finish within the 1.5 h.
    assert "it would be met with 3 GPUs (finish " in refusal
    assert " or --rl-deadline 20" in refusal and refusal.endswith("--rl-force submits anyway")
    assert "\n" not in refusal


def test_no_gpu_count_is_suggested_when_none_would_do() -> None:
    _, refusal = said(snap(8), deadline=NOW + 60, hard=True)
    assert refusal is not None and "GPUs (finish" not in refusal
    assert "it would be met with --rl-deadline " in refusal
    _, cpu_only = said(snap(8), deadline=NOW + H, hard=True, gpus=0)
    assert cpu_only is not None and "(no GPUs," in cpu_only and "GPUs (finish" not in cpu_only


def test_soft_and_forced_deadlines_are_submitted_with_the_warning() -> None:
    lines, refusal = said(snap(), deadline=NOW + H)
    assert refusal is None and lines[0].endswith(
        "looks infeasible (1h00m late); submitted anyway (a soft deadline)")
    lines, refusal = said(snap(), deadline=NOW + H, hard=True, force=True)
    assert refusal is None and lines[0].endswith("submitted anyway (--rl-force)")


def test_what_can_not_be_predicted_is_said_not_guessed() -> None:
    lines, refusal = said(snap(), deadline=NOW + H, hard=True, limit=None)
    assert refusal is None
    assert lines[0].startswith("rlsbatch: predicted start ")
    assert "finish unknown (give -t/--time, or --rl-steps with --rl-model)" in lines[0]
    lines, refusal = said(snap(8, [(math.inf, 8)]), deadline=NOW + H, hard=True)
    assert refusal is None and lines[0].startswith("rlsbatch: no prediction: the jobs ahead")


def test_steps_of_a_profiled_model_set_the_run_time() -> None:
    lines, _ = said(snap(), deadline=NOW + 30 * 86400, steps=1000, model="resnet50")
    assert "run time from 1000 steps of resnet50" in lines[0]


# --- the daemon's database, read-only ---------------------------------------------------------

@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database written by the daemon's own code: 2 nodes of 4 GPUs, one running job with
    progress (ends in 100 s), one with a time limit, a pending deadline job, a pending one
    without a deadline, and a finished one."""
    path = tmp_path / "d.db"
    engine = make_engine(path)
    upgrade(engine)
    nodes = [NodeView(name=NodeName(f"n{i}"), state=NodeState.MIXED, gpus_total=4)
             for i in (1, 2)]
    jobs = [
        JobView(id=JobId("1"), state=JobState.RUNNING, submit_time=NOW - 900,
                start_time=NOW - 600, time_limit_s=3 * H, gpus=2,
                progress=Progress(steps_done=100, steps_total=200, rate=1.0, updated_at=NOW)),
        JobView(id=JobId("2"), state=JobState.RUNNING, submit_time=NOW - 900,
                start_time=NOW - 600, time_limit_s=H, gpus=4),
        JobView(id=JobId("3"), state=JobState.PENDING, submit_time=NOW, gpus=4,
                time_limit_s=H, intent=Intent(deadline=NOW + 2 * H)),
        JobView(id=JobId("4"), state=JobState.PENDING, submit_time=NOW, gpus=8,
                time_limit_s=H, intent=Intent(service_class=ServiceClass.STANDARD)),
        JobView(id=JobId("5"), state=JobState.COMPLETED, submit_time=NOW - 900, gpus=8),
        JobView(id=JobId("6"), state=JobState.PENDING, submit_time=NOW, gpus=1,
                intent=Intent(service_class=ServiceClass.CRITICAL)),
    ]
    with make_session_factory(engine)() as session:
        upsert_jobs(session, jobs, now=NOW)
        record_node_samples(session, nodes, now=NOW)
        record_decision(session, Decision(policy="t"), cycle_id=1, at=NOW, dry_run=False)
        session.commit()
    engine.dispose()
    return path


def test_the_snapshot_read_from_the_daemons_database(db: Path) -> None:
    s = read_snapshot(str(db), NOW + 10, 120.0)
    assert (s.at, s.gpus_total) == (NOW, 8)
    assert sorted(s.running) == [(NOW + 100, 2), (NOW - 600 + H, 4)]
    assert sorted(s.pending) == [(-math.inf, 1, math.inf), (NOW + 2 * H, 4, H)]


def test_a_stale_missing_or_foreign_database_gives_no_prediction(db: Path, tmp_path: Path
                                                                  ) -> None:
    with pytest.raises(Unavailable, match=r"last cycle was 1h00m ago, so its view of the queue"):
        read_snapshot(str(db), NOW + H, 120.0)
    with pytest.raises(Unavailable, match="no slurm-rl database at"):
        read_snapshot(str(tmp_path / "none.db"), NOW, 120.0)
    other = tmp_path / "other.db"
    other.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(Unavailable, match="can't read the slurm-rl database"):
        read_snapshot(str(other), NOW, 120.0)


def test_reading_changes_nothing(db: Path) -> None:
    before = db.read_bytes()
    os.chmod(db, 0o444)
    read_snapshot(str(db), NOW + 10, 120.0)
    assert db.read_bytes() == before


def test_the_database_and_staleness_come_from_the_config(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_RL_DB", raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[database]\npath = "sub/x.db"\n[daemon]\ninterval_s = 100\n')
    monkeypatch.setenv("SLURM_RL_CONFIG", str(cfg))
    assert locate() == (str(tmp_path / "sub" / "x.db"), 300.0)
    monkeypatch.setenv("SLURM_RL_DB", "/elsewhere.db")
    assert locate() == ("/elsewhere.db", 300.0)
    cfg.write_text("[database\n")
    with pytest.raises(Unavailable, match="can't read the slurm-rl config"):
        locate()


def test_the_defaults_are_the_configs() -> None:
    assert DEFAULT_DB == str(config.DEFAULT_DB_PATH)
    assert DEFAULT_CONFIG == str(config.DEFAULT_CONFIG_PATH)
    assert DEFAULT_INTERVAL_S == config.DaemonConfig().interval_s


def test_the_feedback_path_imports_nothing_heavy(db: Path, tmp_path: Path) -> None:
    """rlsbatch with a deadline and a model (perfmodel's curves): no torch, numpy, SQLAlchemy,
    nor the daemon's config module."""
    import subprocess
    import sys

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    code = f"""
import sys
from slurm_rl.submit.cli import _feedback, make_submission
sub = make_submission(["--rl-deadline", "+6h", "--rl-steps", "100", "--rl-model", "resnet50",
                       "--gres=gpu:2", "-t", "60", {str(script)!r}], {{}}, lambda: b"")
print(_feedback(sub))
heavy = {{"torch", "numpy", "sqlalchemy", "pandas", "gymnasium", "scipy"}}
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m == "slurm_rl.config"))
"""
    env = {**os.environ, "SLURM_RL_DB": str(db), "SLURM_RL_CONFIG": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["None", "[]"]
    assert out.stderr.startswith("rlsbatch: predicted start ") and out.stderr.count("\n") == 1
