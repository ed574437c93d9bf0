"""Deadline only (submit/deadline_only.py): `rlsbatch --rl-deadline +6h --rl-model NAME job.sh`
with no GPU or CPU request is submitted held with the GPU range 1..max for the daemon to size;
bad input is one line, exit 2, nothing submitted. Pure: sinfo is a recorded-shape fake
(`parts`), no sbatch runs (the cluster tests: tests/daemon/test_sizing.py,
test_sizing_cpus_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.config import SizingConfig
from slurm_rl.perfmodel import curve_for
from slurm_rl.submit import cli
from slurm_rl.submit.cli import make_submission
from slurm_rl.submit.deadline_only import DEFAULT_MAX_GPUS, NO_MODEL, feedback, site_max_gpus
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.feedback import Snapshot

NOW = 1_800_000_000.0
H = 3600.0


def parts(total: int = 16, per_node: int = 4) -> dict[str, tuple[bool, int, int]]:
    """What sinfo says of the test cluster (one default partition of 4 nodes x 4 GPUs)."""
    return {"gpu": (True, total, per_node)}


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/sh\ntrue\n")
    return path


@pytest.fixture(autouse=True)
def no_site_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_RL_CONFIG", "")  # and /etc/slurm-rl is absent on test hosts


def submit(args: list[str], script: Path, env: dict[str, str] | None = None,
           total: int = 16) -> cli.Submission:
    return make_submission([*args, str(script)], env or {}, lambda: b"",
                           query=lambda: parts(total), now=NOW)


def test_the_default_is_the_configs() -> None:
    assert DEFAULT_MAX_GPUS == SizingConfig().max_gpus


def test_deadline_and_model_alone_is_submitted_held_with_a_range(script: Path) -> None:
    sub = submit(["--rl-deadline", "+6h", "--rl-model", "resnet50", "-J", "x"], script)
    assert sub.argv[:4] == ["sbatch", "-J", "x", "--hold"]
    assert sub.argv[4].startswith("--comment={rl1:d=") and sub.argv[5] == str(script)
    assert sub.intent is not None
    assert (sub.intent.gpus_min, sub.intent.gpus_max) == (1, DEFAULT_MAX_GPUS)
    assert sub.comment == f"{{rl1:d={int(NOW) + 6 * 3600},g=1-8,m=resnet50}}"
    assert sub.sized == DEFAULT_MAX_GPUS
    assert not any(w.startswith(("--gres", "--nodes")) for w in sub.argv)


def test_the_range_is_capped_by_the_site_and_the_partition(script: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["--rl-deadline", "+6h", "--rl-model", "resnet50"]
    assert submit(args, script, total=2).sized == 2
    site = tmp_path / "site.toml"
    site.write_text("[sizing]\nmax_gpus = 4\n")
    monkeypatch.setenv("SLURM_RL_CONFIG", str(site))
    assert site_max_gpus() == 4
    sub = submit(args, script)
    assert sub.intent is not None and (sub.intent.gpus_min, sub.intent.gpus_max) == (1, 4)
    site.write_text("[sizing]\nmax_gpus = 'lots'\n")  # the daemon refuses it; rlsbatch: default
    assert site_max_gpus() == DEFAULT_MAX_GPUS


def test_on_a_script_line_too(tmp_path: Path) -> None:
    path = tmp_path / "train.sh"
    path.write_text("#!/bin/sh\n#RLSBATCH --rl-deadline=+1d --rl-model gpt2\ntrue\n")
    sub = make_submission([str(path)], {}, lambda: b"", query=lambda: parts(), now=NOW)
    assert "--hold" in sub.argv and sub.sized == DEFAULT_MAX_GPUS


@pytest.mark.parametrize(("args", "env", "line"), [
    (["-c", "2"], {}, ""),
    (["--gres=gpu:1"], {}, ""),
    (["-n", "4"], {}, ""),
    (["-N", "2"], {}, ""),
    (["--exclusive"], {}, ""),
    (["--array=0-3"], {}, ""),
    ([], {"SBATCH_GPUS": "2"}, ""),
    ([], {"SBATCH_CPUS_PER_GPU": "4"}, ""),
    ([], {}, "#SBATCH --cpus-per-task=4\n"),
    ([], {}, "#SBATCH --gpus-per-node=1\n"),
], ids=["cpus", "gres", "tasks", "nodes", "exclusive", "array", "env-gpus", "env-cpus-per-gpu",
        "script-cpus", "script-gpus"])
def test_a_job_that_asks_for_resources_keeps_its_own_request(
        tmp_path: Path, args: list[str], env: dict[str, str], line: str) -> None:
    path = tmp_path / "job.sh"
    path.write_text(f"#!/bin/sh\n{line}true\n")
    sub = make_submission(["--rl-deadline", "+6h", "--rl-model", "resnet50", *args, str(path)],
                          env, lambda: b"", query=lambda: parts(), now=NOW)
    assert "--hold" not in sub.argv and sub.sized == 0
    assert sub.intent is not None and sub.intent.gpus_min is sub.intent.gpus_max is None


def test_a_gpu_range_is_not_the_deadline_only_form(script: Path) -> None:
    sub = submit(["--rl-deadline", "+6h", "--rl-gpus", "2-4"], script)
    assert sub.sized == 0 and "--hold" not in sub.argv and "--gres=gpu:2" in sub.argv


# --- bad input: one line naming the flag, exit 2, sbatch never run ------------------------------

@pytest.mark.parametrize(("args", "total", "message"), [
    (["--rl-deadline", "+6h"], 16, NO_MODEL),
    (["--rl-deadline", "2020-01-01T00:00", "--rl-model", "resnet50"], 16,
     "--rl-deadline: 2020-01-01T00:00 is in the past (now is "),
    (["--rl-deadline", "+6h", "--rl-model", "resnet50"], 0,
     "--rl-deadline: partition gpu has no GPUs for the slurm-rl daemon to size this job with"),
    (["--rl-deadline", "+6h", "--rl-gpus", "2-64"], 16,
     "--rl-gpus: 2-64: partition gpu has only 16 GPUs"),
], ids=["no-model", "past", "no-gpus", "range-beyond-partition"])
def test_bad_input_is_one_line_and_exit_2(script: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, args: list[str],
                                         total: int, message: str) -> None:
    def never(*_: object) -> None:
        raise AssertionError("sbatch was run")

    monkeypatch.setattr(cli.os, "execvp", never)
    monkeypatch.setattr(cli, "_sinfo_query", lambda: parts(total))
    assert cli.main([*args, str(script)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith(f"rlsbatch: error: {message}")
    with pytest.raises(UsageError):
        submit(args, script, total=total)


# --- what rlsbatch says at submission -----------------------------------------------------------

def steps_for(hours: float, gpus: int) -> int:
    """resnet50 steps that take `hours` at `gpus` GPUs (the profiled throughput)."""
    return int(hours * H * curve_for("resnet50", None).throughput(gpus))


def say(snapshot: Snapshot, steps: int, deadline_h: float, hard: bool = False,
        force: bool = False) -> tuple[list[str], str | None]:
    return feedback(deadline=NOW + deadline_h * H, hard=hard, max_gpus=8, time_limit_s=None,
                    total_steps=steps, model="resnet50", batch_size=None, now=NOW, force=force,
                    snapshot=snapshot)


def test_it_names_the_fewest_gpus_predicted_to_meet_the_deadline() -> None:
    steps = steps_for(10.0, 1)  # 10 h on one GPU
    idle = Snapshot(NOW - 5, 16, [], [])
    (line,), refusal = say(idle, steps, 6.0)
    assert refusal is None
    expected = next(g for g in range(1, 9)
                    if steps / curve_for("resnet50", None).throughput(g) <= 6 * H)
    assert expected > 1
    assert line.startswith("rlsbatch: submitted held: the slurm-rl daemon picks this job's "
                           "GPUs (1-8) and CPUs, then releases it; ")
    assert f"; {expected} GPUs predicted to meet the deadline " in line


def test_an_infeasible_hard_deadline_is_refused_and_force_submits() -> None:
    busy = Snapshot(NOW - 5, 16, [(NOW + 20 * H, 16)], [])  # nothing free for 20 h
    lines, refusal = say(busy, steps_for(1.0, 1), 6.0, hard=True)
    assert lines == [] and refusal is not None
    assert refusal.startswith("--rl-deadline: the deadline ")
    assert "looks infeasible even at 8 GPUs" in refusal
    assert refusal.endswith("--rl-force submits anyway")
    (line,), refusal = say(busy, steps_for(1.0, 1), 6.0, hard=True, force=True)
    assert refusal is None and line.endswith("submitted anyway (--rl-force)")
    (line,), refusal = say(busy, steps_for(1.0, 1), 6.0)
    assert refusal is None and line.endswith("submitted anyway (a soft deadline)")


def test_without_a_recent_daemon_it_says_the_job_stays_held(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setenv("SLURM_RL_DB", str(tmp_path / "none.db"))
    lines, refusal = feedback(deadline=NOW + H, hard=True, max_gpus=8, time_limit_s=None,
                              total_steps=10, model="resnet50", batch_size=None, now=NOW,
                              force=False)
    assert refusal is None
    assert lines[1] == (f"rlsbatch: warning: no slurm-rl database at {tmp_path / 'none.db'} (is "
                        "the daemon running here?): the job stays held until the daemon runs")
