"""Encoding slurm-rl's part of a job comment, with nothing but builtins.

This is the write half of the comment codec (the format is described in `intent.py`, which
re-exports everything here and adds the decoder). It lives apart because `rlsbatch` runs it on
every submission and must start fast: importing `slurm_rl.core` (dataclasses, typing) or even
`re` costs more than sbatch itself takes on an idle controller. So: no imports but the
builtins-only bounds module (`slurm_rl.checks`).
"""

from __future__ import annotations

VERSION = "rl1"
MAX_PART_BYTES = 200
"""The most bytes slurm-rl's part (intent plus progress) may take."""
MAX_COMMENT_BYTES = 1000
"""The most bytes a whole comment may take (Slurm 22.05 refuses over 1024)."""
PROGRESS_RESERVE_BYTES = 70
"""Room kept free at submission for the longest progress tag a job may add later
(`{rlp:<16 digits>/<16 digits>@<9>;t=<10 digits>.<3 digits>}` is 66 bytes)."""

# --- Bounds on every number a user gives: slurm_rl/checks.py (re-exported here) ---
from slurm_rl.checks import (  # noqa: E402,F401 (re-exported: the codec's public names)
    MAX_DIGITS,
    MAX_EPOCH,
    MAX_INT,
    MIN_EPOCH,
    CommentError,
    ascii_float,
    ascii_int,
    ascii_stamp,
    check_int,
    check_number,
    read_digits,
    stamp_text,
)

MAX_GPUS = 4096
"""The most GPUs a range may name; the daemon clamps to the partition's real limits."""
RLSBATCH_HORIZON_S = 315_576_000
"""rlsbatch refuses a deadline more than 10 years ahead (the daemon applies the site's own,
shorter horizon)."""


def brief(text: str, limit: int = 40) -> str:
    """`text` cut to `limit` characters, for an error message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."

SERVICE_CLASSES = ("critical", "standard", "besteffort")
"""The values of `slurm_rl.core.ServiceClass` (a test keeps the two equal)."""

_MODEL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def normalize_service_class(text: str) -> str:
    """The canonical class name for `text` (as `ServiceClass.parse` accepts it)."""
    key = text.strip().lower().replace("-", "").replace("_", "")
    if key not in SERVICE_CLASSES:
        raise CommentError(
            f"unknown service class {text!r} (valid: {', '.join(SERVICE_CLASSES)})"
        )
    return key


INFERENCE_MODELS = ("vgg", "resnet", "mobilenet", "bert", "gpt")
"""The shipped inference profiles (slurm_rl/data/inference/; a test keeps the two equal)."""


def valid_model_name(name: str) -> bool:
    return 1 <= len(name) <= 40 and all(ch in _MODEL_CHARS for ch in name)


INTENT_KEYS: tuple[tuple[str, str, str, object], ...] = (
    # (Intent field, comment key, kind, default), in the order the tag writes them
    ("deadline", "d", "epoch", None),
    ("hard", "h", "flag", False),
    ("service_class", "c", "class", "standard"),
    ("gpus_min", "g", "gpus", None),
    ("gpus_max", "g", "gpus", None),
    ("elastic", "e", "flag", False),
    ("total_steps", "s", "count", None),
    ("model", "m", "model", None),
    ("batch_size", "b", "count", None),
    ("inference", "i", "model", None),
)
"""The intent's fields, defined once for everything that can import nothing: the comment codec
(this encoder and `intent.py`'s decoder read their keys and kinds from it) and rlsbatch's
`IntentValues` (its slots); `db/bounds.py` picks its storage checks by kind. Kinds: `epoch`
d=<epoch seconds>; `flag` the key alone when true; `class` c=<SERVICE_CLASSES>, left out when
standard; `gpus` g=<min>-<max>, both fields under one key, either end may be empty; `count` a
whole number 1..MAX_INT; `model` a model name (1-40 of A-Z a-z 0-9 _ . -).

`inference` (i=NAME) marks an inference job: NAME is the model `slurm-rl plan` places inside the
job. The tag carries a name only, never a profile file's path: the daemon (root) never opens a
file a user named, and a path could hold any byte and overflow the bounded tag. rlsbatch takes
only `INFERENCE_MODELS`; the decoder takes any name of the model pattern (bounded, ASCII).

`slurm_rl.core.Intent` keeps its own typed field list (mypy and the dataclass need it
spelled out, and this module may not import dataclasses); `db/repo.py` derives its columns
and JSON from `dataclasses.fields(Intent)`. tests/submit/test_intent_fields.py checks that
Intent, this table, `IntentValues` and the database columns name the same fields, in the same
order, with the same defaults."""

INTENT_FIELDS = tuple(name for name, _, _, _ in INTENT_KEYS)


def encode_intent_values(**values: object) -> str:
    """The `{rl1:...}` tag for an intent given as plain values, by `Intent`'s field names (a
    field not given has its default; the class is a string)."""
    unknown = set(values) - set(INTENT_FIELDS)
    if unknown:
        raise TypeError(f"not intent fields: {', '.join(sorted(unknown))}")
    parts: list[str] = []
    for name, key, kind, default in INTENT_KEYS:
        value = values.get(name, default)
        if kind == "flag":
            if value:
                parts.append(key)
        elif kind == "class":
            if value != default:
                parts.append(f"c={normalize_service_class(str(value))}")
        elif kind == "gpus":
            if name != "gpus_min":
                continue  # written with gpus_min: one key for the range
            lo, hi = value, values.get("gpus_max")
            for end, top in (("gpus_min", lo), ("gpus_max", hi)):
                if top is not None:
                    check_int(end, top, 1, MAX_GPUS)
            if lo is not None or hi is not None:
                parts.append(f"{key}={'' if lo is None else lo}-{'' if hi is None else hi}")
        elif value is None:
            continue
        elif kind == "epoch":
            check_number(name, value, MIN_EPOCH, MAX_EPOCH)  # so `value` is an int or a float
            parts.append(f"{key}={int(round(value))}")  # type: ignore[call-overload]
        elif kind == "count":
            check_int(name, value, 1, MAX_INT)
            parts.append(f"{key}={value}")
        elif kind == "model":
            if not (isinstance(value, str) and valid_model_name(value)):
                raise CommentError(
                    f"model name {value!r}: use 1-40 letters, digits, '_', '.' or '-'"
                )
            parts.append(f"{key}={value}")
        else:
            raise AssertionError(f"intent field {name}: unknown kind {kind!r}")
    return "{" + VERSION + ":" + ",".join(parts) + "}"


def join_comment(user_comment: str, ours: str, *, reserve_bytes: int = 0) -> str:
    """User comment (verbatim) + slurm-rl's part `ours`; raises CommentError if it would not
    fit. `reserve_bytes` keeps room for a part that is added later (progress)."""
    if "\n" in user_comment:
        raise CommentError("--comment: a comment may not contain a newline")
    if "{rl1:" in user_comment or "{rlp:" in user_comment:
        raise CommentError("--comment: may not hold a slurm-rl tag ({rl1:...} or {rlp:...}); "
                           "give the intent with the --rl-* options")
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
