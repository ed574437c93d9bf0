"""#SBATCH / #RLSBATCH lines, read with sbatch 22.05's rules (checked against sbatch by hand:
see the comments for what sbatch itself did with each form)."""

from __future__ import annotations

import pytest

from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.script import is_command, read_directives, split_words

W = "job.sh line 2"


@pytest.mark.parametrize(
    ("text", "words"),
    [(" -J a -t 5", ["-J", "a", "-t", "5"]),
     (' --comment "with ""double\'s" ', ["--comment", "with double's"]),  # sbatch: with double's
     (" -J a # trailing comment", ["-J", "a"]),
     (" -J a#b -t 5", ["-J", "a"]),  # an unquoted '#' ends the line
     (" -J 'a b'", ["-J", "a b"]),
     (" -J a\\#b", ["-J", "a#b"]),
     (' -t 5 "" -J b', ["-t", "5"]),  # sbatch stops at an empty word (job name stayed a)
     ("\t-J\tx\r", ["-J", "x"]),
     ("", []),
     ("X", ["X"])],
)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text, W) == words


def test_split_words_errors_name_the_line() -> None:
    with pytest.raises(UsageError, match="job.sh line 2: unmatched ' quote"):
        split_words(" -J 'abc", W)
    with pytest.raises(UsageError, match="job.sh line 2: unexpected ':'"):
        split_words(" -J a : -J b", W)


def test_is_command() -> None:
    assert not is_command("")
    assert not is_command("   \t")
    assert not is_command("  # just a comment")
    assert not is_command("#!/bin/bash")
    assert is_command("echo hi")
    assert is_command("  set -e")


SCRIPT = """#!/bin/bash
#SBATCH -J first --comment "hello world"
  #SBATCH -J indented-is-a-comment
#RLSBATCH --rl-deadline=+6h --rl-class critical
#SLURM -t 5
# a comment

#SBATCH -o
#SBATCH out.txt
#RLSBATCH --rl-hard
echo start
#SBATCH -J after-the-first-command
#RLSBATCH --rl-class besteffort
"""


def test_read_directives_stops_at_the_first_command() -> None:
    d = read_directives(SCRIPT, "job.sh")
    assert [(o.name, o.value, o.where) for o in d.sbatch.sbatch] == [
        ("job-name", "first", "job.sh line 2"),
        ("comment", "hello world", "job.sh line 2"),
        ("time", "5", "job.sh line 5"),
        ("output", "out.txt", "job.sh line 8"),  # a value may sit on the next line, as in sbatch
    ]
    assert [(o.name, o.value, o.where) for o in d.rl.rl] == [
        ("rl-deadline", "+6h", "job.sh line 4"),
        ("rl-class", "critical", "job.sh line 4"),
        ("rl-hard", None, "job.sh line 10"),
    ]
    assert not d.hetjob


def test_crlf_scripts() -> None:
    d = read_directives("#!/bin/sh\r\n#SBATCH -J x\r\n#RLSBATCH --rl-hard\r\necho\r\n", "s")
    assert [(o.name, o.value) for o in d.sbatch.sbatch] == [("job-name", "x")]
    assert [o.name for o in d.rl.rl] == ["rl-hard"]


@pytest.mark.parametrize(
    "line", ["#SBATCH hetjob", "#SBATCH HETJOB", "#SBATCH   hetjob  # x", "#SBATCHhetjob",
             "#SBATCH packjob", "#SLURM hetjob"],
)
def test_heterogeneous_separators_are_noticed(line: str) -> None:
    assert read_directives(f"#!/bin/sh\n#SBATCH -J a\n{line}\n#SBATCH -t 5\necho\n", "s").hetjob


def test_a_name_containing_hetjob_is_not_a_separator() -> None:
    d = read_directives("#!/bin/sh\n#SBATCH -J myhetjob\necho\n", "s")
    assert not d.hetjob


@pytest.mark.parametrize(
    ("line", "message"),
    [("#SBATCH --bogus", "job.sh line 2: unrecognized option '--bogus'"),
     ("#SBATCH -J a foo", "job.sh line 2: 'foo' is not an option"),
     ("#SBATCHX", "job.sh line 2: 'X' is not an option"),
     ("#SBATCH -J", "job.sh line 2: option requires an argument -- 'J'"),
     ("#SBATCH --par=x", "job.sh line 2: option '--par' is ambiguous"),
     ("#SBATCH --hold=1", "job.sh line 2: option '--hold' doesn't allow an argument"),
     ("#SBATCH -J 'open", "job.sh line 2: unmatched ' quote"),
     ("#SBATCH --rl-hard", "job.sh line 2: --rl-hard is an rlsbatch option: put it on an "
                           "#RLSBATCH line"),
     ("#RLSBATCH -J x", "job.sh line 2: -J: only --rl-\\* options may be given here"),
     ("#RLSBATCH --time=5", "job.sh line 2: --time is not an rlsbatch option"),
     ("#RLSBATCH --rl-dry-run", "job.sh line 2: --rl-dry-run may only be given on the command"),
     ("#RLSBATCH --rl-deadline", "job.sh line 2: --rl-deadline needs a value"),
     ("#RLSBATCH stray", "job.sh line 2: 'stray' is not an option")],
)
def test_malformed_directive_lines(line: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_directives(f"#!/bin/sh\n{line}\necho\n", "job.sh")
