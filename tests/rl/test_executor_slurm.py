"""`--executor slurm` on the real test cluster: `evaluate` runs and the trainer's rollouts and
validation episodes go to Slurm jobs (job arrays through submitit) and give results identical to
the local executor for the same seed; sbatch refusing, a task raising and a job dying are one
line each. Every job here carries a per-test name and is cancelled at the end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.executor import ExecutorError, LocalRunner, SlurmOptions, SlurmRunner
from slurm_rl.sim.evaluate import evaluate

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def name(slurm_cluster: dict[str, str]) -> Iterator[str]:
    n = f"h3x{uuid.uuid4().hex[:8]}"
    yield n
    subprocess.run(["scancel", f"--name={n}"], capture_output=True)


@pytest.fixture
def partition(slurm_cluster: dict[str, str]) -> str:
    """The cluster's default partition, from its config (sinfo marks it with '*')."""
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, check=True)
    return next(p.rstrip("*") for p in out.stdout.split() if p.endswith("*"))


def our_jobs(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", f"--name={name}", "-o", "%i"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


EVAL = """[evaluate]
policies = ["fifo", "sjf", "tiresias"]
loads = [1.0]
seeds = [0, 1]
[[trace]]
name = "c03"
path = "data:itp-deadline-cluster03.csv"
format = "itp-deadline"
window = "0:120"
"""


def test_evaluate_on_slurm_gives_the_local_results(tmp_path: Path, name: str,
                                                   partition: str) -> None:
    toml = tmp_path / "e.toml"
    toml.write_text(EVAL)
    runs = {}
    for kind in ("local", "slurm"):
        args = ["--scenarios", str(toml), "--out", str(tmp_path / kind), "--no-progress",
                "--executor", kind]
        if kind == "slurm":
            args += ["--slurm-partition", partition, "--slurm-job-name", name]
        res = CliRunner().invoke(evaluate, args)
        assert res.exit_code == 0, res.output
        runs[kind] = [{k: v for k, v in r.items() if k != "wall_s"}  # timing, not a result
                      for r in json.loads((tmp_path / kind / "results.json").read_text())["runs"]]
    assert len(runs["local"]) == 6 and runs["slurm"] == runs["local"]
    assert len(our_jobs(name)) == 6  # one array task per run, on the cluster
    assert not (tmp_path / "slurm" / "slurm-jobs").exists()  # removed after success


def test_training_rollouts_on_slurm_give_the_local_checkpoint(tmp_path: Path, name: str,
                                                              partition: str) -> None:
    torch = pytest.importorskip("torch")
    from slurm_rl.rl.config import TrainConfig
    from slurm_rl.rl.env import Scenario
    from slurm_rl.rl.train import train

    # No imitation: its rollouts are the same `collect` task, one more round trip (~4 s).
    cfg = TrainConfig(seed=5, iterations=1, steps_per_worker=64, workers=2, imitation_epochs=0,
                      validate_every=1, minibatch_size=32, hidden=16)
    scen = (Scenario(trace="data:itp-deadline-cluster03.csv", window="0:150", load=1.0),)
    val = (Scenario(trace="data:itp-deadline-cluster05.csv", window="0:150", load=1.0),)
    slurm = SlurmRunner(SlurmOptions(folder=tmp_path / "jobs", partition=partition,
                                     job_name=name))
    results = {}
    for kind, runner in (("local", LocalRunner(2)), ("slurm", slurm)):
        try:
            results[kind] = train(cfg, scen, val, tmp_path / kind / "ck.pt",
                                  echo=lambda *_: None, runner=runner)
        finally:
            runner.close()
    a = torch.load(tmp_path / "local" / "ck.pt", weights_only=True)
    b = torch.load(tmp_path / "slurm" / "ck.pt", weights_only=True)
    assert a["meta"] == b["meta"] and a["config"] == b["config"]
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])

    def curve(kind: str) -> list[list[str]]:
        rows = (tmp_path / kind / "ck.csv").read_text().splitlines()
        return [r.split(",")[:2] + r.split(",")[3:] for r in rows]  # all but wall_s

    assert curve("local") == curve("slurm")
    for k in ("best_val_return", "untrained_val_return", "steps", "refs"):
        assert results["local"][k] == results["slurm"][k]
    # references (fifo, gittins, the est_work teacher) + initial weights (4 tasks), rollouts
    # (2), validation (1)
    assert len(slurm.job_ids) == 4 + 2 + 1
    assert set(slurm.job_ids) <= set(our_jobs(name))


def test_sbatch_refusing_is_one_line(tmp_path: Path, name: str) -> None:
    toml = tmp_path / "e.toml"
    toml.write_text(EVAL)
    res = CliRunner().invoke(
        evaluate, ["--scenarios", str(toml), "--out", str(tmp_path / "o"), "--no-progress",
                   "--executor", "slurm", "--slurm-partition", "no-such-partition",
                   "--slurm-job-name", name])
    assert res.exit_code == 1
    assert res.stdout == "" and res.stderr.count("\n") == 1, (res.stdout, res.stderr)
    assert res.stderr.startswith("Error: slurm: sbatch refused the jobs: ")
    assert "Invalid partition" in res.stderr
    assert our_jobs(name) == []


def test_a_task_that_raises_or_dies_is_one_line(tmp_path: Path, name: str,
                                                partition: str) -> None:
    runner = SlurmRunner(SlurmOptions(folder=tmp_path / "j", partition=partition, job_name=name,
                                      grace_s=3.0))
    try:
        assert runner.map(math.sqrt, [4.0, 9.0]) == [2.0, 3.0]
        with pytest.raises(ExecutorError) as raised:
            runner.map(math.sqrt, [1.0, -1.0])
        msg = str(raised.value)
        assert "\n" not in msg and msg.startswith("slurm: job ") and msg.endswith(
            f"failed: ValueError: math domain error (logs: {tmp_path / 'j'})"), msg
        with pytest.raises(ExecutorError, match=r"^slurm: job \S+ ended \((FAILED|left the "
                                                r"queue)\) without a result \(logs: "):
            runner.map(os._exit, [3])
    finally:
        runner.close()
    assert (tmp_path / "j").is_dir()  # kept after a failure, for its logs
