"""Expanding Slurm's compressed host lists ("node[1-3,7],gpu-a[01-02]") with bounds.

squeue's NodeList is written by slurmctld from node names the site chose, so it is believed, but
it is still parsed as if it were hostile (docs/security.md): only the characters Slurm allows in
node names, ASCII digits, at most 16 digits a number, and never more names than the caller's
bound (the record's node count), checked before a range is expanded, so "n[0-99999999999]"
costs nothing. Several bracket groups in one name ("r[1-2]n[1-2]") expand as their product, as
Slurm's hostlist does.
"""

from __future__ import annotations

import re

from slurm_rl.slurm.framing import one_line


class HostlistError(ValueError):
    """A host list we do not understand, or one with more names than allowed."""


class _TooMany(HostlistError):
    """More names than the caller allows (`expand` says how many that is)."""


_PART = re.compile(r"([A-Za-z0-9._\-]*)(?:\[([0-9,\-]{1,1024})\])?")
_RANGE = re.compile(r"([0-9]{1,16})(?:-([0-9]{1,16}))?")
MAX_NAME = 255


def _split_top(text: str) -> list[str]:
    """Split on the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {one_line(text, 60)!r}")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {one_line(text, 60)!r}")
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unclosed '[' in {one_line(text, 60)!r}")
    items.append(text[start:])
    return items


def _group(body: str, budget: int) -> list[str]:
    """The numbers of one bracket group ("1-3,07"), zero padding kept; at most `budget`."""
    out: list[str] = []
    for piece in body.split(","):
        m = _RANGE.fullmatch(piece)
        if m is None:
            raise HostlistError(f"bad range {one_line(piece, 40)!r}")
        lo_text, hi_text = m.group(1), m.group(2)
        if hi_text is None:
            values = [lo_text]
        else:
            lo, hi = int(lo_text), int(hi_text)
            if hi < lo:
                raise HostlistError(f"range {lo_text}-{hi_text} runs backwards")
            if hi - lo + 1 > budget - len(out):
                raise _TooMany
            width = len(lo_text) if lo_text.startswith("0") else 0
            values = [str(v).zfill(width) for v in range(lo, hi + 1)]
        out.extend(values)
        if len(out) > budget:
            raise _TooMany
    return out


def _expand_item(item: str, budget: int) -> list[str]:
    names = [""]
    pos = 0
    while pos < len(item):
        m = _PART.match(item, pos)
        if m is None or m.end() == pos:
            raise HostlistError(f"not a host list: {one_line(item, 60)!r}")
        prefix, body = m.group(1), m.group(2)
        names = [n + prefix for n in names]
        if body is not None:
            numbers = _group(body, budget)
            if len(names) * len(numbers) > budget:
                raise _TooMany
            names = [n + v for n in names for v in numbers]
        pos = m.end()
    if len(names) > budget:
        raise _TooMany
    for n in names:
        if not n or len(n) > MAX_NAME:
            raise HostlistError(f"bad node name {one_line(n, 40)!r}")
    return names


def expand(text: str, max_names: int) -> tuple[str, ...]:
    """The node names of a Slurm host list, in its order; "" gives (). HostlistError when the
    text is not a host list or names more than `max_names` nodes."""
    text = text.strip()
    if not text:
        return ()
    if len(text) > 65536:
        raise HostlistError("host list longer than 65536 characters")
    out: list[str] = []
    try:
        for item in _split_top(text):
            out.extend(_expand_item(item, max_names - len(out)))
    except _TooMany:
        raise HostlistError(f"more than {max_names} names") from None
    return tuple(out)
