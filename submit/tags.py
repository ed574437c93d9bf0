"""Encoding slurm-rl's part of a job comment, with nothing but builtins.

This is the write half of the comment codec (the format is described in `intent.py`, which
re-exports everything here and adds the decoder). It lives apart because `rlsbatch` runs it on
every submission and must start fast: importing `slurm_rl.core` (dataclasses, typing) or even
`re` costs more than sbatch itself takes on an idle controller. So: no imports at all.
"""

from __future__ import annotations

VERSION = "rl1"
MAX_PART_BYTES = 200
"""The most bytes slurm-rl's part (intent plus progress) may take."""
MAX_COMMENT_BYTES = 1000
"""The most bytes a whole comment may take (Slurm 22.05 refuses over 1024)."""
PROGRESS_RESERVE_BYTES = 70
"""Room kept free at submission for the longest progress tag a job may add later
(`{rlp:<19 digits>/<19 digits>@<10>;t=<10 digits>}` is 69 bytes)."""

SERVICE_CLASSES = ("critical", "standard", "besteffort")
"""The values of `slurm_rl.core.ServiceClass` (a test keeps the two equal)."""

_MODEL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


class CommentError(ValueError):
    """A comment or intent that can not be encoded or decoded."""


def normalize_service_class(text: str) -> str:
    """The canonical class name for `text` (as `ServiceClass.parse` accepts it)."""
    key = text.strip().lower().replace("-", "").replace("_", "")
    if key not in SERVICE_CLASSES:
        raise CommentError(
            f"unknown service class {text!r} (valid: {', '.join(SERVICE_CLASSES)})"
        )
    return key


def valid_model_name(name: str) -> bool:
    return 1 <= len(name) <= 40 and all(ch in _MODEL_CHARS for ch in name)


def encode_intent_values(
    *,
    deadline: float | None = None,
    hard: bool = False,
    service_class: str = "standard",
    gpus_min: int | None = None,
    gpus_max: int | None = None,
    elastic: bool = False,
    total_steps: int | None = None,
    model: str | None = None,
    batch_size: int | None = None,
) -> str:
    """The `{rl1:...}` tag for an intent given as plain values (`Intent`'s field names)."""
    parts: list[str] = []
    if deadline is not None:
        parts.append(f"d={int(round(deadline))}")
    if hard:
        parts.append("h")
    if service_class != "standard":
        parts.append(f"c={normalize_service_class(service_class)}")
    if gpus_min is not None or gpus_max is not None:
        lo = "" if gpus_min is None else str(gpus_min)
        hi = "" if gpus_max is None else str(gpus_max)
        parts.append(f"g={lo}-{hi}")
    if elastic:
        parts.append("e")
    if total_steps is not None:
        parts.append(f"s={total_steps}")
    if model is not None:
        if not valid_model_name(model):
            raise CommentError(
                f"model name {model!r}: use 1-40 letters, digits, '_', '.' or '-'"
            )
        parts.append(f"m={model}")
    if batch_size is not None:
        parts.append(f"b={batch_size}")
    return "{" + VERSION + ":" + ",".join(parts) + "}"


def join_comment(user_comment: str, ours: str, *, reserve_bytes: int = 0) -> str:
    """User comment (verbatim) + slurm-rl's part `ours`; raises CommentError if it would not
    fit. `reserve_bytes` keeps room for a part that is added later (progress)."""
    if "\n" in user_comment:
        raise CommentError("--comment: a comment may not contain a newline")
    ours_len = len(ours.encode())
    # a comment read from a non-UTF-8 script keeps its bytes (surrogateescape) and counts them
    if ours_len + reserve_bytes > MAX_PART_BYTES:
        room = MAX_PART_BYTES - reserve_bytes
        raise CommentError(
            f"intent too long for the job comment ({ours_len} bytes, at most {room})"
        )
    full = f"{user_comment} {ours}" if user_comment else ours
    full_len = len(full.encode("utf-8", "surrogateescape")) + reserve_bytes
    if full_len > MAX_COMMENT_BYTES:
        raise CommentError(
            f"--comment plus the slurm-rl intent is {full_len} bytes"
            + (f" (with {reserve_bytes} kept for progress)" if reserve_bytes else "")
            + f"; Slurm refuses comments over 1024 bytes, so keep it under {MAX_COMMENT_BYTES}"
        )
    return full
