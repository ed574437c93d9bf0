"""Values a user controls, made safe to store: what SQLite can hold and Python can read back.

A job's steps, batch size or deadline come from its comment; a number SQLite can not store
(an int of 2**63 or more raises OverflowError) or a time no `datetime` can show would make the
whole cycle's upsert fail, for every job. Each function here returns the value when it is
storable and None when it is not; the caller NULLs the column (or substitutes a safe value for
a NOT NULL one) and reports which job and field it dropped. Pure: no SQLAlchemy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from slurm_rl.core import Intent, JobView, Progress
from slurm_rl.submit.tags import INTENT_KEYS

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
"""SQLite INTEGER is a signed 64-bit value."""
TIME_MAX = 253402300799.0
"""9999-12-31 23:59:59 UTC: the latest epoch second `datetime` (and `explain`) can show."""
TEXT_MAX = 4096
"""Characters kept of a free-text value (a reason, an excerpt)."""


def storable_int(value: Any) -> int | None:
    """`value` if it is an int (not a bool) SQLite's INTEGER holds, else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if INT_MIN <= value <= INT_MAX else None


def storable_count(value: Any) -> int | None:
    """A non-negative storable int (steps, GPUs, batch size), else None."""
    v = storable_int(value)
    return v if v is not None and v >= 0 else None


def storable_real(value: Any) -> float | None:
    """A finite float (an int is converted), else None. SQLite would store NaN as NULL and
    infinities as values that JSON and `datetime` refuse."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def storable_time(value: Any) -> float | None:
    """An epoch time between 0 and year 9999, else None."""
    f = storable_real(value)
    return f if f is not None and 0.0 <= f <= TIME_MAX else None


def storable_text(value: Any, limit: int | None = TEXT_MAX) -> str:
    """A string SQLite can store (lone surrogates replaced), cut to `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


_NUMBER_CHECKS = {"epoch": storable_time, "gpus": storable_count, "count": storable_count}
_INTENT_NUMBERS = {name: _NUMBER_CHECKS[kind] for name, _, kind, _ in INTENT_KEYS
                   if kind in _NUMBER_CHECKS}
"""Intent field -> the check its stored value must pass (from the codec's kinds)."""


def bounded_intent(intent: Intent | None) -> tuple[Intent | None, tuple[str, ...]]:
    """The intent with every unstorable value dropped (None), and the names of those fields.

    Rebuilt with `dataclasses.replace`, so the values kept pass Intent's own checks as well
    (a field failing them is dropped too; if the rebuilt intent still fails, it is dropped
    whole and reported as "intent").
    """
    if intent is None:
        return None, ()
    checks = _INTENT_NUMBERS
    dropped: dict[str, Any] = {}
    for name, check in checks.items():
        value = getattr(intent, name)
        if value is not None and check(value) is None:
            dropped[name] = None
    for name in ("model", "inference"):
        text = getattr(intent, name)
        if isinstance(text, str) and storable_text(text, 200) != text:
            dropped[name] = storable_text(text, 200)
    if not dropped:
        return intent, ()
    # Rebuilding runs Intent's own checks on the fields kept: drop those that fail them too.
    for name in checks:
        value = getattr(intent, name)
        if name not in dropped and value is not None and not _valid_alone(name, value):
            dropped[name] = None
    try:
        return dataclasses.replace(intent, **dropped), tuple(dropped)
    except (ValueError, TypeError):
        return None, ("intent",)


def _valid_alone(name: str, value: Any) -> bool:
    try:
        Intent(**{name: value})
    except (ValueError, TypeError):
        return False
    return True


def bounded_progress(progress: Progress) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The progress row's values (None: steps_done itself is unstorable, store no row), and
    the fields dropped."""
    steps_done = storable_count(progress.steps_done)
    if steps_done is None:
        return None, ("steps_done",)
    values = {
        "steps_done": steps_done,
        "steps_total": storable_count(progress.steps_total),
        "rate": storable_real(progress.rate),
        "reported_at": storable_time(progress.updated_at),
    }
    raw = {"steps_total": progress.steps_total, "rate": progress.rate,
           "reported_at": progress.updated_at}
    dropped = tuple(k for k, v in raw.items() if v is not None and values[k] is None)
    return values, dropped


def bounded_job(job: JobView) -> tuple[JobView, tuple[str, ...]]:
    """The job with every unstorable value replaced (NULL-able: None; NOT NULL: 0, or the
    epoch for the submit time) and its text made storable, and the names of the fields
    dropped. The intent is bounded too (`intent.<field>` in the names)."""
    dropped: list[str] = []
    changes: dict[str, Any] = {}
    for name in ("start_time", "end_time"):
        value = getattr(job, name)
        if value is not None and storable_time(value) is None:
            changes[name] = None
    if job.time_limit_s is not None and storable_real(job.time_limit_s) is None:
        changes["time_limit_s"] = None
    if storable_time(job.submit_time) is None:
        changes["submit_time"] = 0.0
    for name in ("gpus", "nodes"):
        if storable_count(getattr(job, name)) is None:
            changes[name] = 0
    dropped.extend(changes)
    for name in ("user", "name", "partition"):
        value = getattr(job, name)
        safe = storable_text(value, 1024)
        if safe != value:
            changes[name] = safe
            dropped.append(name)
    intent, intent_dropped = bounded_intent(job.intent)
    if intent_dropped:
        changes["intent"] = intent
        dropped.extend(f"intent.{n}" for n in intent_dropped)
    if not changes:
        return job, ()
    return dataclasses.replace(job, **changes), tuple(dropped)
