"""Framing of squeue/sinfo format output that nothing a user writes can break.

A job's name and comment may hold any byte but NUL: newlines, U+2028, the unit separator, bytes
that are not UTF-8. So records are not lines, and fields are not split on a fixed character.
Each field but the last is followed by a secret field mark, the last by a record mark holding a
fresh 64-bit secret every poll, then Slurm's newline:

    <f1><\\x1f F field token><f2>...<fn><\\x1f R record token>\\n

Records are split on the record mark, fields on the field mark. Neither is ever on a command
line other users can read: squeue takes its format from SQUEUE_FORMAT2 in the environment of
the daemon's own process. Only the record mark guards the structure: a user who wrote it into a
comment could end a record and forge the next. A field mark written into a name or comment only
adds fields to that user's own record, which then has more than expected and is quarantined
(reported, its job left alone, the poll going on for everyone else); so the field mark is short
(24 bits) and a poller keeps it for its life, which lets it recognise unchanged records by
their text. A record that does not split into exactly the expected fields, or that the output
ends inside, is quarantined.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

MAX_REASON = 200
MAX_EXCERPT = 200
_PLAIN_ID = re.compile(r"[0-9]{1,16}")


@dataclass(frozen=True, kw_only=True)
class Quarantined:
    """A record the poll could not trust: left out of the snapshot, and so left alone."""

    job_id: str | None
    """The job's id when the record got far enough to show one (None for a node record)."""
    reason: str
    """Why, one printable line of at most 200 characters."""
    excerpt: str
    """repr() of the record (field marks shown as \\x1f, record marks as \\x1e), at most 200
    characters."""
    first_time: bool = True
    """False when the previous poll already reported this record (log each once)."""

    @property
    def key(self) -> str:
        """What identifies the record from one poll to the next."""
        return self.job_id if self.job_id is not None else self.excerpt


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """`text` with every character that is not printable replaced by '?', cut to `limit`."""
    line = "".join(c if c.isprintable() else "?" for c in text[: limit * 2])
    return line if len(line) <= limit else line[: limit - 1] + "…"


def new_field_mark() -> str:
    # \x1f first: Slurm reads digits right after the colon as the field's width.
    return f"\x1fF{secrets.token_hex(3)}"


@dataclass(frozen=True, kw_only=True)
class Framing:
    """The marks of one poll: `fresh()` for every poll, fixed marks only in tests."""

    field_mark: str
    record_mark: str

    @classmethod
    def fresh(cls, field_mark: str | None = None) -> Framing:
        """A new secret record mark; a new field mark unless one is given (a poller keeps its
        field mark, so that an unchanged record reads the same from one poll to the next)."""
        return cls(field_mark=field_mark or new_field_mark(),
                   record_mark=f"\x1fR{secrets.token_hex(8)}")

    def format_option(self, fields: Sequence[str]) -> str:
        """The -O / SQUEUE_FORMAT2 value: fields unpadded, each followed by its mark."""
        *head, last = fields
        return ",".join([*(f"{f}:{self.field_mark}" for f in head), f"{last}:{self.record_mark}"])

    def records(self, text: str) -> tuple[list[str], str | None]:
        """The text of every complete record, and what follows the last record mark when the
        output ends inside a record (None normally): that part is never to be trusted."""
        chunks = text.split(self.record_mark + "\n")
        tail = chunks.pop()
        return chunks, (tail if tail.strip() else None)

    def fields(self, record: str) -> tuple[str, ...]:
        return tuple(record.split(self.field_mark))

    def broken(self, record: str, n_fields: int, *, job_ids: bool = True,
               cut_short: bool = False) -> Quarantined:
        """A record that did not split into `n_fields` fields (or was cut short), named by its
        first field when `job_ids` and that is a plain job id."""
        fields = self.fields(record)
        first = fields[0]
        why = "output ends inside this record" if cut_short else (
            f"{len(fields)} fields, expected {n_fields}")
        return Quarantined(job_id=first if job_ids and _PLAIN_ID.fullmatch(first) else None,
                           reason=why, excerpt=self.excerpt(record))

    def split(self, text: str, n_fields: int, *, job_ids: bool = True
              ) -> tuple[list[tuple[str, ...]], list[Quarantined]]:
        """The fields of every record that has exactly `n_fields`, and the others."""
        records, tail = self.records(text)
        good: list[tuple[str, ...]] = []
        bad: list[Quarantined] = []
        for record in records:
            fields = self.fields(record)
            if len(fields) == n_fields:
                good.append(fields)
            else:
                bad.append(self.broken(record, n_fields, job_ids=job_ids))
        if tail is not None:
            bad.append(self.broken(tail, n_fields, job_ids=job_ids, cut_short=True))
        return good, bad

    def excerpt(self, record: str) -> str:
        shown = record.replace(self.record_mark, "\x1e").replace(self.field_mark, "\x1f")
        return one_line(repr(shown[: MAX_EXCERPT * 2]), MAX_EXCERPT)
