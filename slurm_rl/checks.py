"""Bounds on every number a user gives (rlsbatch, progress, the job comment, the core
dataclasses), with nothing but builtins.

A number from a user becomes a SQLite INTEGER, a float, a timestamp and an scontrol argument:
each must be small enough for all of them, and only ASCII digits are digits (int() and
str.isdigit() also take '١', '５' or '²'). The bottom of the layering: `slurm_rl.core` checks
its fields with these, and rlsbatch's encoder (`slurm_rl.submit.tags`) its input; no imports,
so that rlsbatch starts fast.
"""

from __future__ import annotations


class CommentError(ValueError):
    """A comment or intent that can not be encoded or decoded (or a core value out of its
    bounds: the dataclasses hold what a comment carries)."""


MAX_INT = 2**53 - 1
"""The largest whole number taken from a user (steps, batch size): exact as a float too."""
MAX_DIGITS = len(str(MAX_INT))
MIN_EPOCH = 946_684_800
"""2000-01-01T00:00:00Z: the earliest deadline a comment may carry."""
MAX_EPOCH = 4_102_444_800
"""2100-01-01T00:00:00Z: the latest deadline or report time anything may carry."""


def read_digits(text: str) -> int | None:
    """The value of `text` if it is ASCII digits only, with anything above MAX_INT read as
    MAX_INT + 1 (too large, and never a huge int to compute with); None if not digits."""
    if not (text.isascii() and text.isdigit()):  # in ASCII, only 0-9 are digits
        return None
    significant = text.lstrip("0")
    return int(significant or "0") if len(significant) <= MAX_DIGITS else MAX_INT + 1


def ascii_int(text: str, lo: int = 0, hi: int = MAX_INT) -> int | None:
    """`text` as a whole number if it is ASCII digits only and lies in lo..hi, else None."""
    if not (len(text) <= MAX_DIGITS and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


STAMP_DECIMALS = 3
"""A progress report's time is written to the millisecond: a run's rate is fitted over its
reports' times, and whole seconds would put up to a second's error into each."""


def ascii_stamp(text: str, lo: int = 0, hi: int = MAX_EPOCH) -> float | None:
    """`text` as epoch seconds if it is ASCII digits, optionally with a '.' and 1 to
    STAMP_DECIMALS more digits, and lies in lo..hi, else None."""
    whole, dot, frac = text.partition(".")
    value = ascii_int(whole, lo, hi)
    if value is None:
        return None
    if not dot:
        return float(value)
    if not (0 < len(frac) <= STAMP_DECIMALS and frac.isascii() and frac.isdigit()):
        return None
    stamp = float(text)
    return stamp if stamp <= hi else None


def stamp_text(stamp: float) -> str:
    """Epoch seconds as `ascii_stamp` reads them: to the millisecond, without trailing zeros."""
    whole, ms = divmod(round(stamp * 10**STAMP_DECIMALS), 10**STAMP_DECIMALS)
    return str(whole) if not ms else f"{whole}.{ms:0{STAMP_DECIMALS}d}".rstrip("0")


def ascii_float(text: str, lo: float = 0.0, hi: float = MAX_INT) -> float | None:
    """`text` as a finite number in lo..hi if it is written with ASCII digits, '.', 'e' and
    signs only (as `%g` writes it; no 'nan', 'inf', '_' or Unicode digits), else None."""
    if not 0 < len(text) <= 32:
        return None
    for ch in text:
        if ch not in "0123456789.eE+-":
            return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if lo <= value <= hi else None  # NaN fails both comparisons


def check_int(name: str, value: object, lo: int = 0, hi: int = MAX_INT) -> None:
    """Raise CommentError unless `value` is an int (not a bool) in lo..hi."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CommentError(f"{name}: {value!r} is not a whole number in {lo}..{hi}")


def check_number(name: str, value: object, lo: float = 0.0, hi: float = MAX_INT) -> None:
    """Raise CommentError unless `value` is a finite int or float (not a bool) in lo..hi."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not lo <= value <= hi):
        raise CommentError(f"{name}: {value!r} is not a finite number in {lo:g}..{hi:g}")
