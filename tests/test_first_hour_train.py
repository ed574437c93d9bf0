"""A new user's mistakes with `slurm-rl train` and with checkpoints: one line, the right exit
code, nothing written.

As in test_first_hour_errors.py, the commands run installed, in a subprocess: no traceback,
one `Error:` line naming the file, the table or option and the bad value, the exit status (2
for a bad option value, 1 for a scenarios file that does not check, as for `evaluate` and the
daemon's config), and no file or folder left behind. The scenarios file is checked whole
before any work starts, so each of these takes the command's start-up time only. A checkpoint
that does not load never quotes torch's advice to load it with `weights_only=False`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

BIN = Path(sys.executable).parent
TINY = """
[train]
iterations = 1
steps_per_worker = 16
workers = 1
imitation_epochs = 0
max_jobs = 16
validate_every = 1
[[scenario]]
trace = "data:itp-deadline-cluster01.csv"
windows = ["0:30"]
[[validation]]
trace = "data:itp-deadline-cluster03.csv"
windows = ["0:30"]
"""
"""Seconds of training (one iteration on 30-job windows)."""


def run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "slurm-rl"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ})


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "weights_only" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, text
    return lines[0]


def garbage(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 8)  # not a pickle, not a zip: random-looking bytes
    return path


# -- the scenarios file --------------------------------------------------------------------

@pytest.mark.parametrize(("change", "words"), [
    (("iterations = 1", 'iterations = "ten"'), ["[train] iterations", "integer", "'ten'"]),
    (('"data:itp-deadline-cluster01.csv"', '"data:nosuch.csv"'),
     ["[[scenario]] #1 trace", "no shipped trace 'nosuch.csv'", "itp-deadline-cluster03.csv"]),
    (('windows = ["0:30"]\n[[validation]]', 'windows = ["abc"]\n[[validation]]'),
     ["[[scenario]] #1 windows", "START:COUNT", "'abc'"]),
    (("[[validation]]\n", "[[validation]]\nwindow = 3\n"),
     ["[[validation]] #1", "unknown key(s) window", "valid: family, format, gpus_per_node"]),
])
def test_a_bad_scenarios_file_is_one_line_before_any_work(tmp_path: Path,
                                                          change: tuple[str, str],
                                                          words: list[str]) -> None:
    text = TINY.replace(*change)
    assert text != TINY
    bad = tmp_path / "s.toml"
    bad.write_text(text)
    proc = run("train", "--scenarios", str(bad), "--out", "out/x.pt", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert str(bad) in line and all(w in line for w in words), line
    assert "iter 0" not in proc.stdout  # (refused before training started)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@pytest.mark.parametrize(("change", "words"), [
    (('windows = ["0:30"]\n[[validation]]', 'windows = "0:30"\n[[validation]]'),
     ["[[scenario]] #1 windows", "expected an array", "'0:30'"]),
    (('windows = ["0:30"]\n[[validation]]', 'windows = ["0:30"]\nloads = [0]\n'
                                            '[[validation]]'),
     ["[[scenario]] #1 loads", "more than 0", "(0)"]),
    (('windows = ["0:30"]\n[[validation]]', 'windows = ["0:30"]\nseeds = [true]\n'
                                            '[[validation]]'),
     ["[[scenario]] #1 seeds", "whole numbers", "True"]),
    (('windows = ["0:30"]\n[[validation]]', 'windows = ["0:30"]\nformat = "csv"\n'
                                            '[[validation]]'),
     ["[[scenario]] #1 format", "unknown format 'csv'", "itp-deadline"]),
    (('"data:itp-deadline-cluster01.csv"', '"data:itp-cluster01.swf"'),
     ["[[scenario]] #1 trace", "data:itp-cluster01.swf looks like an SWF trace",
      'set format = "swf"']),
    (('"data:itp-deadline-cluster01.csv"', '"itp-deadline-cluster01.csv"'),
     ["no such file: itp-deadline-cluster01.csv",
      "the shipped trace is data:itp-deadline-cluster01.csv"]),
    (('"data:itp-deadline-cluster01.csv"', '"data:itp-deadline-cluster02.csv"'),
     ["HELD_OUT"]),
    (('windows = ["0:30"]\n', 'windows = ["99999:30"]\n'),
     ["[[scenario]] #1 windows", "'99999:30' starts after the last job"]),
    (('trace = "data:itp-deadline-cluster03.csv"\nwindows = ["0:30"]',
      'trace = "data:itp-deadline-cluster03.csv"\nwindows = ["0:3"]\nloads = [0.01]'),
     ["[[validation]] #1", "no decision to make"]),
    (("workers = 1", "workers = 0"), ["[train] workers", "at least 1", "0"]),
    (("[train]\n", "[train]\nlearning_rate = true\n"), ["[train] learning_rate", "a number"]),
    (("[train]\n", "[train]\nbatch = 3\n"), ["[train] unknown key(s) batch", "valid:"]),
    (("[train]\n", "[trian]\n"), ["unknown table(s) trian", "valid: scenario, train"]),
])
def test_every_field_of_the_scenarios_file_is_checked(tmp_path: Path, change: tuple[str, str],
                                                      words: list[str]) -> None:
    from slurm_rl.rl.config import TrainConfig
    from slurm_rl.rl.scenarios import read_scenarios
    from slurm_rl.sim.config import from_table

    text = TINY.replace(*change)
    assert text != TINY
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        over, _, _ = read_scenarios(path)
        from_table(TrainConfig, over, where="train")
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_the_tiny_scenarios_file_trains_and_writes_its_three_files_only(tmp_path: Path) -> None:
    good = tmp_path / "s.toml"
    good.write_text(TINY)
    proc = run("train", "--scenarios", str(good), "--out", "out/deep/x.pt", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "deep").iterdir()) == [
        "x.csv", "x.png", "x.pt"]  # (no temporary file left)


def test_a_run_that_fails_after_training_started_writes_nothing(tmp_path: Path) -> None:
    """The checkpoint is written once, at the end (before: the first one at iteration 0, so a
    run that failed later left a checkpoint that looked finished)."""
    from slurm_rl.executor import LocalRunner
    from slurm_rl.rl.config import TrainConfig
    from slurm_rl.rl.env import Scenario
    from slurm_rl.rl.train import train

    class FailsLater(LocalRunner):
        calls = 0

        def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
            self.calls += 1
            if self.calls > 3:  # (references, imitation batch, validation; then a rollout)
                raise RuntimeError("a worker died")
            return super().map(fn, items)

    cfg = TrainConfig(iterations=2, steps_per_worker=16, workers=1, imitation_epochs=1,
                      imitation_steps=16, max_jobs=16, validate_every=1)
    sc = (Scenario(trace="data:itp-deadline-cluster03.csv", window="0:30"),)
    out = tmp_path / "out" / "x.pt"
    with pytest.raises(RuntimeError, match="a worker died"):
        train(cfg, sc, sc, out, echo=lambda *_: None, runner=FailsLater(1))
    assert list(tmp_path.iterdir()) == []


# -- checkpoints ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["garbage", "missing"])
def test_simulate_with_a_checkpoint_that_does_not_load(tmp_path: Path, kind: str) -> None:
    ck = garbage(tmp_path / "garbage.pt") if kind == "garbage" else tmp_path / "missing.pt"
    proc = run("simulate", "--trace", "data:itp-deadline-cluster10.csv", "--format",
               "itp-deadline", "--window", "0:20", "--load", "1", "--policy", "rl",
               "--policy-option", f"checkpoint={ck.name}", "--jobs-out", "jobs.csv",
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    why = "not a slurm-rl checkpoint" if kind == "garbage" else "No such file"
    assert "'--policy-option'" in line and f"checkpoint {ck.name}" in line and why in line
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["garbage.pt"] if kind == "garbage" else [])


def test_train_init_with_a_checkpoint_that_does_not_load(tmp_path: Path) -> None:
    ck = garbage(tmp_path / "g.pt")
    (tmp_path / "s.toml").write_text(TINY)
    proc = run("train", "--scenarios", "s.toml", "--init", ck.name, "--out", "out/x.pt",
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert "--init: checkpoint g.pt does not load: not a slurm-rl checkpoint" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.pt", "s.toml"]


def _foreign_pickles(tmp_path: Path) -> list[Path]:
    import numpy as np

    objects = tmp_path / "objects.pt"
    torch.save({"config": {}, "state_dict": {"w": np.zeros(3)}}, objects)
    cut = tmp_path / "cut.pt"
    torch.save({"config": {}, "state_dict": {}}, cut)
    cut.write_bytes(cut.read_bytes()[:200])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    return [garbage(tmp_path / "garbage.pt"), objects, cut, empty]


def test_every_checkpoint_reader_says_one_short_line(tmp_path: Path) -> None:
    """The `rl` policy's reader, the trainer's and the inference agents': one line, the path,
    a short reason, never torch's advice (weights_only=True stays)."""
    from slurm_rl.checkpoint_errors import CheckpointError
    from slurm_rl.inference import dqn
    from slurm_rl.policies.rl import checkpoint
    from slurm_rl.rl import model

    readers = [(checkpoint.load, "slurm-rl"), (model.load, "slurm-rl"), (dqn.load, "DRM-DQL")]
    for path in _foreign_pickles(tmp_path):
        for read, kind in readers:
            with pytest.raises(CheckpointError) as err:
                read(path)
            msg = str(err.value)
            assert msg.startswith(f"{path}: not a {kind} checkpoint ("), msg
            assert "\n" not in msg and "weights_only" not in msg and len(msg) < 300, msg
    for read, _ in readers:
        with pytest.raises(CheckpointError, match="(?i)no such file"):
            read(tmp_path / "nothere.pt")


def test_inference_evaluate_with_a_checkpoint_that_does_not_load(tmp_path: Path) -> None:
    """A folder of DRM-DQL checkpoints where one is not a checkpoint: one line naming the
    option and the file, exit 2, no output folder."""
    from slurm_rl.inference import experiments

    ck = tmp_path / "cks"
    ck.mkdir()
    garbage(experiments.checkpoint_path(ck, "drm", 0))
    proc = run("inference", "evaluate", "--checkpoint-dir", "cks", "--seeds", "0",
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    name = experiments.checkpoint_path(ck, "drm", 0).name
    assert "--checkpoint-dir" in line and name in line
    assert "not a DRM-DQL checkpoint" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cks"]
