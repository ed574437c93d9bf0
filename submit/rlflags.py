"""rlsbatch's own flags: their names, their values, and the intent they add up to.

Every flag starts with `--rl-` (sbatch 22.05 has no option starting with "rl", so no sbatch
option or abbreviation of one can be mistaken for ours, and ours are matched exactly, never by
prefix). `--dry-run` and `--force` are accepted as synonyms of `--rl-dry-run` and `--rl-force`
(sbatch has neither).
"""

from __future__ import annotations

import time

from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.tags import (
    INFERENCE_MODELS,
    INTENT_FIELDS,
    MAX_EPOCH,
    MAX_GPUS,
    MAX_INT,
    RLSBATCH_HORIZON_S,
    CommentError,
    brief,
    encode_intent_values,
    normalize_service_class,
    read_digits,
    valid_model_name,
)

RL_FLAGS: dict[str, bool] = {
    "rl-deadline": True, "rl-hard": False, "rl-soft": False, "rl-class": True,
    "rl-gpus": True, "rl-elastic": False, "rl-steps": True, "rl-model": True,
    "rl-batch-size": True, "rl-inference": True, "rl-dry-run": False, "dry-run": False,
    "rl-help": False, "rl-force": False, "force": False,
}
"""Flag name (without the leading --) -> whether it takes a value."""

CMDLINE_ONLY = frozenset({"rl-dry-run", "dry-run", "rl-help", "rl-force", "force"})
"""Flags that make no sense inside a job script (#RLSBATCH)."""

HELP = """\
rlsbatch options (everything else is sbatch's; see sbatch --help):
  --rl-deadline=WHEN   when the job should be done: ISO 8601 (2026-12-01T18:00, zone
                       optional, local time if none) or relative (+6h, +90m, +1d2h, +3600s);
                       at most 10 years ahead. Not sbatch's --deadline (Slurm removes the job).
                       With --rl-model and no GPU or CPU request: submitted held, and the
                       slurm-rl daemon picks its GPUs and CPUs, then releases it.
  --rl-hard            the job is worthless after its deadline (default: soft)
  --rl-soft            the job is still worth finishing late (the default)
  --rl-class=CLASS     critical | standard (default) | besteffort. Not sbatch's --qos.
  --rl-gpus=MIN-MAX    total GPUs the job can run with (or N); without --gres/--gpus the job
                       starts with MIN (as --gres=gpu:K on enough nodes)
  --rl-elastic         may be resized or preempted while running (requeued; must checkpoint)
  --rl-steps=N         total training steps (for progress-based time prediction)
  --rl-model=NAME      model name (letters, digits, '_', '.', '-'; at most 40)
  --rl-batch-size=N    global batch size
  --rl-inference=MODEL an inference job of MODEL (vgg, resnet, mobilenet, bert, gpt):
                       `slurm-rl plan` in the job places it over the job's nodes. For a
                       profile file, run `slurm-rl plan FILE` in the job instead.
  --rl-force, --force  submit even if the hard deadline looks infeasible (rlsbatch prints the
                       predicted start and finish of a job with --rl-deadline, from the
                       slurm-rl daemon's latest view, and refuses an infeasible hard one)
  --rl-dry-run, --dry-run
                       print the sbatch command and the intent; submit nothing
  --rl-help            show this help
Our flags go before the script, like sbatch's, or on #RLSBATCH lines in the script (same
place rules as #SBATCH); the command line wins over #RLSBATCH.
"""

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_UNIT_WORDS = {"w": ("week", "weeks"), "d": ("day", "days"),
               "h": ("hr", "hrs", "hour", "hours"), "m": ("min", "mins", "minute", "minutes"),
               "s": ("sec", "secs", "second", "seconds")}


def parse_deadline(text: str, now: float) -> float:
    """Epoch seconds for an ISO 8601 time (local if it has no zone) or `+1d2h`-style offset,
    in the future and at most `RLSBATCH_HORIZON_S` (10 years) ahead."""
    text = text.strip()
    if text.startswith("+"):
        seconds = _parse_offset(text[1:])
        if seconds is None:
            raise UsageError(
                f"--rl-deadline: can't read {brief(text)!r}: a relative deadline is + and one or "
                "more NUMBER+UNIT (w, d, h, m, s, or Slurm's words: weeks, days, hours, "
                "minutes, seconds), e.g. +6h, +90m, +10min, +1d2h, +2hours"
            )
        if seconds <= 0:
            raise UsageError(f"--rl-deadline: {brief(text)!r} is not in the future")
        return _within_horizon(text, float(int(now) + seconds), now)
    from datetime import datetime  # only absolute deadlines pay for this import

    try:
        if not text.isascii():
            raise ValueError(text)  # fromisoformat reads only ASCII digits today; say so here
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--rl-deadline: can't read {brief(text)!r}: use an ISO 8601 time such as "
            "2026-12-01T18:00 or 2026-12-01T18:00+01:00, or a relative one such as +6h"
        ) from None
    try:
        when = parsed.timestamp()
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--rl-deadline: {text} is out of range") from None
    if when <= now:
        shown = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        raise UsageError(f"--rl-deadline: {text} is in the past (now is {shown})")
    return _within_horizon(text, float(int(when)), now)


def _within_horizon(text: str, when: float, now: float) -> float:
    if when - now > RLSBATCH_HORIZON_S or when > MAX_EPOCH:
        raise UsageError(f"--rl-deadline: {brief(text)} is more than 10 years ahead (the furthest "
                         "rlsbatch accepts)")
    return when


def _unit_seconds(word: str) -> int | None:
    """Seconds in one unit: a letter (w d h m s) or one of Slurm's words (`--begin=now+1hour`:
    seconds, minutes, hours, days, weeks; singular, plural, or `sec`/`min`/`hr`)."""
    word = word.lower()
    for letter, names in _UNIT_WORDS.items():
        if word == letter or word in names:
            return _UNITS[letter]
    return None


def _parse_offset(text: str) -> int | None:
    """Seconds in `1d2h`- or `1day2hours`-style text; None if unreadable. Far too large
    numbers come back as a count beyond any horizon rather than as a huge int."""
    total = 0
    i = 0
    if not text:
        return None
    while i < len(text):
        j = i
        while j < len(text) and "0" <= text[j] <= "9":
            j += 1
        k = j
        while k < len(text) and ("a" <= text[k] <= "z" or "A" <= text[k] <= "Z"):
            k += 1
        unit = _unit_seconds(text[j:k]) if j > i and k > j else None
        if unit is None:
            return None  # a number without a unit, a unit without a number, anything else
        total = min(total + (read_digits(text[i:j]) or 0) * unit, MAX_INT)
        i = k
    return total


def parse_gpu_range(text: str) -> tuple[int, int]:
    """`MIN-MAX` or `N`: ASCII digits, 1 <= MIN <= MAX <= MAX_GPUS."""
    lo_s, dash, hi_s = text.strip().partition("-")
    lo, hi = read_digits(lo_s), read_digits(hi_s if dash else lo_s)
    if lo is None or hi is None:
        raise UsageError(f"--rl-gpus: can't read {brief(text)!r}: use MIN-MAX (e.g. 2-8) "
                         "or a count")
    if hi > MAX_GPUS or lo > MAX_GPUS:
        raise UsageError(f"--rl-gpus: {brief(text)}: at most {MAX_GPUS} GPUs")
    if lo < 1:
        raise UsageError(f"--rl-gpus: {text}: the minimum must be at least 1")
    if lo > hi:
        raise UsageError(f"--rl-gpus: {text}: the minimum ({lo}) is above the maximum ({hi})")
    return lo, hi


def parse_positive_int(flag: str, text: str) -> int:
    """A whole number 1..MAX_INT written in ASCII digits."""
    value = read_digits(text.strip())
    if value is None or value < 1:
        raise UsageError(f"--{flag}: {brief(text)!r} is not a positive whole number")
    if value > MAX_INT:
        raise UsageError(f"--{flag}: {brief(text)!r} is too large (at most {MAX_INT})")
    return value


def parse_inference(text: str) -> str:
    """A shipped inference model's name. Only a name goes into the tag: a profile file is the
    job's own business (`slurm-rl plan FILE`), never something the daemon opens."""
    if text not in INFERENCE_MODELS:
        shown = "".join(ch if " " <= ch <= "~" else "?" for ch in brief(text))
        hint = (" (a profile file: run `slurm-rl plan FILE` in the job)"
                if text.endswith(".json") or "/" in text else "")
        raise UsageError(f"--rl-inference: unknown model {shown!r}; valid: "
                         f"{', '.join(INFERENCE_MODELS)}{hint}")
    return text


class IntentValues:
    """The intent as plain values, with `slurm_rl.core.Intent`'s field names.

    Not the `Intent` dataclass itself: importing slurm_rl.core costs more than sbatch does.
    The slots are `tags.INTENT_FIELDS`; the typed defaults below must name the same fields
    (a test checks them against the table's defaults).
    """

    __slots__ = INTENT_FIELDS

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.hard = False
        self.service_class = "standard"
        self.gpus_min: int | None = None
        self.gpus_max: int | None = None
        self.elastic = False
        self.total_steps: int | None = None
        self.model: str | None = None
        self.batch_size: int | None = None
        self.inference: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    def tag(self) -> str:
        """The `{rl1:...}` tag (see submit/intent.py for the format)."""
        try:
            return encode_intent_values(**self.as_dict())
        except CommentError as exc:
            raise UsageError(str(exc)) from None


def apply_flag(values: IntentValues, name: str, value: str | None, now: float) -> None:
    """Set one rlsbatch flag (validated) on `values`; a later call for the same flag wins."""
    text = value or ""
    if name == "rl-deadline":
        values.deadline = parse_deadline(text, now)
    elif name == "rl-hard":
        values.hard = True
    elif name == "rl-soft":
        values.hard = False
    elif name == "rl-class":
        try:
            values.service_class = normalize_service_class(text)
        except CommentError as exc:
            raise UsageError(f"--rl-class: {exc}") from None
    elif name == "rl-gpus":
        values.gpus_min, values.gpus_max = parse_gpu_range(text)
    elif name == "rl-elastic":
        values.elastic = True
    elif name == "rl-steps":
        values.total_steps = parse_positive_int(name, text)
    elif name == "rl-batch-size":
        values.batch_size = parse_positive_int(name, text)
    elif name == "rl-model":
        if not valid_model_name(text):
            raise UsageError(
                f"--rl-model: {brief(text)!r}: use 1-40 letters, digits, '_', '.' or '-'"
            )
        values.model = text
    elif name == "rl-inference":
        values.inference = parse_inference(text)
    else:  # dry-run, force and help are handled by the caller
        raise AssertionError(name)


def build_intent(flags: list[tuple[str, str | None, str]], now: float | None = None
                 ) -> IntentValues:
    """Apply (name, value, where) flags in order; `where` prefixes error messages
    ("job.sh line 4") unless it is the command line."""
    now = time.time() if now is None else now
    values = IntentValues()
    for name, value, where in flags:
        if name in CMDLINE_ONLY:
            continue
        try:
            apply_flag(values, name, value, now)
        except UsageError as exc:
            if where == "command line":
                raise
            raise UsageError(f"{where}: {exc.message}", exc.exit_code) from None
    if values.hard and values.deadline is None:
        raise UsageError("--rl-hard: a hard deadline needs --rl-deadline")
    return values
