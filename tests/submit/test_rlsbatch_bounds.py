"""Out-of-bound numbers and non-ASCII digits on rlsbatch's flags and #RLSBATCH lines, on the
real test cluster: one line naming the flag (and line), exit 2, nothing in squeue.

Before these bounds, `--rl-steps 99999999999999999999999999` and `--rl-deadline +99999999999w`
were submitted and then broke every daemon cycle; `--rl-gpus １-２` was accepted.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_jobs import RLSBATCH, Jobs

pytestmark = pytest.mark.slurm

UNICODE_THREES = {
    "arabic-indic": "\u0663", "extended-arabic-indic": "\u06f3", "devanagari": "\u0969",
    "bengali": "\u09e9", "thai": "\u0e53", "tibetan": "\u0f23", "nko": "\u07c3",
    "fullwidth": "\uff13", "math-bold": "\U0001d7d1", "superscript": "\u00b3",
    "subscript": "\u2083", "circled": "\u2462",
}
# flag -> (value with a digit X, what the message says)
DIGIT_FLAGS = {
    "rl-gpus": ("X-4", "--rl-gpus: can't read"),
    "rl-steps": ("1X", "--rl-steps: "),
    "rl-batch-size": ("X2", "--rl-batch-size: "),
    "rl-deadline": ("+Xh", "--rl-deadline: can't read"),
}
CASES: dict[str, tuple[list[str], str]] = {
    f"{flag}-{name}": ([f"--{flag}", value.replace("X", digit)], message)
    for flag, (value, message) in DIGIT_FLAGS.items()
    for name, digit in UNICODE_THREES.items()
}
CASES.update({
    "steps-huge": (["--rl-steps", "99999999999999999999999999"],
                   "--rl-steps: '99999999999999999999999999' is too large (at most "
                   "9007199254740991)"),
    "steps-2^53": (["--rl-steps", str(2**53)], "--rl-steps: '9007199254740992' is too large"),
    "batch-2^63": (["--rl-batch-size", str(2**63)], "--rl-batch-size: '9223372036854775808' is"
                   " too large"),
    "steps-zero-padded-zero": (["--rl-steps", "0" * 30], "is not a positive whole number"),
    "deadline-weeks": (["--rl-deadline", "+99999999999w"],
                       "--rl-deadline: +99999999999w is more than 10 years ahead"),
    "deadline-11-years": (["--rl-deadline", "+4018d"], "is more than 10 years ahead"),
    "deadline-5000-digits": (["--rl-deadline", "+" + "9" * 5000 + "s"],
                             "is more than 10 years ahead"),
    "deadline-year-9999": (["--rl-deadline", "9999-12-31"],
                           "--rl-deadline: 9999-12-31 is more than 10 years ahead"),
    "deadline-year-1": (["--rl-deadline", "0001-01-01"], "--rl-deadline: 0001-01-01 is out of"),
    "deadline-fullwidth-iso": (["--rl-deadline", "\uff12\uff10\uff13\uff10-01-01"],
                               "--rl-deadline: can't read"),
    "deadline-nan": (["--rl-deadline", "nan"], "--rl-deadline: can't read 'nan'"),
    "gpus-over-cap": (["--rl-gpus", "1-4097"], "--rl-gpus: 1-4097: at most 4096 GPUs"),
    "gpus-huge": (["--rl-gpus", "1-99999999999999999999"], "at most 4096 GPUs"),
    "gpus-fullwidth-range": (["--rl-gpus", "\uff11-\uff12"], "--rl-gpus: can't read '１-２'"),
    "gpus-sbatch-count-huge": (["--rl-gpus", "1-2", "--gpus=99999999999999999999"],
                               "asks for 9007199254740992 GPUs, outside the range"),
})
SCRIPT_CASES = {
    "line-steps-huge": ("--rl-steps 99999999999999999999999999",
                        "job.sh line 2: --rl-steps: '99999999999999999999999999' is too large"),
    "line-deadline-weeks": ("--rl-deadline=+99999999999w",
                            "job.sh line 2: --rl-deadline: +99999999999w is more than 10 years"),
    "line-gpus-arabic": ("--rl-gpus \u0663-\u0664", "job.sh line 2: --rl-gpus: can't read"),
    "line-batch-fullwidth": ("--rl-batch-size \uff11\uff12",
                             "job.sh line 2: --rl-batch-size: '１２' is not a positive"),
    "line-deadline-year-9999": ("--rl-deadline 9999-12-31T00:00",
                                "job.sh line 2: --rl-deadline: 9999-12-31T00:00 is more than"),
    "line-gpus-over-cap": ("--rl-gpus 2-5000", "job.sh line 2: --rl-gpus: 2-5000: at most 4096"),
}


def run_rlsbatch(jobs: Jobs, args: list[str], script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLSBATCH, "-J", jobs.name, *args, str(script)], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL)


def assert_refused(proc: subprocess.CompletedProcess[str], message: str, jobs: Jobs) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rlsbatch: error: ") and len(lines[0]) < 220
    assert message in lines[0], lines[0]
    assert jobs.in_queue() == []


@pytest.mark.parametrize("key", list(CASES))
def test_flag_out_of_bounds_is_refused(key: str, jobs: Jobs, tmp_path: Path) -> None:
    args, message = CASES[key]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    assert_refused(run_rlsbatch(jobs, args, script), message, jobs)


@pytest.mark.parametrize("key", list(SCRIPT_CASES))
def test_rlsbatch_line_out_of_bounds_is_refused(key: str, jobs: Jobs, tmp_path: Path) -> None:
    line, message = SCRIPT_CASES[key]
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#RLSBATCH {line}\ntrue\n", encoding="utf-8")
    assert_refused(run_rlsbatch(jobs, [], script), message, jobs)


@pytest.mark.parametrize("option", ["--gres=gpu:\u00b2", "--gres=gpu:\u0663",
                                    "--gpus=\uff12", "--gpus-per-node=\u00b2"])
def test_non_ascii_sbatch_gpu_counts_never_crash_rlsbatch(option: str, jobs: Jobs,
                                                          tmp_path: Path) -> None:
    """Not a count to rlsbatch (it used to crash on int('²')): sbatch judges the value."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    proc = run_rlsbatch(jobs, ["--rl-gpus", "1-2", "--hold", option], script)
    assert "Traceback" not in proc.stderr
    if proc.returncode == 0:  # sbatch took it as a GPU type name: one job, as sbatch would
        assert len(jobs.in_queue()) == 1
    else:
        assert jobs.in_queue() == []
