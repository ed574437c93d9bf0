"""The argv splitter: getopt_long's rules for sbatch, with rlsbatch's flags taken out."""

from __future__ import annotations

import pytest

from slurm_rl.submit.cmdline import Opt, scan_command_line
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.sbatch_options import LONG, NO_ARG, OPTIONAL, SHORT, resolve_long

CL = "command line"


def test_options_then_script_then_script_arguments() -> None:
    scan = scan_command_line(["-J", "x", "job.sh", "a", "-J", "y", "--rl-hard"])
    assert scan.kept == ["-J", "x"]
    assert scan.rest == ["job.sh", "a", "-J", "y", "--rl-hard"]
    assert scan.script == "job.sh"
    assert scan.sbatch == [Opt("job-name", "x", CL)]
    assert scan.rl == []  # after the script, words belong to the script


def test_bundled_short_options() -> None:
    scan = scan_command_line(["-HJname", "-vQ", "s.sh"])
    assert [(o.name, o.value) for o in scan.sbatch] == [
        ("hold", None), ("job-name", "name"), ("verbose", None), ("quiet", None)]
    assert scan.kept == ["-HJname", "-vQ"]


def test_bundled_short_option_takes_the_next_word() -> None:
    scan = scan_command_line(["-HJ", "name", "s.sh"])
    assert [(o.name, o.value) for o in scan.sbatch] == [("hold", None), ("job-name", "name")]
    assert scan.script == "s.sh"


def test_optional_values_must_be_attached() -> None:
    scan = scan_command_line(["--nice", "5"])
    assert [(o.name, o.value) for o in scan.sbatch] == [("nice", None)]
    assert scan.script == "5"
    scan = scan_command_line(["--nice=5", "-k", "-kfoo", "s.sh"])
    assert [(o.name, o.value) for o in scan.sbatch] == [
        ("nice", "5"), ("no-kill", None), ("no-kill", "foo")]


def test_long_options_may_be_abbreviated() -> None:
    scan = scan_command_line(["--part", "gpu", "--job=n", "s.sh"])
    assert [(o.name, o.value) for o in scan.sbatch] == [("partition", "gpu"), ("job-name", "n")]
    assert scan.kept == ["--part", "gpu", "--job=n"]


def test_ambiguous_and_unknown_options_are_left_to_sbatch() -> None:
    scan = scan_command_line(["--rl-hard", "--rl-deadline", "+1h", "--par", "x", "s.sh"])
    assert scan.error is not None and "ambiguous" in scan.error
    assert scan.kept == ["--par", "x", "s.sh"]  # our flags out, the rest as given
    scan = scan_command_line(["-Z", "s.sh"])
    assert scan.error == "invalid option -- 'Z'"
    scan = scan_command_line(["--hold=yes", "s.sh"])
    assert scan.error == "option '--hold' doesn't allow an argument"
    scan = scan_command_line(["-J"])
    assert scan.error == "option requires an argument -- 'J'"
    scan = scan_command_line(["--comment"])
    assert scan.error == "option '--comment' requires an argument"


def test_double_dash_ends_the_options() -> None:
    scan = scan_command_line(["-J", "x", "--", "-s.sh", "a"])
    assert scan.rest == ["--", "-s.sh", "a"]
    assert scan.script == "-s.sh"
    assert scan_command_line(["--"]).script is None


def test_lone_dash_is_the_script_and_colon_separates_components() -> None:
    assert scan_command_line(["-"]).script == "-"
    scan = scan_command_line(["-J", "a", ":", "-J", "b", "s.sh"])
    assert scan.hetjob and scan.script == "s.sh"


def test_rl_flags_are_taken_out_wherever_they_are_among_the_options() -> None:
    scan = scan_command_line(["--rl-deadline", "+6h", "-J", "x", "--rl-hard",
                              "--rl-gpus=2-8", "--dry-run", "s.sh", "a"])
    assert scan.kept == ["-J", "x"]
    assert [(o.name, o.value) for o in scan.rl] == [
        ("rl-deadline", "+6h"), ("rl-hard", None), ("rl-gpus", "2-8"), ("dry-run", None)]
    assert scan.rest == ["s.sh", "a"]


def test_an_sbatch_value_that_looks_like_our_flag_stays_a_value() -> None:
    scan = scan_command_line(["-J", "--rl-hard", "--comment", "--rl-class=x", "s.sh"])
    assert [(o.name, o.value) for o in scan.sbatch] == [
        ("job-name", "--rl-hard"), ("comment", "--rl-class=x")]
    assert scan.rl == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--rl-deadline"], "--rl-deadline needs a value"),
     (["--rl-hard=yes", "s.sh"], "--rl-hard takes no value"),
     (["--rl-deadlin", "+1h", "s.sh"], "unknown option --rl-deadlin"),
     (["--rl-gpu=2", "s.sh"], "unknown option --rl-gpu")],
)
def test_our_flag_errors_are_ours(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        scan_command_line(argv)


def test_last_occurrence_wins() -> None:
    scan = scan_command_line(["--comment=a", "--comment", "b=c", "s.sh"])
    last = scan.last("comment")
    assert last is not None and last.value == "b=c"
    assert scan.last("partition") is None


def test_the_table_has_no_rl_prefix_and_short_options_map_to_long_ones() -> None:
    assert not [name for name in LONG if name.startswith("rl")]
    assert set(SHORT.values()) <= set(LONG)
    assert {k for k, v in SHORT.items() if LONG[v] == NO_ARG} == set("hHOQsvVW")
    assert {k for k, v in SHORT.items() if LONG[v] == OPTIONAL} == {"k"}


def test_resolve_long() -> None:
    assert resolve_long("deadline") == "deadline"
    assert resolve_long("dead") == "deadline"
    assert resolve_long("cluster") == "cluster"  # exact beats the longer --clusters
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_long("ex")
    with pytest.raises(ValueError, match="unrecognized"):
        resolve_long("dry-run")
