"""Short texts for the reasons a policy gives (`explain`, `--jobs-out`).

Pure: no clock, no local time zone.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime


def fmt_dur(seconds: float) -> str:
    """A short duration: 45s, 12m, 3.5h, 2.0d ("unbounded" for an infinite one)."""
    if seconds != seconds:
        return "unknown"
    if seconds in (math.inf, -math.inf):
        return "unbounded" if seconds > 0 else "-unbounded"
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 120:
        return f"{sign}{s:.0f}s"
    if s < 7200:
        return f"{sign}{s / 60:.0f}m"
    if s < 172800:
        return f"{sign}{s / 3600:.1f}h"
    return f"{sign}{s / 86400:.1f}d"


def fmt_time(t: float) -> str:
    """Epoch seconds as UTC wall time (no local zone: policies must not read the environment);
    trace seconds (small numbers) as t=…s."""
    if t >= 1e9:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%MZ")
    return f"t={t:.0f}s"
