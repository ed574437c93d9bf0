"""Hypothesis fuzz of the comment codec: whatever a user writes into a comment, decoding never
raises, and anything it decodes is within the bounds (so the daemon can store and act on it).
"""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.submit.intent import (
    CommentError,
    decode_comment,
    encode_intent,
    encode_progress,
    with_progress,
)
from slurm_rl.submit.tags import MAX_EPOCH, MAX_GPUS, MAX_INT, MIN_EPOCH, valid_model_name

# Text that looks like our tags: their keys and punctuation, ASCII and other digits, signs,
# words Python's float() takes, control characters, line and paragraph separators.
PIECES = st.sampled_from([
    "{rl1:", "{rlp:", "}", "{", ",", "=", "-", "/", "@", ";t=", "d=", "g=", "s=", "b=", "c=",
    "m=", "h", "e", "critical", "besteffort", "standard", "nan", "inf", "e400", "1e", "_", "+",
    ".", " ", "0", "1", "4096", "4097", "9007199254740991", "9007199254740992",
    "99999999999999999999999", "1924992000", "4102444801", "\u0663", "\uff13", "\u00b3",
    "\U0001d7d1", "\n", "\r", "\x0b", "\x0c", "\x1e", "\x1f", "\u2028", "\u0085", "\udcff",
])
TAGGISH = st.lists(PIECES, max_size=40).map("".join)
ANY_TEXT = st.one_of(st.text(max_size=300), TAGGISH,
                     st.tuples(st.text(max_size=50), TAGGISH).map("".join))


def assert_within_bounds(intent: Intent | None, progress: Progress | None) -> None:
    if intent is not None:
        if intent.deadline is not None:
            assert MIN_EPOCH <= intent.deadline <= MAX_EPOCH
        for g in (intent.gpus_min, intent.gpus_max):
            assert g is None or 1 <= g <= MAX_GPUS
        if intent.gpus_min is not None and intent.gpus_max is not None:
            assert intent.gpus_min <= intent.gpus_max
        for n in (intent.total_steps, intent.batch_size):
            assert n is None or 1 <= n <= MAX_INT
        assert intent.model is None or valid_model_name(intent.model)
        assert isinstance(intent.service_class, ServiceClass)
    if progress is not None:
        assert 0 <= progress.steps_done <= MAX_INT
        if progress.steps_total is not None:
            assert progress.steps_done <= progress.steps_total <= MAX_INT
        if progress.rate is not None:
            assert math.isfinite(progress.rate) and 0 <= progress.rate <= MAX_INT
        if progress.updated_at is not None:
            assert 0 <= progress.updated_at <= MAX_EPOCH


@settings(max_examples=3000, deadline=None)
@given(ANY_TEXT)
@example("a\nb {rl1:c=critical}")
@example("{rl1:g=\u0663-\u0664}{rlp:1/2@nan}")
@example("{rl1:s=99999999999999999999999999,d=99999999999}")
def test_decoding_never_raises_and_stays_in_bounds(text: str) -> None:
    decoded = decode_comment(text)
    assert_within_bounds(decoded.intent, decoded.progress)
    assert text.startswith(decoded.user_comment)
    if decoded.intent is not None:
        # a progress report keeps the intent, or is refused as a whole (a comment with a
        # newline, or too long, can not be written back)
        try:
            again = decode_comment(with_progress(text, Progress(steps_done=1)))
        except CommentError:
            assert "\n" in decoded.user_comment or len(text.encode("utf-8", "replace")) > 900
        else:
            assert again.intent == decoded.intent


INTENTS = st.builds(
    Intent,
    deadline=st.one_of(st.none(), st.integers(MIN_EPOCH, MAX_EPOCH).map(float)),
    hard=st.booleans(), service_class=st.sampled_from(ServiceClass),
    gpus_min=st.one_of(st.none(), st.integers(1, MAX_GPUS)),
    gpus_max=st.one_of(st.none(), st.just(MAX_GPUS)), elastic=st.booleans(),
    total_steps=st.one_of(st.none(), st.integers(1, MAX_INT)),
    model=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9_.\-]{1,40}", fullmatch=True)),
    batch_size=st.one_of(st.none(), st.integers(1, MAX_INT)),
)


@settings(max_examples=500, deadline=None)
@given(INTENTS, st.integers(0, MAX_INT), st.one_of(st.none(), st.floats(0, 1e15)))
def test_everything_within_bounds_round_trips(intent: Intent, done: int,
                                              rate: float | None) -> None:
    progress = Progress(steps_done=done, steps_total=MAX_INT, rate=rate, updated_at=1.9e9)
    decoded = decode_comment(encode_intent(intent) + encode_progress(progress))
    assert decoded.intent == intent
    assert decoded.progress is not None and decoded.progress.steps_done == done
