"""Records the daemon's poll could not parse (quarantined: the job is left alone)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from .bounds import storable_text
from .models import QuarantinedRecord

_quarantine = cast(Table, QuarantinedRecord.__table__)

EXCERPT_CHARS = 300
"""Characters of a quarantined record kept (its start, where the job id and the damage are)."""


def record_quarantined(
    session: Session, items: Iterable[tuple[str | None, str, str]], now: float
) -> int:
    """Record records the poll could not parse: (job id or None, reason, excerpt) each.

    A (job id, reason) seen before is bumped (count, last_seen, newest excerpt); a new one is
    inserted. Writes in the caller's transaction; returns how many were first seen now.
    """
    merged: dict[tuple[str | None, str], str] = {}
    counts: dict[tuple[str | None, str], int] = {}
    for job_id, reason, excerpt in items:
        key = (None if job_id is None else storable_text(job_id, 64), storable_text(reason, 300))
        merged[key] = storable_text(excerpt, EXCERPT_CHARS)
        counts[key] = counts.get(key, 0) + 1
    if not merged:
        return 0
    inserted = 0
    for (job_id, reason), excerpt in merged.items():
        match = _quarantine.c.job_id.is_(None) if job_id is None \
            else _quarantine.c.job_id == job_id
        row_id = session.execute(
            select(_quarantine.c.id).where(match, _quarantine.c.reason == reason).limit(1)
        ).scalar()
        if row_id is None:
            session.execute(_quarantine.insert(), {
                "job_id": job_id, "reason": reason, "excerpt": excerpt, "first_seen": now,
                "last_seen": now, "count": counts[(job_id, reason)]})
            inserted += 1
        else:
            session.execute(
                _quarantine.update().where(_quarantine.c.id == row_id).values(
                    count=_quarantine.c.count + counts[(job_id, reason)], last_seen=now,
                    excerpt=excerpt))
    return inserted
