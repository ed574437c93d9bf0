"""The pure helpers of benchmarks/live_deadlines.py: the workload, the job script, the parsers of
Slurm's and the job's output, the summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.live_deadlines import (  # noqa: E402
    SCENARIOS,
    JobLog,
    LiveJob,
    Outcome,
    Run,
    job_script,
    parse_job_log,
    parse_restart_cnt,
    parse_squeue,
    rlsbatch_args,
    steps_per_tick,
    summarize,
    total_steps,
)


def test_steps_follow_resnet50s_speed_up() -> None:
    assert [steps_per_tick(g) for g in (1, 2, 3, 4)] == [3, 6, 8, 9]
    job = LiveJob(name="x", submit_s=0, gpus=2, work_s=20)
    assert total_steps(job) == 240  # 40 ticks of 6 steps


def test_scenarios_fit_the_cluster_and_have_one_elastic_job() -> None:
    for jobs in SCENARIOS.values():
        assert [j.name for j in jobs if j.elastic] == ["elastic"]
        assert all((j.gpus_max or j.gpus) <= 4 for j in jobs)
    assert len(SCENARIOS["short"]) == 16
    work = {s: sum(j.work_s * j.gpus for j in jobs) for s, jobs in SCENARIOS.items()}
    assert work["short"] > 2 * work["suffice"]


def test_rlsbatch_args() -> None:
    el = next(j for j in SCENARIOS["short"] if j.elastic)
    args = rlsbatch_args(el, "p-elastic", Path("/tmp/x/job.sh"), 199)
    assert args[-1] == "/tmp/x/job.sh"
    assert "--rl-elastic" in args and "--rl-gpus" in args and "1-4" in args
    assert args[args.index("--rl-deadline") + 1] == "+199s"
    assert not any(a.startswith("--gres") for a in args)
    rigid = rlsbatch_args(LiveJob(name="f", submit_s=0, gpus=4, work_s=40), "p-f",
                          Path("j.sh"), None)
    assert "--gres=gpu:4" in rigid and "--rl-deadline" not in rigid


def test_job_script_counts_checkpoints_and_resumes(tmp_path: Path) -> None:
    """The script itself, run by bash outside Slurm: 1 GPU (no CUDA_VISIBLE_DEVICES), resumed
    from a checkpoint, with the progress command replaced by `true`."""
    job = LiveJob(name="t", submit_s=0, gpus=1, work_s=1)
    progress = f"{Path(sys.executable).parent / 'slurm-rl'} progress"
    text = job_script(job, tmp_path)
    assert progress in text
    text = text.replace(progress, "true")
    (tmp_path / "ck").write_text("3\n")
    script = tmp_path / "job.sh"
    script.write_text(text)
    subprocess.run(["bash", str(script)], check=True, timeout=30,
                   env={"PATH": "/usr/bin:/bin", "SLURM_RESTART_COUNT": "1"})
    log = parse_job_log((tmp_path / "log").read_text())
    assert log == JobLog(runs=(Run(gpus=1, from_step=3),), checkpoints=(), done=True)


def test_parse_squeue() -> None:
    text = ("7|COMPLETED|2026-12-01T09:00:00|2026-12-01T09:00:40\n"
            "8|PENDING|2026-12-01T09:03:00|2026-12-01T09:08:00\n"
            "9|RUNNING|2026-12-01T09:00:05|2026-12-01T09:06:05\n")
    rows = parse_squeue(text)
    assert rows["7"][0] == "COMPLETED" and rows["7"][2] is not None
    assert rows["7"][2] - rows["7"][1] == 40  # type: ignore[operator]
    assert rows["8"][1:] == (None, None)
    assert rows["9"][1] is not None and rows["9"][2] is None


def test_parse_restart_cnt() -> None:
    # Recorded on the test cluster (Slurm 22.05), after one resize; fields cut for length.
    line = ("JobId=2 JobName=live1-suffice-deadline-elastic UserId=root(0) Priority=10000 "
            "JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 "
            "Reboot=0 ExitCode=0:0 TresPerNode=gres:gpu:2")
    assert parse_restart_cnt(line) == 1
    assert parse_restart_cnt("JobId=12 JobState=PENDING Requeue=1 BatchFlag=1") is None


def test_parse_job_log() -> None:
    text = ("start n=0 gpus=1 restart=0 t=1.0\ncheckpoint n=42 t=2.0\n"
            "start n=42 gpus=4 restart=1 t=9.0\ndone n=600 t=20.0\n")
    assert parse_job_log(text) == JobLog(runs=(Run(gpus=1, from_step=0),
                                               Run(gpus=4, from_step=42)),
                                         checkpoints=(42,), done=True)


def _outcome(deadline: float | None, submit: float, end: float | None,
             state: str = "COMPLETED") -> Outcome:
    return Outcome(name="j", job_id="1", state=state, submit=submit, deadline=deadline,
                   start=None, end=end, restart_cnt=0, log=JobLog())


def test_summarize() -> None:
    jobs = [_outcome(100.0, 0.0, 90.0), _outcome(100.0, 10.0, 110.0),
            _outcome(100.0, 0.0, None, "CANCELLED"), _outcome(None, 0.0, 50.0)]
    s = summarize(jobs, 1)
    assert (s.deadlines_met, s.deadline_jobs, s.completed, s.jobs) == (1, 3, 3, 4)
    assert s.mean_jct_s == (90 + 100 + 50) / 3
    assert s.resizes_applied == 1
