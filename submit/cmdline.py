"""Splitting an sbatch command line (or the words of #SBATCH lines) the way getopt_long does.

sbatch reads its options with getopt_long in "stop at the first non-option" mode: the first word
that is not an option (or the word after `--`) is the script, and everything after it belongs to
the script. Short options may be bundled (`-HJname`), a required value may be attached or be the
next word, an optional value must be attached, and a long option may be abbreviated to any
unambiguous prefix. A lone `:` separates the components of a heterogeneous job.

rlsbatch's own `--rl-*` flags are taken out wherever they appear among the options; every other
word is kept exactly as given, in its place.
"""

from __future__ import annotations

from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.rlflags import CMDLINE_ONLY, RL_FLAGS
from slurm_rl.submit.sbatch_options import (
    NO_ARG,
    OPTIONAL,
    REQUIRED,
    SHORT,
    OptionError,
    long_kind,
    resolve_long,
)

COMMAND_LINE = "command line"


class Opt:
    """One option as given: canonical long name, value (None if it has none), and where."""

    __slots__ = ("name", "value", "where")

    def __init__(self, name: str, value: str | None, where: str) -> None:
        self.name = name
        self.value = value
        self.where = where

    def __repr__(self) -> str:
        return f"Opt({self.name!r}, {self.value!r}, {self.where!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opt) and (self.name, self.value, self.where) == (
            other.name, other.value, other.where)

    __hash__ = None  # type: ignore[assignment]


class Scan:
    """The result of reading a command line (or directive words)."""

    __slots__ = ("sbatch", "rl", "kept", "rest", "error", "hetjob")

    def __init__(self) -> None:
        self.sbatch: list[Opt] = []
        """sbatch's options, in order."""
        self.rl: list[Opt] = []
        """rlsbatch's options, in order."""
        self.kept: list[str] = []
        """The words before the script, minus rlsbatch's flags (what sbatch gets)."""
        self.rest: list[str] = []
        """The script and its arguments (starting with `--` if the user wrote one)."""
        self.error: str | None = None
        """getopt's complaint, if sbatch will refuse this command line (kept+rest is then
        everything from the bad word on)."""
        self.hetjob = False

    def last(self, name: str) -> Opt | None:
        """The last occurrence of sbatch option `name` (later occurrences win in sbatch)."""
        for opt in reversed(self.sbatch):
            if opt.name == name:
                return opt
        return None

    @property
    def script(self) -> str | None:
        """The script path, if one was given."""
        if self.rest and self.rest[0] == "--":
            return self.rest[1] if len(self.rest) > 1 else None
        return self.rest[0] if self.rest else None


def scan_command_line(args: list[str]) -> Scan:
    """Read rlsbatch's argv. An error in one of our flags raises UsageError; an error sbatch
    would report itself is left in `Scan.error` (sbatch then says it in its own words)."""
    return _scan(args, [COMMAND_LINE] * len(args), directives=False)


def scan_directives(words: list[str], wheres: list[str], *, rl_only: bool) -> Scan:
    """Read the words of #SBATCH lines (rl_only=False) or #RLSBATCH lines (rl_only=True).
    Every problem raises UsageError naming the line: a non-option word, an unknown or
    ambiguous option, a missing value."""
    return _scan(words, wheres, directives=True, rl_only=rl_only)


def _scan(args: list[str], wheres: list[str], *, directives: bool, rl_only: bool = False
          ) -> Scan:
    out = Scan()
    i = 0
    n = len(args)
    while i < n:
        word, where = args[i], wheres[i]
        if word == "--":
            if directives:
                if i + 1 < n:
                    raise UsageError(f"{wheres[i + 1]}: {args[i + 1]!r} is not an option")
                break
            out.rest = args[i:]
            return out
        if word == ":" and not directives:
            out.hetjob = True
            out.kept.append(word)
            i += 1
            continue
        if not word.startswith("-") or word == "-":
            if directives:
                raise UsageError(f"{where}: {word!r} is not an option")
            out.rest = args[i:]
            return out
        try:
            if word.startswith("--"):
                i = _long(out, args, wheres, i, directives=directives, rl_only=rl_only)
            else:
                if rl_only:
                    raise OptionError(f"{word}: only --rl-* options may be given here")
                i = _short(out, args, wheres, i)
        except OptionError as exc:
            if directives:
                raise UsageError(f"{where}: {exc}") from None
            out.error = str(exc)
            out.kept.extend(args[i:])
            return out
    return out


def _long(out: Scan, args: list[str], wheres: list[str], i: int, *, directives: bool,
          rl_only: bool) -> int:
    word, where = args[i], wheres[i]
    name, eq, attached = word[2:].partition("=")
    if directives and not rl_only and (name in RL_FLAGS or name.startswith("rl-")):
        raise OptionError(f"--{name} is an rlsbatch option: put it on an #RLSBATCH line "
                          "(sbatch rejects it on #SBATCH lines)")
    if name in RL_FLAGS:
        if directives and name in CMDLINE_ONLY:
            raise OptionError(f"--{name} may only be given on the command line")
        if RL_FLAGS[name]:
            if eq:
                value: str | None = attached
            elif i + 1 < len(args):
                value = args[i + 1]
                i += 1
            else:
                raise UsageError(_where(where, f"--{name} needs a value"))
        elif eq:
            raise UsageError(_where(where, f"--{name} takes no value"))
        else:
            value = None
        out.rl.append(Opt(name, value, where))
        return i + 1
    if rl_only:
        raise OptionError(f"--{name} is not an rlsbatch option (sbatch options go on #SBATCH "
                          "lines)")
    if name.startswith("rl-"):
        known = ", ".join(f"--{f}" for f in RL_FLAGS if f.startswith("rl-"))
        raise UsageError(_where(where, f"unknown option --{name} (rlsbatch's are: {known})"))
    canon = resolve_long(name)
    kind = long_kind(canon)
    start = i
    if kind == REQUIRED:
        if eq:
            value = attached
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 1
        else:
            raise OptionError(f"option '--{canon}' requires an argument")
    elif kind == NO_ARG:
        if eq:
            raise OptionError(f"option '--{canon}' doesn't allow an argument")
        value = None
    else:
        value = attached if eq else None
    out.sbatch.append(Opt(canon, value, where))
    out.kept.extend(args[start:i + 1])
    return i + 1


def _short(out: Scan, args: list[str], wheres: list[str], i: int) -> int:
    word, where = args[i], wheres[i]
    j = 1
    while j < len(word):
        letter = word[j]
        canon = SHORT.get(letter)
        if canon is None:
            raise OptionError(f"invalid option -- '{letter}'")
        kind = long_kind(canon)
        if kind == NO_ARG:
            out.sbatch.append(Opt(canon, None, where))
            j += 1
            continue
        attached = word[j + 1:]
        if kind == OPTIONAL:
            out.sbatch.append(Opt(canon, attached or None, where))
        elif attached:
            out.sbatch.append(Opt(canon, attached, where))
        elif i + 1 < len(args):
            out.sbatch.append(Opt(canon, args[i + 1], where))
            out.kept.extend(args[i:i + 2])
            return i + 2
        else:
            raise OptionError(f"option requires an argument -- '{letter}'")
        break
    out.kept.append(word)
    return i + 1


def _where(where: str, message: str) -> str:
    return message if where == COMMAND_LINE else f"{where}: {message}"
