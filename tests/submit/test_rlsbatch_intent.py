"""Our flags' values (deadline, GPU range, class, ...) and the intent tag they become."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.intent import (
    PROGRESS_RESERVE_BYTES,
    CommentError,
    compose_comment,
    decode_comment,
    encode_intent,
    encode_progress,
)
from slurm_rl.submit.rlflags import build_intent, parse_deadline, parse_gpu_range
from slurm_rl.submit.tags import (
    MAX_PART_BYTES,
    SERVICE_CLASSES,
    encode_intent_values,
    join_comment,
)

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "offset"),
    [("+6h", 6 * 3600), ("+90m", 90 * 60), ("+1d2h", 26 * 3600), ("+3600s", 3600),
     ("+1w", 7 * 86400), ("+1h30m15s", 5415), (" +2d ", 2 * 86400)],
)
def test_relative_deadlines(text: str, offset: int) -> None:
    assert parse_deadline(text, NOW) == NOW + offset


def test_absolute_deadlines_with_and_without_zone() -> None:
    assert parse_deadline("2030-01-02T03:04:05+00:00", NOW) == datetime(
        2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert parse_deadline("2030-01-02T03:04:05Z", NOW) == datetime(
        2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    # no zone: local time, as date(1) and Slurm read it
    assert parse_deadline("2030-01-02 03:04", NOW) == datetime(2030, 1, 2, 3, 4).timestamp()
    assert parse_deadline("2030-01-02", NOW) == datetime(2030, 1, 2).timestamp()


@pytest.mark.parametrize(
    ("text", "message"),
    [("+6", "a relative deadline is"), ("+h", "a relative deadline is"),
     ("+", "a relative deadline is"), ("+6x", "a relative deadline is"),
     ("+0h", "is not in the future"), ("tomorrow", "can't read 'tomorrow'"),
     ("6h", "can't read '6h'"), ("2020-01-01T00:00", "is in the past")],
)
def test_bad_deadlines(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=f"^--rl-deadline: .*{message}"):
        parse_deadline(text, NOW)


def test_gpu_ranges() -> None:
    assert parse_gpu_range("2-8") == (2, 8)
    assert parse_gpu_range("4") == (4, 4)
    for bad, msg in [("8-2", "above the maximum"), ("0-4", "at least 1"), ("x", "can't read"),
                     ("2-", "can't read"), ("-3", "can't read")]:
        with pytest.raises(UsageError, match=f"^--rl-gpus: .*{msg}"):
            parse_gpu_range(bad)


def flags(*pairs: tuple[str, str | None]) -> list[tuple[str, str | None, str]]:
    return [(n, v, "command line") for n, v in pairs]


def test_build_intent_later_flags_win() -> None:
    values = build_intent([("rl-class", "critical", "job.sh line 3"),
                           ("rl-hard", None, "job.sh line 3"),
                           ("rl-deadline", "+1h", "job.sh line 4"),
                           ("rl-class", "best-effort", "command line"),
                           ("rl-soft", None, "command line")], NOW)
    assert values.service_class == "besteffort"
    assert values.hard is False
    assert values.deadline == NOW + 3600


@pytest.mark.parametrize(
    ("given", "message"),
    [(flags(("rl-class", "gold")), "^--rl-class: unknown service class 'gold' \\(valid: "
                                   "critical, standard, besteffort\\)"),
     (flags(("rl-hard", None)), "^--rl-hard: a hard deadline needs --rl-deadline"),
     (flags(("rl-steps", "0")), "^--rl-steps: '0' is not a positive whole number"),
     (flags(("rl-batch-size", "-4")), "^--rl-batch-size: '-4' is not a positive"),
     (flags(("rl-model", "res net")), "^--rl-model: 'res net': use 1-40 letters"),
     (flags(("rl-model", "x" * 41)), "^--rl-model: .*use 1-40 letters"),
     ([("rl-deadline", "soon", "job.sh line 7")], "^job.sh line 7: --rl-deadline: can't read")],
)
def test_build_intent_errors(given: list[tuple[str, str | None, str]], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_intent(given, NOW)


def test_fast_path_classes_match_the_core_enum() -> None:
    assert SERVICE_CLASSES == tuple(m.value for m in ServiceClass)


INTENTS = [
    Intent(),
    Intent(deadline=1764460800.0, hard=True, service_class=ServiceClass.CRITICAL, gpus_min=2,
           gpus_max=8, elastic=True, total_steps=10000, model="resnet50", batch_size=128),
    Intent(service_class=ServiceClass.BESTEFFORT, gpus_min=1, gpus_max=1),
]


@pytest.mark.parametrize("intent", INTENTS)
def test_plain_value_encoder_matches_the_intent_encoder(intent: Intent) -> None:
    values = {f: getattr(intent, f) for f in Intent.__dataclass_fields__}
    values["service_class"] = intent.service_class.value
    tag = encode_intent_values(**values)  # type: ignore[arg-type]
    assert tag == encode_intent(intent)
    assert decode_comment(f"user text {tag}").intent == intent


def test_build_intent_round_trips_through_the_comment() -> None:
    values = build_intent(flags(("rl-deadline", "+2h"), ("rl-hard", None),
                                ("rl-class", "critical"), ("rl-gpus", "2-8"),
                                ("rl-elastic", None), ("rl-steps", "1000"),
                                ("rl-model", "bert-large"), ("rl-batch-size", "64")), NOW)
    decoded = decode_comment(join_comment("my  words ", values.tag()))
    assert decoded.user_comment == "my  words "
    assert decoded.intent == Intent(**values.as_dict() | {  # type: ignore[arg-type]
        "service_class": ServiceClass.CRITICAL})


def test_submission_keeps_room_for_progress() -> None:
    # The longest intent within the bounds fits, with room for the longest progress tag.
    longest = encode_intent_values(
        deadline=4_102_444_800, hard=True, service_class="besteffort", gpus_min=4096,
        gpus_max=4096, elastic=True, total_steps=2 ** 53 - 1, model="m" * 40,
        batch_size=2 ** 53 - 1)
    progress = encode_progress(Progress(steps_done=2 ** 53 - 1, steps_total=2 ** 53 - 1,
                                        rate=9.007e15, updated_at=4_102_444_799.999))
    assert len(progress) <= PROGRESS_RESERVE_BYTES
    join_comment("", longest, reserve_bytes=PROGRESS_RESERVE_BYTES)
    long_tag = "{rl1:m=" + "x" * 140 + "}"  # not a valid intent; only its length matters here
    assert len(long_tag) + PROGRESS_RESERVE_BYTES > MAX_PART_BYTES >= len(long_tag)
    join_comment("", long_tag)  # fits on its own ...
    with pytest.raises(CommentError, match="intent too long"):
        join_comment("", long_tag, reserve_bytes=PROGRESS_RESERVE_BYTES)  # ... not with progress
    with pytest.raises(CommentError, match="--comment plus the slurm-rl intent"):
        compose_comment("x" * 950, Intent(), reserve_bytes=PROGRESS_RESERVE_BYTES)
    with pytest.raises(CommentError, match="newline"):
        join_comment("a\nb", "{rl1:}")


@pytest.mark.parametrize("stamp", [1_796_691_907.0, 1_796_691_907.846, 1_796_691_907.5, 0.25])
def test_progress_times_keep_their_milliseconds(stamp: float) -> None:
    # A run's rate is fitted over its reports' times: whole seconds would put up to a second's
    # error into every fitted interval.
    tag = encode_progress(Progress(steps_done=3, steps_total=10, updated_at=stamp))
    decoded = decode_comment("x " + tag).progress
    assert decoded is not None and decoded.updated_at == stamp
    assert ("." in tag.partition(";t=")[2]) == (not stamp.is_integer())  # whole: no decimals


@pytest.mark.parametrize("stamp", ["1.", "1.1234", ".5", "1e9", "+5", "1.-1", "1.5.5", "1,5",
                                   "4102444800.5", "\u0661.5", "5.\u0661"])
def test_malformed_progress_times_are_not_progress(stamp: str) -> None:
    assert decode_comment("{rlp:1/2;t=" + stamp + "}").progress is None
