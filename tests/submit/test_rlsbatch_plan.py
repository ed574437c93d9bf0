"""From a command line (and script) to the sbatch command rlsbatch runs: no Slurm needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_rl.submit import cli
from slurm_rl.submit.cli import make_submission
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.intent import decode_comment

NOW = 1_800_000_000.0
SINFO = {"gpu": (True, 16, 4)}


def no_stdin() -> bytes:
    raise AssertionError("stdin must not be read")


def plan(args: list[str], env: dict[str, str] | None = None, stdin: bytes | None = None
         ) -> cli.Submission:
    read = (lambda: stdin) if stdin is not None else no_stdin
    return make_submission(args, env or {}, read, query=lambda: SINFO, now=NOW)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\n#SBATCH --comment='from the script'\n#SBATCH -t 5\necho hi\n")
    return path


def test_no_flags_adds_only_the_tag_before_the_script(script: Path) -> None:
    p = plan(["-J", "x", str(script), "a", "b"])
    assert p.argv == ["sbatch", "-J", "x", "--comment=from the script {rl1:}", str(script),
                      "a", "b"]
    assert p.stdin is None


def test_command_line_comment_is_kept_and_beats_the_script(script: Path) -> None:
    p = plan(["--comment", "  mine  ", "--rl-class=critical", str(script)])
    assert p.argv == ["sbatch", "--comment", "  mine  ", "--comment=  mine   {rl1:c=critical}",
                      str(script)]
    assert p.comment is not None
    assert decode_comment(p.comment).user_comment == "  mine  "


def test_rl_flags_anywhere_before_the_script_and_on_rlsbatch_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.sh"
    path.write_text("#!/bin/sh\n#RLSBATCH --rl-deadline=+1h --rl-class besteffort\n"
                    "#RLSBATCH --rl-steps 500\necho\n")
    p = plan(["--rl-class", "critical", "-p", "gpu", "--rl-gpus", "2-8", str(path)])
    assert p.argv == ["sbatch", "-p", "gpu", "--gres=gpu:2",
                      "--comment={rl1:d=1800003600,c=critical,g=2-8,s=500}", str(path)]


def test_script_on_stdin_is_handed_to_sbatch() -> None:
    data = b"#!/bin/sh\n#RLSBATCH --rl-hard --rl-deadline +1d\n#SBATCH --comment=c -c 1\nhostname\n"
    p = plan(["--parsable"], stdin=data)
    assert p.stdin == data
    assert p.argv == ["sbatch", "--parsable", "--comment=c {rl1:d=1800086400,h}"]


def test_wrap_reads_no_script() -> None:
    p = plan(["--wrap", "echo hi", "--rl-gpus", "6-8"])
    assert p.argv == ["sbatch", "--wrap", "echo hi", "--gres=gpu:3", "--nodes=2",
                      "--comment={rl1:g=6-8}"]


def test_double_dash_stays_in_front_of_the_script(script: Path) -> None:
    p = plan(["-J", "x", "--", str(script), "-J"])
    assert p.argv == ["sbatch", "-J", "x", "--comment=from the script {rl1:}", "--",
                      str(script), "-J"]


def test_what_sbatch_will_refuse_goes_to_sbatch_untouched(script: Path) -> None:
    p = plan(["--rl-hard", "--bogus", str(script)])
    assert p.argv == ["sbatch", "--bogus", str(script)] and p.intent is None
    p = plan(["--version"])
    assert p.argv == ["sbatch", "--version"] and not p.show_help
    assert plan(["-h"]).show_help


def test_heterogeneous_jobs_are_handed_over_or_refused(script: Path, tmp_path: Path) -> None:
    p = plan(["-J", "a", ":", "-J", "b", str(script)])
    assert p.argv == ["sbatch", "-J", "a", ":", "-J", "b", str(script)] and p.intent is None
    with pytest.raises(UsageError, match="heterogeneous"):
        plan(["--rl-hard", "--rl-deadline=+1h", "-J", "a", ":", str(script)])
    het = tmp_path / "het.sh"
    het.write_text("#!/bin/sh\n#SBATCH -J a\n#SBATCH hetjob\n#SBATCH -J b\necho\n")
    assert plan([str(het)]).intent is None
    with pytest.raises(UsageError, match="het.sh: heterogeneous"):
        plan(["--rl-class=critical", str(het)])


@pytest.mark.parametrize(
    ("args", "message"),
    [(["/no/such/job.sh"], "/no/such/job.sh: can't read the job script: No such file"),
     (["--rl-steps", "1" * 150, "S"], "--rl-steps: .* is too large \\(at most 9007199254740991\\)"),
     (["--comment", "x" * 950, "S"], "--comment plus the slurm-rl intent is"),
     (["--rl-elastic", "--no-requeue", "S"], "--rl-elastic: .* was given --no-requeue"),
     (["--rl-gpus", "1-2", "--gpus-per-task=1", "S"], "can't be combined with --gpus-per-task")],
)
def test_bad_input(args: list[str], message: str, script: Path) -> None:
    args = [str(script) if a == "S" else a for a in args]
    with pytest.raises(UsageError, match=message):
        plan(args)


def test_elastic_needs_requeue_from_any_source(tmp_path: Path) -> None:
    path = tmp_path / "j.sh"
    path.write_text("#!/bin/sh\n#SBATCH --no-requeue\necho\n")
    with pytest.raises(UsageError, match="--no-requeue \\(j.sh line 2\\)"):
        plan(["--rl-elastic", str(path)])
    assert plan(["--rl-elastic", "--requeue", str(path)]).intent is not None
    with pytest.raises(UsageError, match="SBATCH_NO_REQUEUE"):
        plan(["--rl-elastic", "--wrap=x"], env={"SBATCH_NO_REQUEUE": "1"})


def test_main_reports_errors_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--rl-class", "gold", "--wrap", "x"]) == 2
    err = capsys.readouterr().err
    assert err == ("rlsbatch: error: --rl-class: unknown service class 'gold' "
                   "(valid: critical, standard, besteffort)\n")


def test_main_dry_run_prints_command_and_intent(script: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--dry-run", "--rl-deadline", "2031-01-01T00:00:00+00:00",
                     "--rl-class", "critical", "-J", "my job", "-c", "1", str(script)]) == 0
    out = capsys.readouterr().out
    assert f"sbatch command: sbatch -J 'my job' -c 1 '--comment=from the script " \
           f"{{rl1:d=1924992000,c=critical}}' {script}" in out
    assert "intent: Intent(deadline=1924992000.0" in out
    assert "user comment: 'from the script'" in out


def test_rl_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--rl-help", "-J", "x"]) == 0
    assert "--rl-deadline=WHEN" in capsys.readouterr().out


def test_a_non_utf8_comment_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "latin1.sh"
    path.write_bytes(b"#!/bin/sh\n#SBATCH --comment=caf\xe9\necho\n")
    p = plan([str(path)])
    assert p.argv[1].encode("utf-8", "surrogateescape") == b"--comment=caf\xe9 {rl1:}"
