"""rlsbatch is a drop-in sbatch: for many flag combinations, `sbatch --hold ...` and
`rlsbatch --hold ...` (with and without rlsbatch's own flags) must give jobs whose
`scontrol show job -dd` records agree field by field, ids and times aside, and whose comments
differ only by slurm-rl's tag. Where sbatch refuses a request, rlsbatch must fail the same way.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from job_records import differences, normalise, parse_records, replace_job_id
from slurm_jobs import RLSBATCH, Jobs, show_job

from slurm_rl.core import Intent, ServiceClass
from slurm_rl.submit.cli import make_submission
from slurm_rl.submit.intent import decode_comment

pytestmark = pytest.mark.slurm

SCRIPT = "#!/bin/sh\necho hello \"$@\"\n"
SCRIPT_WITH_DIRECTIVES = """#!/bin/bash
#SBATCH --time=7 -c 2
#SBATCH --mem=300M --comment="from the script"
#SBATCH --output=/dev/null # a comment
#RLSBATCH --rl-steps 77
echo hi
#SBATCH --job-name=ignored-after-the-first-command
"""
DEADLINE = "2031-01-01T00:00:00+00:00"
INTENT_FLAGS = [["--rl-deadline", DEADLINE], ["--rl-class", "critical"], ["--rl-steps=1000"],
                ["--rl-model", "resnet50"]]
INTENT = Intent(deadline=1924992000.0, service_class=ServiceClass.CRITICAL, total_steps=1000,
                model="resnet50")


@dataclass
class Case:
    id: str
    args: list[str] = field(default_factory=list)
    """sbatch options ({name}, {tmp}, {dep} are filled in)."""
    script: str | None = SCRIPT
    """Script text (None: no script, e.g. --wrap)."""
    stdin: bool = False
    script_args: list[str] = field(default_factory=list)
    rl: list[list[str]] = field(default_factory=list)
    """rlsbatch flags (each with its value) this case always adds (e.g. a GPU range)."""
    sbatch_extra: list[str] = field(default_factory=list)
    """What rlsbatch is expected to add for `rl` (given to plain sbatch for comparison)."""
    intent: Intent = field(default_factory=Intent)


CASES = [
    Case("plain"),
    Case("job-name", ["-J", "{name}"]),
    Case("nodes-tasks", ["-N", "2", "-n", "4"]),
    Case("attached-short-values", ["-N1", "-n2", "-c1"]),
    Case("bundled-short", ["-HOJ{name}"]),
    Case("tasks-cpus", ["--ntasks=3", "--cpus-per-task=2"]),
    Case("mem", ["--mem=2G"]),
    Case("mem-per-cpu", ["-n", "2", "--mem-per-cpu=500"]),
    Case("time", ["-t", "10"]),
    Case("time-long-min", ["--time=1:00:00", "--time-min=30"]),
    Case("partition", ["-p", "gpu"]),
    Case("abbreviated-long", ["--part=gpu", "--job", "{name}", "--ntasks-per-n=1"]),
    Case("gres", ["--gres=gpu:2"]),
    Case("gpus", ["--gpus=3"]),
    Case("gpus-per-node", ["--gpus-per-node=2", "-N", "2"]),
    Case("gpus-per-task", ["-n", "2", "--gpus-per-task=1"]),
    Case("output-error", ["-o", "{tmp}/out-%j.txt", "-e", "{tmp}/err-%j.txt"]),
    Case("array", ["--array=0-3"]),
    Case("array-step-limit", ["-a", "1-9:2%2", "-o", "{tmp}/a-%A_%a.out"]),
    Case("dependency", ["--dependency=afterok:{dep}"]),
    Case("dependency-kill-invalid", ["-d", "afterany:{dep}", "--kill-on-invalid-dep=yes"]),
    Case("comment", ["--comment", "user words, with  spaces"]),
    Case("comment-quotes", ["--comment=it's \"quoted\" {{braces}} #not-a-comment"]),
    Case("comment-from-script", script=SCRIPT_WITH_DIRECTIVES, intent=Intent(total_steps=77)),
    Case("comment-cmdline-over-script", ["--comment", "cmdline wins"],
         script=SCRIPT_WITH_DIRECTIVES, intent=Intent(total_steps=77)),
    Case("export-none", ["--export=NONE"]),
    Case("export-vars", ["--export=ALL,FOO=bar"]),
    Case("chdir", ["--chdir", "{tmp}"]),
    Case("begin", ["--begin=2031-01-01T00:00:00"]),
    Case("nice", ["--nice=10"]),
    Case("mail", ["--mail-type=END,FAIL", "--mail-user=someone@example.com"]),
    Case("requeue", ["--requeue"]),
    Case("no-requeue", ["--no-requeue"]),
    Case("exclusive", ["--exclusive"]),
    Case("wrap", ["--wrap", "echo wrapped; sleep 1"], script=None),
    Case("wrap-attached", ["--wrap=hostname", "-J", "{name}"], script=None),
    Case("stdin", stdin=True),
    Case("stdin-directives", stdin=True, script=SCRIPT_WITH_DIRECTIVES,
         intent=Intent(total_steps=77)),
    Case("script-args", script_args=["a", "b c", "-J", "--rl-hard"]),
    Case("double-dash", ["-J", "{name}", "--"], script_args=["x"]),
    Case("directives", script=SCRIPT_WITH_DIRECTIVES, intent=Intent(total_steps=77)),
    Case("parsable", ["--parsable"]),
    Case("sbatch-deadline", ["--deadline=2031-01-01T00:00:00", "-t", "5"]),
    Case("nodelist-exclude", ["--nodelist=node2", "-x", "node1"]),
    Case("tasks-per-node", ["-N", "2", "--ntasks-per-node=2"]),
    Case("misc-flags", ["--contiguous", "--overcommit", "--oversubscribe", "--spread-job",
                        "--use-min-nodes", "-k"]),
    Case("distribution-hint", ["-m", "cyclic", "--hint=nomultithread", "-n", "2"]),
    Case("signal-open-mode", ["--signal=B:USR1@60", "--open-mode=append"]),
    Case("profile-acctg", ["--profile=none", "--acctg-freq=task=30"]),
    Case("gpu-bind-freq", ["--gres=gpu:1", "--gpu-bind=closest", "--mem-per-gpu=100"]),
    Case("priority-wckey", ["--priority=100", "--wckey=abc"]),
    Case("qos", ["--qos=normal"]),
    Case("constraint-prefer", ["--constraint=fast", "--prefer=slow"]),
    # requests the cluster can never run: sbatch accepts them held, and so must rlsbatch
    Case("impossible", ["--gres=gpu:99", "-N", "9", "--mem=99999999", "--nice=abc"]),
    Case("dependency-on-unknown-job", ["--dependency=afterok:999999999"]),
    # rlsbatch's GPU range: the first request it adds must equal the sbatch flags given here
    Case("rl-gpus-one-node", rl=[["--rl-gpus", "2-8"]], sbatch_extra=["--gres=gpu:2"],
         intent=Intent(gpus_min=2, gpus_max=8)),
    Case("rl-gpus-two-nodes", rl=[["--rl-gpus=6-12"]], sbatch_extra=["--gres=gpu:3", "--nodes=2"],
         intent=Intent(gpus_min=6, gpus_max=12)),
    Case("rl-gpus-user-nodes", ["-N", "2"], rl=[["--rl-gpus", "4-8"]],
         sbatch_extra=["--gres=gpu:2"], intent=Intent(gpus_min=4, gpus_max=8)),
    Case("rl-gpus-with-gres", ["--gres=gpu:2"], rl=[["--rl-gpus", "1-4"], ["--rl-elastic"]],
         intent=Intent(gpus_min=1, gpus_max=4, elastic=True)),
    Case("rl-gpus-with-script-gpus", script="#!/bin/sh\n#SBATCH --gpus=3\ntrue\n",
         rl=[["--rl-gpus", "2-4"]], intent=Intent(gpus_min=2, gpus_max=4)),
]


def _fill(words: list[str], name: str, tmp: Path, dep: str) -> list[str]:
    return [w.format(name=name, tmp=tmp, dep=dep) for w in words]


def _norm_output(text: str, job_id: str | None) -> str:
    return replace_job_id(text, job_id) if job_id else text


_FEEDBACK = ("rlsbatch: predicted start ", "rlsbatch: no prediction: ",
             "rlsbatch: submitted held: ", "rlsbatch: warning: ")


def _without_feedback(text: str) -> str:
    """rlsbatch's own stderr lines for a job with --rl-deadline (submit/feedback.py) removed:
    the only output rlsbatch adds to sbatch's."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(_FEEDBACK))


@pytest.fixture
def dep(jobs: Jobs) -> str:
    """A held job for --dependency cases."""
    return jobs.job_id(jobs.run(["sbatch", "--hold", "-J", jobs.name, "--wrap", "true"]))


def _submit(jobs: Jobs, argv: list[str], stdin: str | None) -> tuple[
        subprocess.CompletedProcess[str], str | None]:
    before = len(jobs.ids)
    proc = jobs.run(argv, stdin)
    return proc, (jobs.ids[-1] if len(jobs.ids) > before else None)


def _settled_records(sb_job: str, rl_job: str, wait_s: float = 150.0) -> tuple[
        list[dict[str, str]], list[dict[str, str]]]:
    """Both jobs' records once slurmctld has evaluated their dependencies.

    slurmctld tests dependencies in its scheduling loop, not at submission: a dependency on a
    job it does not know is dropped as fulfilled in a periodic pass (up to a minute apart on the
    test cluster), so of two jobs submitted a moment apart one can show it and the other not.
    Re-read while the records differ in Dependency alone; any other difference, or a
    different number of records, is returned at once."""
    deadline = time.monotonic() + wait_s
    while True:
        sb_records = parse_records(show_job(sb_job))
        rl_records = parse_records(show_job(rl_job))
        if len(sb_records) != len(rl_records):
            return sb_records, rl_records
        keys = {k for sb, rl in zip(sb_records, rl_records, strict=True)
                for k in differences(normalise(sb, sb_job), normalise(rl, rl_job))}
        if keys != {"Dependency"} or time.monotonic() > deadline:
            return sb_records, rl_records
        time.sleep(1.0)


@pytest.mark.parametrize("with_intent", [False, True], ids=["no-rl-flags", "rl-flags"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rlsbatch_job_equals_sbatch_job(case: Case, with_intent: bool, jobs: Jobs, dep: str,
                                        tmp_path: Path) -> None:
    args = _fill(case.args, jobs.name, tmp_path, dep)
    script_words: list[str] = []
    stdin: str | None = None
    if case.script is not None:
        path = tmp_path / f"{jobs.name}.sh"  # the default job name is the script's name
        path.write_text(case.script)
        if case.stdin:
            stdin = case.script
        else:
            script_words = [str(path)]
    script_words += case.script_args
    if "-J" not in " ".join(args) and case.script is None:
        args += ["-J", jobs.name]
    groups = case.rl + (INTENT_FLAGS if with_intent else [])
    half = len(groups) // 2  # some of our flags before sbatch's, some after
    front = [w for g in groups[:half] for w in g]
    back = [w for g in groups[half:] for w in g]
    if "--" in args:
        at = args.index("--")
        rl_args = [*front, *args[:at], *back, *args[at:]]
    else:
        rl_args = [*front, *args, *back]

    sb_proc, sb_job = _submit(jobs, ["sbatch", "--hold", *args, *case.sbatch_extra,
                                     *script_words], stdin)
    rl_proc, rl_job = _submit(jobs, [RLSBATCH, "--hold", *rl_args, *script_words], stdin)

    assert rl_proc.returncode == sb_proc.returncode, (sb_proc.stderr, rl_proc.stderr)
    assert _norm_output(rl_proc.stdout, rl_job) == _norm_output(sb_proc.stdout, sb_job)
    assert (_norm_output(_without_feedback(rl_proc.stderr), rl_job)
            == _norm_output(sb_proc.stderr, sb_job))
    if sb_job is None:
        assert rl_job is None
        return
    assert rl_job is not None
    sb_records, rl_records = _settled_records(sb_job, rl_job)
    assert len(sb_records) == len(rl_records) >= 1
    for sb_rec, rl_rec in zip(sb_records, rl_records, strict=True):
        assert decode_comment(sb_rec.get("Comment")).intent is None
        expected = case.intent
        if with_intent:  # the command line's flags win over #RLSBATCH lines
            expected = replace(expected, deadline=INTENT.deadline, model=INTENT.model,
                               service_class=INTENT.service_class,
                               total_steps=INTENT.total_steps)
            # No GPU or CPU request: deadline only, held for the daemon to size in 1..max
            # (submit/deadline_only.py); the job is otherwise sbatch's (both are --hold here).
            planned = make_submission(["--hold", *rl_args, *script_words], os.environ,
                                      lambda: (stdin or "").encode())
            if planned.sized:
                expected = replace(expected, gpus_min=1, gpus_max=planned.sized)
        assert decode_comment(rl_rec.get("Comment")).intent == expected
        diff = differences(normalise(sb_rec, sb_job), normalise(rl_rec, rl_job))
        assert diff == {}, f"sbatch {sb_job} vs rlsbatch {rl_job}: {diff}"


def test_count_of_flag_combinations() -> None:
    assert len(CASES) >= 30


ERROR_CASES = [
    ["--licenses=nosuch"], ["-p", "nosuchpartition"], ["--bogus"], ["--time=abc"],
    ["--reservation=nosuch"], ["--hold=1"], ["-J"], ["--par", "x"], ["-Z"],
    ["--export-file=/no/such/file"], ["--begin=not-a-time"], ["--mem=2G", "--mem-per-cpu=1G"],
    ["--gres=gpu:1", "--gpus-per-task=2"], ["--cpus-per-task=0"],
]


@pytest.mark.parametrize("args", ERROR_CASES, ids=[" ".join(a) for a in ERROR_CASES])
@pytest.mark.parametrize("with_intent", [False, True], ids=["no-rl-flags", "rl-flags"])
def test_sbatch_errors_come_through_unchanged(args: list[str], with_intent: bool, jobs: Jobs,
                                             tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    named = ["-J", jobs.name, *args]
    sb = jobs.run(["sbatch", "--hold", *named, str(path)])
    rl_flags = [w for g in INTENT_FLAGS for w in g] if with_intent else []
    rl = jobs.run([RLSBATCH, "--hold", *rl_flags, *named, str(path)])
    assert sb.returncode != 0
    assert ((rl.returncode, rl.stdout, _without_feedback(rl.stderr))
            == (sb.returncode, sb.stdout, sb.stderr))
    assert jobs.in_queue() == []


_TEST_ONLY_RE = re.compile(r"Job \d+ to start at \S+")


@pytest.mark.parametrize("extra", [[], ["--parsable"], ["-N", "2", "--gres=gpu:1"]])
def test_test_only_output_matches(extra: list[str], jobs: Jobs, tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    argv = ["--test-only", "-J", jobs.name, *extra, str(path)]
    sb = subprocess.run(["sbatch", *argv], capture_output=True, text=True, check=False)
    # a deadline and a model: without a GPU request, the deadline-only form (held; same output)
    rl = subprocess.run([RLSBATCH, *INTENT_FLAGS[0], *INTENT_FLAGS[3], *argv],
                        capture_output=True, text=True, check=False)
    assert sb.returncode == rl.returncode == 0
    norm = [_TEST_ONLY_RE.sub("Job <id> to start at <time>", _without_feedback(p.stderr))
            for p in (sb, rl)]
    assert norm[0] == norm[1] and "to start at" in norm[0]
    assert sb.stdout == rl.stdout == ""
    assert jobs.in_queue() == []


def test_parsable_output_matches(jobs: Jobs, tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    sb = jobs.run(["sbatch", "--hold", "--parsable", "-J", jobs.name, str(path)])
    rl = jobs.run([RLSBATCH, "--hold", "--parsable", *INTENT_FLAGS[1], "-J", jobs.name,
                   str(path)])
    assert re.fullmatch(r"\d+\n", sb.stdout) and re.fullmatch(r"\d+\n", rl.stdout)
    assert sb.stderr == _without_feedback(rl.stderr) == ""  # a warning goes to stderr only
    assert int(rl.stdout) > int(sb.stdout)


def _env_of(path: Path) -> dict[str, str]:
    env = dict(line.split("=", 1) for line in path.read_text().split("\0") if "=" in line)
    # per-job values that differ between any two jobs (ids, nodes, devices, times)
    return {k: v for k, v in env.items()
            if not k.startswith(("SLURM_", "SLURMD_", "CUDA_", "GPU_", "ROCR_", "ZE_"))
            or k in ("SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_JOB_NAME",
                     "SLURM_CLUSTER_NAME", "SLURM_JOB_PARTITION")}


def test_the_job_gets_the_same_environment(jobs: Jobs, tmp_path: Path) -> None:
    """Run from a shell (which sets $_), both jobs see the same environment."""
    from test_progress_slurm import wait_until_done

    script = tmp_path / "env.sh"
    script.write_text(f"#!/bin/sh\nenv -0 > {tmp_path}/env-$SLURM_JOB_ID\n")
    ids = []
    for program in ("sbatch", RLSBATCH):
        proc = subprocess.run(
            ["bash", "-c", f"{program} --parsable -J {jobs.name} -o /dev/null -t 1 "
                           f"--export=ALL,FROM_TEST=1 {script}"],
            capture_output=True, text=True, check=True)
        ids.append(proc.stdout.strip())
        jobs.ids.append(ids[-1])
    for job in ids:
        assert wait_until_done(job) == "COMPLETED"
    sb_env, rl_env = (_env_of(tmp_path / f"env-{job}") for job in ids)
    assert sb_env["FROM_TEST"] == "1" and sb_env["_"].endswith("/sbatch")
    assert rl_env == sb_env
