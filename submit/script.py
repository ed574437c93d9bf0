"""Reading a job script's directive lines the way sbatch 22.05 does.

sbatch takes options from lines that start (in column 0) with `#SBATCH` (or the old `#SLURM`),
up to the first line that is neither blank nor a comment. Each line is split into words:
whitespace separates them, single or double quotes group them (the quotes are dropped), a
backslash keeps the next character, and an unquoted `#` ends the line. The words of all lines
are then read as one command line. rlsbatch reads `#RLSBATCH` lines for its own flags with the
same rules, in the same part of the script (sbatch sees them as plain comments).

A line whose words include `hetjob` (or that mentions `packjob`) splits the script into the
components of a heterogeneous job; rlsbatch only notes that (see cli.py).
"""

from __future__ import annotations

from slurm_rl.submit.cmdline import Scan, scan_directives
from slurm_rl.submit.errors import UsageError

SBATCH_PREFIXES = ("#SBATCH", "#SLURM")
RL_PREFIX = "#RLSBATCH"
_SPACE = " \t\n\r\f\v"


class Directives:
    """The options found in a script's directive lines."""

    __slots__ = ("sbatch", "rl", "hetjob")

    def __init__(self, sbatch: Scan, rl: Scan, hetjob: bool) -> None:
        self.sbatch = sbatch
        """#SBATCH/#SLURM options (Scan.sbatch)."""
        self.rl = rl
        """#RLSBATCH flags (Scan.rl)."""
        self.hetjob = hetjob


def split_words(text: str, where: str) -> list[str]:
    """The words of one directive line after its prefix (sbatch's get_argument)."""
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _SPACE:
            i += 1
        if i >= n:
            return words
        if text[i] == ":":
            raise UsageError(f"{where}: unexpected ':' (sbatch refuses it here)")
        word: list[str] = []
        quote = ""
        escaped = False
        started = False
        while i < n and (quote or text[i] not in _SPACE):
            ch = text[i]
            i += 1
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    continue
            elif ch in "\"'":
                quote = ch
                continue
            elif ch == "#":
                i = n  # an unquoted '#' starts a comment: the rest of the line is ignored
                break
            word.append(ch)
            started = True
        if quote:
            raise UsageError(f"{where}: unmatched {quote} quote")
        if not started:
            return words  # sbatch stops reading a line at an empty word ('' or a '#')
        words.append("".join(word))


def is_command(line: str) -> bool:
    """Whether sbatch stops reading directives at this line (not blank, not a comment)."""
    stripped = line.lstrip(_SPACE)
    return bool(stripped) and not stripped.startswith("#")


def read_directives(text: str, name: str) -> Directives:
    """All #SBATCH/#SLURM and #RLSBATCH options of a script; `name` is used in messages
    ("job.sh line 3: ...")."""
    sb_words: list[str] = []
    sb_where: list[str] = []
    rl_words: list[str] = []
    rl_where: list[str] = []
    hetjob = False
    for lineno, line in enumerate(text.split("\n"), start=1):
        where = f"{name} line {lineno}"
        if line.startswith(RL_PREFIX):
            words = split_words(line[len(RL_PREFIX):], where)
            rl_words += words
            rl_where += [where] * len(words)
            continue
        prefix = next((p for p in SBATCH_PREFIXES if line.startswith(p)), None)
        if prefix is None:
            if is_command(line):
                break
            continue
        rest = line[len(prefix):]
        if "packjob" in rest.lower():
            hetjob = True
            continue
        words = split_words(rest, where)
        if any(w.lower() == "hetjob" for w in words):
            hetjob = True
            continue
        sb_words += words
        sb_where += [where] * len(words)
    if hetjob:
        # sbatch reads each component's lines separately; rlsbatch does not manage such jobs.
        return Directives(Scan(), scan_directives(rl_words, rl_where, rl_only=True), True)
    return Directives(
        scan_directives(sb_words, sb_where, rl_only=False),
        scan_directives(rl_words, rl_where, rl_only=True),
        False,
    )
