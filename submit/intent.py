"""The comment codec: QoS intent and progress carried in a Slurm job's comment.

A managed job's comment is the user's own comment, verbatim, followed by slurm-rl's part:

    <user comment> {rl1:d=1764460800,h,c=critical,g=2-8,e,s=10000,m=resnet50}{rlp:1200/10000@3.5}

`rl1` is the versioned intent (written once, by rlsbatch), `rlp` the latest progress (rewritten
by the job itself). Both are bounded (`MAX_PART_BYTES`) so that the whole comment stays well
under Slurm 22.05's 1024-byte limit (longer comments are refused at submission). Keys:

    d  deadline, epoch seconds        h  hard deadline (flag)    c  service class
    g  GPU range min-max              e  elastic (flag)          s  total steps
    m  model name                     b  batch size              i  inference model (a name)

(the table `tags.INTENT_KEYS` defines them, for the encoder and the decoder alike)

Every number is ASCII digits within the bounds in `tags.py` (GPUs 1..4096, steps and batch
below 2**53, deadlines in 2000..2100); a tag that breaks any rule decodes as no intent.

Only the standard library is used here. The encoder itself lives in `tags.py` (no imports at
all, because rlsbatch runs it on every submission); this module re-exports it and adds the
decoder and the `Intent`/`Progress` conversions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.submit.tags import (
    INTENT_FIELDS,
    INTENT_KEYS,
    MAX_COMMENT_BYTES,
    MAX_EPOCH,
    MAX_GPUS,
    MAX_INT,
    MAX_PART_BYTES,
    MIN_EPOCH,
    PROGRESS_RESERVE_BYTES,
    SERVICE_CLASSES,
    VERSION,
    CommentError,
    ascii_float,
    ascii_int,
    ascii_stamp,
    encode_intent_values,
    join_comment,
    stamp_text,
    valid_model_name,
)

__all__ = [
    "MAX_COMMENT_BYTES", "MAX_PART_BYTES", "PROGRESS_RESERVE_BYTES", "VERSION", "CommentError",
    "DecodedComment", "compose_comment", "decode_comment", "encode_intent", "encode_progress",
    "with_progress",
]

# \Z, not $: `$` also matches before a final newline.
_TAIL_RE = re.compile(
    r"(?:^| )\{rl1:(?P<intent>[^{}]*)\}(?:\{rlp:(?P<progress>[^{}]*)\})?\Z"
)
_PROGRESS_ONLY_RE = re.compile(r"(?:^| )\{rlp:(?P<progress>[^{}]*)\}\Z")


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
    values = {name: getattr(intent, name) for name in INTENT_FIELDS}
    values["service_class"] = intent.service_class.value
    return encode_intent_values(**values)


def encode_progress(progress: Progress) -> str:
    body = str(progress.steps_done)
    if progress.steps_total is not None:
        body += f"/{progress.steps_total}"
    if progress.rate is not None:
        body += f"@{progress.rate:.4g}"
    if progress.updated_at is not None:
        body += f";t={stamp_text(progress.updated_at)}"
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

    A comment without slurm-rl's part decodes to (comment, None, None). A malformed part, or
    one with a value out of bounds (tags.py: ASCII digits only, steps and batch below 2**53,
    GPUs 1..MAX_GPUS, deadlines in 2000..2100, finite rates), is treated as the user's text,
    never as an intent: the daemon must not act on garbage. Never raises, whatever the text.
    """
    text = comment if isinstance(comment, str) else ""
    m = _TAIL_RE.search(text)
    if m is None:
        pm = _PROGRESS_ONLY_RE.search(text)
        only = _decode_progress(pm.group("progress")) if pm is not None else None
        if pm is None or only is None:
            return DecodedComment(user_comment=text, intent=None, progress=None)
        return DecodedComment(user_comment=text[: pm.start()], intent=None, progress=only)
    intent = _decode_intent(m.group("intent"))
    if intent is None:
        return DecodedComment(user_comment=text, intent=None, progress=None)
    # A bad progress tag costs the progress only: the next report replaces it.
    body = m.group("progress")
    prog = _decode_progress(body) if body is not None else None
    return DecodedComment(user_comment=text[: m.start()], intent=intent, progress=prog)


def _by_key() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Comment key -> (kind, the Intent fields it holds, in order), from `tags.INTENT_KEYS`."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, key, kind, _ in INTENT_KEYS:
        out[key] = (kind, (out[key][1] if key in out else ()) + (name,))
    return out


_BY_KEY = _by_key()


def _decode_value(kind: str, value: str) -> tuple[object, ...] | None:
    """The field values one `key=value` item holds, or None if malformed or out of bounds."""
    if kind == "epoch":
        when = ascii_int(value, MIN_EPOCH, MAX_EPOCH)
        return None if when is None else (float(when),)
    if kind == "count":
        count = ascii_int(value, 1, MAX_INT)
        return None if count is None else (count,)
    if kind == "class":
        return (ServiceClass(value),) if value in SERVICE_CLASSES else None
    if kind == "model":
        return (value,) if valid_model_name(value) else None
    if kind == "gpus":
        lo_s, dash, hi_s = value.partition("-")
        lo = ascii_int(lo_s, 1, MAX_GPUS) if lo_s else None
        hi = ascii_int(hi_s, 1, MAX_GPUS) if hi_s else None
        if (not dash or (lo_s and lo is None) or (hi_s and hi is None)
                or (lo is None and hi is None) or (lo and hi and lo > hi)):
            return None
        return lo, hi
    raise AssertionError(f"unknown intent kind {kind!r}")


def _decode_intent(body: str) -> Intent | None:
    """The intent in a `{rl1:...}` body, or None if any field is malformed or out of bounds."""
    fields: dict[str, object] = {}
    seen: set[str] = set()
    for item in filter(None, body.split(",")):
        key, eq, value = item.partition("=")
        spec = _BY_KEY.get(key)
        if spec is None or key in seen:
            return None  # an unknown key, or a key given twice
        seen.add(key)
        kind, names = spec
        if kind == "flag":
            parsed: tuple[object, ...] | None = None if eq else (True,)
        else:
            parsed = _decode_value(kind, value) if eq else None
        if parsed is None:
            return None  # a flag with a value, a value without one, or a bad value
        fields.update(zip(names, parsed, strict=True))
    try:
        return Intent(**fields)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _decode_progress(body: str) -> Progress | None:
    """The progress in a `{rlp:...}` body, or None if malformed or out of bounds."""
    main, semi, tail = body.partition(";")
    updated: float | None = None
    if semi:
        updated = ascii_stamp(tail[2:]) if tail.startswith("t=") else None
        if updated is None:
            return None
    steps_part, at, rate_part = main.partition("@")
    done_s, slash, total_s = steps_part.partition("/")
    done = ascii_int(done_s)
    total = ascii_int(total_s, 1, MAX_INT) if slash else None
    rate = ascii_float(rate_part) if at else None
    if done is None or (slash and (total is None or done > total)) or (at and rate is None):
        return None
    try:
        return Progress(steps_done=done, steps_total=total, rate=rate, updated_at=updated)
    except (TypeError, ValueError):
        return None
