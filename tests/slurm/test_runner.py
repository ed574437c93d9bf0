"""The one command runner: bytes in and out, decoded so that no output can make it raise."""

from __future__ import annotations

import os

import pytest

from slurm_rl.slurm.runner import SubprocessRunner


def test_output_that_is_not_utf8_is_replaced_not_raised() -> None:
    result = SubprocessRunner().run(["printf", "a\\377b\\342\\200c\\n"])
    assert result.ok and result.stdout == "a\ufffdb\ufffdc\n"


def test_standard_input_is_sent_as_utf8() -> None:
    result = SubprocessRunner().run(["cat"], input="héllo\u2028\n")
    assert result.stdout == "héllo\u2028\n"


def test_environment_overlay_sets_and_removes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    result = SubprocessRunner().run(["env"], env={"SQUEUE_FORMAT": None, "SQUEUE_FORMAT2": "x"})
    lines = result.stdout.splitlines()
    assert "SQUEUE_FORMAT2=x" in lines and not any(s.startswith("SQUEUE_FORMAT=") for s in lines)
    assert os.environ["SQUEUE_FORMAT"] == "%i"  # the daemon's own environment is untouched


def test_missing_command_and_timeout_are_results() -> None:
    assert SubprocessRunner().run(["no-such-command-slurm-rl"]).returncode == 127
    slow = SubprocessRunner().run(["sh", "-c", "printf '\\377'; sleep 5"], timeout_s=0.5)
    assert slow.returncode == 124 and slow.controller_unavailable


@pytest.mark.slurm
def test_scontrol_reads_commands_from_standard_input() -> None:
    result = SubprocessRunner().run(["scontrol"], input="show partition gpu\n")
    assert result.ok and "PartitionName=gpu" in result.stdout
