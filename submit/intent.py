"""The comment codec: QoS intent and progress carried in a Slurm job's comment.

A managed job's comment is the user's own comment, verbatim, followed by slurm-rl's part:

    <user comment> {rl1:d=1764460800,h,c=critical,g=2-8,e,s=10000,m=resnet50}{rlp:1200/10000@3.5}

`rl1` is the versioned intent (written once, by rlsbatch), `rlp` the latest progress (rewritten
by the job itself). Both are bounded (`MAX_PART_BYTES`) so that the whole comment stays well
under Slurm 22.05's 1024-byte limit (longer comments are refused at submission). Keys:

    d  deadline, epoch seconds        h  hard deadline (flag)    c  service class
    g  GPU range min-max              e  elastic (flag)          s  total steps
    m  model name                     b  batch size

Only the standard library is used here. The encoder itself lives in `tags.py` (no imports at
all, because rlsbatch runs it on every submission); this module re-exports it and adds the
decoder and the `Intent`/`Progress` conversions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.submit.tags import (
    MAX_COMMENT_BYTES,
    MAX_PART_BYTES,
    PROGRESS_RESERVE_BYTES,
    VERSION,
    CommentError,
    encode_intent_values,
    join_comment,
)

__all__ = [
    "MAX_COMMENT_BYTES", "MAX_PART_BYTES", "PROGRESS_RESERVE_BYTES", "VERSION", "CommentError",
    "DecodedComment", "compose_comment", "decode_comment", "encode_intent", "encode_progress",
    "with_progress",
]

_TAIL_RE = re.compile(
    r"(?:^| )\{rl1:(?P<intent>[^{}]*)\}(?:\{rlp:(?P<progress>[^{}]*)\})?$"
)
_PROGRESS_ONLY_RE = re.compile(r"(?:^| )\{rlp:(?P<progress>[^{}]*)\}$")


@dataclass(frozen=True, kw_only=True)
class DecodedComment:
    user_comment: str
    intent: Intent | None
    progress: Progress | None

    @property
    def managed(self) -> bool:
        return self.intent is not None


def encode_intent(intent: Intent) -> str:
    """The `{rl1:...}` tag for an intent."""
    return encode_intent_values(
        deadline=intent.deadline,
        hard=intent.hard,
        service_class=intent.service_class.value,
        gpus_min=intent.gpus_min,
        gpus_max=intent.gpus_max,
        elastic=intent.elastic,
        total_steps=intent.total_steps,
        model=intent.model,
        batch_size=intent.batch_size,
    )


def encode_progress(progress: Progress) -> str:
    body = str(progress.steps_done)
    if progress.steps_total is not None:
        body += f"/{progress.steps_total}"
    if progress.rate is not None:
        body += f"@{progress.rate:.4g}"
    if progress.updated_at is not None:
        body += f";t={int(progress.updated_at)}"
    return "{rlp:" + body + "}"


def compose_comment(
    user_comment: str, intent: Intent, progress: Progress | None = None, *,
    reserve_bytes: int = 0,
) -> str:
    """User comment (verbatim) + slurm-rl's part; raises CommentError if it would not fit.

    `reserve_bytes` keeps room for a progress tag added later (rlsbatch passes
    `PROGRESS_RESERVE_BYTES`, so a job's progress reports always fit).
    """
    ours = encode_intent(intent) + (encode_progress(progress) if progress else "")
    return join_comment(user_comment, ours, reserve_bytes=reserve_bytes)


def with_progress(comment: str, progress: Progress) -> str:
    """The comment with its progress tag replaced (or added)."""
    decoded = decode_comment(comment)
    if decoded.intent is None:
        # An unmanaged job may still report progress; keep its comment and append ours.
        base = _strip_progress(comment)
        tag = encode_progress(progress)
        return f"{base} {tag}" if base else tag
    return compose_comment(decoded.user_comment, decoded.intent, progress)


def _strip_progress(comment: str) -> str:
    m = _PROGRESS_ONLY_RE.search(comment)
    return comment[: m.start()] if m else comment


def decode_comment(comment: str | None) -> DecodedComment:
    """Split a job comment into the user's comment, the intent and the progress.

    A comment without slurm-rl's part decodes to (comment, None, None). A malformed part is
    treated as the user's text, never as an intent: the daemon must not act on garbage.
    """
    text = comment or ""
    m = _TAIL_RE.search(text)
    if m is None:
        pm = _PROGRESS_ONLY_RE.search(text)
        if pm is not None:
            try:
                only = _decode_progress(pm.group("progress"))
            except CommentError:
                return DecodedComment(user_comment=text, intent=None, progress=None)
            return DecodedComment(user_comment=text[: pm.start()], intent=None, progress=only)
        return DecodedComment(user_comment=text, intent=None, progress=None)
    try:
        intent = _decode_intent(m.group("intent"))
        prog: Progress | None = (
            _decode_progress(m.group("progress")) if m.group("progress") else None
        )
    except CommentError:
        return DecodedComment(user_comment=text, intent=None, progress=None)
    return DecodedComment(user_comment=text[: m.start()], intent=intent, progress=prog)


def _decode_intent(body: str) -> Intent:
    fields: dict[str, object] = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        try:
            if key == "d":
                fields["deadline"] = float(int(value))
            elif key == "h":
                fields["hard"] = True
            elif key == "c":
                fields["service_class"] = ServiceClass.parse(value)
            elif key == "g":
                lo, _, hi = value.partition("-")
                fields["gpus_min"] = int(lo) if lo else None
                fields["gpus_max"] = int(hi) if hi else None
            elif key == "e":
                fields["elastic"] = True
            elif key == "s":
                fields["total_steps"] = int(value)
            elif key == "m":
                fields["model"] = value
            elif key == "b":
                fields["batch_size"] = int(value)
            else:
                raise CommentError(f"unknown intent key {key!r}")
        except ValueError as exc:
            raise CommentError(f"bad intent field {item!r}: {exc}") from None
    return Intent(**fields)  # type: ignore[arg-type]


def _decode_progress(body: str) -> Progress:
    main, _, tail = body.partition(";")
    try:
        updated = float(tail[2:]) if tail.startswith("t=") else None
        steps_part, _, rate_part = main.partition("@")
        done_s, _, total_s = steps_part.partition("/")
        return Progress(
            steps_done=int(done_s),
            steps_total=int(total_s) if total_s else None,
            rate=float(rate_part) if rate_part else None,
            updated_at=updated,
        )
    except ValueError:
        raise CommentError(f"bad progress tag {body!r}") from None
