"""Bad input: one clear line naming the flag or line, a non-zero exit, and no job in squeue."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_jobs import RLSBATCH, Jobs

pytestmark = pytest.mark.slurm

GOOD = "#!/bin/sh\ntrue\n"


def _case(script: str | None, args: list[str], message: str, code: int = 2
          ) -> tuple[str | None, list[str], str, int]:
    return script, args, message, code


CASES = {
    "deadline-unparsable": _case(GOOD, ["--rl-deadline", "tomorrow"],
                                 "--rl-deadline: can't read 'tomorrow'"),
    "deadline-no-unit": _case(GOOD, ["--rl-deadline=+6"], "--rl-deadline: can't read '+6'"),
    "deadline-past": _case(GOOD, ["--rl-deadline", "2020-01-01T00:00"],
                           "--rl-deadline: 2020-01-01T00:00 is in the past"),
    "deadline-zero": _case(GOOD, ["--rl-deadline", "+0s"], "--rl-deadline: '+0s' is not in the"),
    "gpus-min-above-max": _case(GOOD, ["--rl-gpus", "8-2"],
                                "--rl-gpus: 8-2: the minimum (8) is above the maximum (2)"),
    "gpus-unparsable": _case(GOOD, ["--rl-gpus", "two"], "--rl-gpus: can't read 'two'"),
    "gpus-more-than-cluster": _case(GOOD, ["--rl-gpus", "2-64"],
                                    "--rl-gpus: 2-64: partition gpu has only 16 GPUs"),
    "gpus-min-above-partition": _case(GOOD, ["--rl-gpus", "17-20"],
                                      "--rl-gpus: 17-20: partition gpu has only 16 GPUs"),
    "gpus-no-even-split": _case(GOOD, ["--rl-gpus", "5-5"],
                                "--rl-gpus: 5-5: the smallest even split over 2 node(s) is 6 "
                                "GPUs (3 per node)"),
    "gpus-no-even-split-on-nodes": _case(GOOD, ["--rl-gpus", "3-3", "-N", "2"],
                                         "--rl-gpus: 3-3: the smallest even split over 2 node(s)"
                                         " is 4 GPUs (2 per node)"),
    "deadline-past-date": _case(GOOD, ["--rl-deadline", "2026-01-01"],
                                "--rl-deadline: 2026-01-01 is in the past"),
    "gpus-sbatch-request-outside": _case(GOOD, ["--rl-gpus", "1-2", "--gres=gpu:4"],
                                         "--gres=gpu:4 asks for 4 GPUs, outside the range"),
    "gpus-per-task": _case(GOOD, ["--rl-gpus", "1-2", "--gpus-per-task=1"],
                           "--rl-gpus can't be combined with --gpus-per-task"),
    "gpus-unknown-partition": _case(GOOD, ["--rl-gpus", "1-2", "-p", "nope"],
                                    "--rl-gpus: sinfo shows no partition 'nope'"),
    "class-unknown": _case(GOOD, ["--rl-class", "gold"],
                           "--rl-class: unknown service class 'gold' (valid: critical, standard,"
                           " besteffort)"),
    "hard-without-deadline": _case(GOOD, ["--rl-hard"], "--rl-hard: a hard deadline needs"),
    "steps-not-a-number": _case(GOOD, ["--rl-steps", "many"], "--rl-steps: 'many' is not a"),
    "model-bad-name": _case(GOOD, ["--rl-model", "my model"], "--rl-model: 'my model': use"),
    "inference-unknown": _case(GOOD, ["--rl-inference", "alexnet"],
                               "--rl-inference: unknown model 'alexnet'; valid: vgg, resnet, "
                               "mobilenet, bert, gpt"),
    "inference-too-long": _case(GOOD, ["--rl-inference", "mobilenet" * 20],
                                "--rl-inference: unknown model 'mobilenetmobilenetmobilenetmobil"
                                "enetm...'"),
    "inference-non-ascii": _case(GOOD, ["--rl-inference", "mobil\u0435net"],
                                 "--rl-inference: unknown model 'mobil?net'"),
    "inference-a-path": _case(GOOD, ["--rl-inference", "/etc/shadow"],
                              "(a profile file: run `slurm-rl plan FILE` in the job)"),
    "inference-empty": _case(GOOD, ["--rl-inference="], "--rl-inference: unknown model ''"),
    "elastic-no-requeue": _case(GOOD, ["--rl-elastic", "--no-requeue"],
                                "--rl-elastic: an elastic job is resized by requeueing it"),
    "unknown-rl-flag": _case(GOOD, ["--rl-deadlin", "+1h"], "unknown option --rl-deadlin"),
    "rl-flag-missing-value": _case(None, ["--rl-class"], "--rl-class needs a value"),
    "script-missing": _case(None, ["/no/such/dir/job.sh"],
                            "/no/such/dir/job.sh: can't read the job script: No such file"),
    "script-is-a-directory": _case(None, ["/tmp"],
                                   "/tmp: can't read the job script: Is a directory"),
    "steps-too-large": _case(GOOD, ["--rl-steps", "9" * 150],
                             "--rl-steps: '9999999999999999999999999999999999999...' is too "
                             "large (at most 9007199254740991)"),
    "comment-with-a-tag": _case(GOOD, ["--comment", "{rl1:c=critical}", "--rl-steps", "5"],
                                "--comment: may not hold a slurm-rl tag"),
    "comment-with-progress": _case(GOOD, ["--comment", "a {rlp:1/2}", "--rl-steps", "5"],
                                   "--comment: may not hold a slurm-rl tag"),
    "comment-too-long": _case(GOOD, ["--comment", "x" * 950],
                              "--comment plus the slurm-rl intent is 1027 bytes"),
    "sbatch-line-unknown-option": _case(
        "#!/bin/sh\n#SBATCH -t 5\n#SBATCH --bogus\ntrue\n", [],
        "job.sh line 3: unrecognized option '--bogus'"),
    "sbatch-line-stray-word": _case("#!/bin/sh\n#SBATCH -t 5 minutes\ntrue\n", [],
                                    "job.sh line 2: 'minutes' is not an option"),
    "sbatch-line-unmatched-quote": _case("#!/bin/sh\n#SBATCH --comment 'oops\ntrue\n", [],
                                         "job.sh line 2: unmatched ' quote"),
    "sbatch-line-missing-value": _case("#!/bin/sh\n#SBATCH -t 5 -J\ntrue\n", [],
                                       "job.sh line 2: option requires an argument -- 'J'"),
    "sbatch-line-rl-flag": _case("#!/bin/sh\n#SBATCH --rl-hard\ntrue\n", [],
                                 "job.sh line 2: --rl-hard is an rlsbatch option"),
    "rlsbatch-line-bad-value": _case("#!/bin/sh\n#RLSBATCH --rl-class gold\ntrue\n", [],
                                     "job.sh line 2: --rl-class: unknown service class 'gold'"),
    "rlsbatch-line-sbatch-option": _case("#!/bin/sh\n#RLSBATCH --time=5\ntrue\n", [],
                                         "job.sh line 2: --time is not an rlsbatch option"),
    "rlsbatch-line-past-deadline": _case(
        "#!/bin/sh\n#RLSBATCH --rl-deadline 2001-01-01\ntrue\n", [],
        "job.sh line 2: --rl-deadline: 2001-01-01 is in the past"),
    "hetjob-with-rl-flags": _case("#!/bin/sh\n#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 2\ntrue\n",
                                  ["--rl-class=critical"], "job.sh: heterogeneous jobs"),
}


@pytest.mark.parametrize("key", list(CASES))
def test_bad_input_is_refused_and_nothing_is_submitted(key: str, jobs: Jobs,
                                                       tmp_path: Path) -> None:
    script, args, message, code = CASES[key]
    argv = [RLSBATCH, "-J", jobs.name, *args]
    if script is not None:
        path = tmp_path / "job.sh"
        path.write_text(script)
        argv.append(str(path))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rlsbatch: error: ")
    assert message in lines[0]
    assert jobs.in_queue() == []


def test_bad_input_on_stdin_names_stdin(jobs: Jobs) -> None:
    proc = subprocess.run([RLSBATCH, "-J", jobs.name], input="#!/bin/sh\n#SBATCH --oops\ntrue\n",
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr == "rlsbatch: error: stdin line 2: unrecognized option '--oops'\n"
    assert jobs.in_queue() == []


def test_dry_run_submits_nothing(jobs: Jobs, tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(GOOD)
    proc = subprocess.run([RLSBATCH, "--rl-dry-run", "--rl-gpus", "6-8", "-J", jobs.name,
                           str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (f"sbatch command: sbatch -J {jobs.name} --gres=gpu:3 --nodes=2 "
            f"'--comment={{rl1:g=6-8}}' {path}") in proc.stdout
    assert "intent: Intent(" in proc.stdout
    assert jobs.in_queue() == []
