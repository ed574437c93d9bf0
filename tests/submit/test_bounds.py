"""Bounded numbers at every user entry: the comment codec, the core dataclasses, the encoder,
rlsbatch's value parsers, `slurm-rl progress` and `report_progress` (pure; no cluster).

The end-to-end rlsbatch cases (exit 2, nothing in squeue) are in test_rlsbatch_bounds.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl import progress as progress_module
from slurm_rl.core import Intent, Progress, ServiceClass
from slurm_rl.progress import ProgressReporter, progress_command, report_progress
from slurm_rl.submit.errors import UsageError
from slurm_rl.submit.intent import decode_comment
from slurm_rl.submit.rlflags import parse_deadline, parse_gpu_range, parse_positive_int
from slurm_rl.submit.tags import (
    MAX_EPOCH,
    MAX_GPUS,
    MAX_INT,
    MIN_EPOCH,
    CommentError,
    encode_intent_values,
)

# "3" in other scripts: int() and str.isdigit() take all of these; slurm-rl takes none.
UNICODE_THREES = {
    "arabic-indic": "\u0663", "extended-arabic-indic": "\u06f3", "devanagari": "\u0969",
    "bengali": "\u09e9", "thai": "\u0e53", "tibetan": "\u0f23", "nko": "\u07c3",
    "fullwidth": "\uff13", "math-bold": "\U0001d7d1", "superscript": "\u00b3",
    "subscript": "\u2083", "circled": "\u2462",
}
# Each template holds one digit X; with X = "3" it is a valid tag (checked below).
CODEC_TEMPLATES = {
    "gpus-min": "{rl1:g=X-4}", "gpus-max": "{rl1:g=1-X}", "steps": "{rl1:s=1X}",
    "batch": "{rl1:b=X2}", "deadline": "{rl1:d=19249920X0}",
    "done": "{rlp:X/9}", "total": "{rlp:1/X}", "rate": "{rlp:1/9@X.5}",
    "time": "{rlp:1/9;t=17959853X0}",
}


@pytest.mark.parametrize("template", list(CODEC_TEMPLATES.values()), ids=list(CODEC_TEMPLATES))
def test_templates_are_valid_with_an_ascii_digit(template: str) -> None:
    decoded = decode_comment("user " + template.replace("X", "3"))
    assert decoded.user_comment == "user"
    assert decoded.intent is not None or decoded.progress is not None


@pytest.mark.parametrize("digit", list(UNICODE_THREES.values()), ids=list(UNICODE_THREES))
@pytest.mark.parametrize("template", list(CODEC_TEMPLATES.values()), ids=list(CODEC_TEMPLATES))
def test_only_ascii_digits_are_digits_in_the_codec(template: str, digit: str) -> None:
    text = "user " + template.replace("X", digit)
    decoded = decode_comment(text)
    assert (decoded.intent, decoded.progress) == (None, None)
    assert decoded.user_comment == text  # the whole part stays the user's text


BAD_INTENT_TAGS = [
    # numbers too large for SQLite, a timestamp or scontrol; out of bounds; not numbers
    "s=99999999999999999999999999", "s=9007199254740992", "s=0", "s=-1", "s=+5", "s=1_0",
    "s= 5", "s=5.0", "s=1e3", "s=", "s", "b=99999999999999999999", "b=0", "b=0x10",
    "g=0-4", "g=4097-", "g=-4097", "g=5-4", "g=9999999999999999999-", "g=", "g=-", "g=4",
    "g=1-2-3", "g=1-2,g=1-2", "g= 1-2", "d=99999999999", "d=946684799", "d=4102444801",
    "d=1924992000.5", "d=1.9e9", "d=-1", "d=", "d=1924992000,d=1924992000",
    # flags with values, classes and models that rlsbatch never writes, unknown keys
    "h=1", "e=0", "h,h", "c=gold", "c=CRITICAL", "c=best-effort", "c= critical", "c=",
    "c=critical,c=standard", "m=", "m=my model", "m=" + "x" * 41, "m=r\u00e9snet", "x=1",
    "zz", "=", "d",
]


@pytest.mark.parametrize("body", BAD_INTENT_TAGS)
def test_an_intent_with_a_bad_field_is_no_intent(body: str) -> None:
    text = "{rl1:" + body + "}"
    for comment in (text, "keep " + text, text + "{rlp:1/2}"):
        decoded = decode_comment(comment)
        assert decoded.intent is None and decoded.progress is None
        assert decoded.user_comment == comment


BAD_PROGRESS_TAGS = [
    "1/2@nan", "1/2@NaN", "1/2@inf", "1/2@-inf", "1/2@infinity", "1/2@1e400", "1/2@-1",
    "1/2@0x10", "1/2@1_0", "1/2@9007199254740993", "1/2@", "1/2@1.5.5", "1/2@e", "3/2",
    "1/0", "-1", "+1", "1/", "/2", "99999999999999999999", "1/99999999999999999999",
    "1;t=99999999999", "1;t=nan", "1;t=-5", "1;t=", "1;x=5", "1;", "", "1/2@2.5;t=1;t=2",
]


@pytest.mark.parametrize("body", BAD_PROGRESS_TAGS)
def test_a_bad_progress_tag_is_no_progress_and_costs_no_intent(body: str) -> None:
    only = "{rlp:" + body + "}"
    assert decode_comment(only) == decode_comment(only)  # never raises
    assert decode_comment(only).progress is None
    assert decode_comment(only).user_comment == only
    with_intent = decode_comment("u {rl1:c=critical}" + only)
    assert with_intent.intent == Intent(service_class=ServiceClass.CRITICAL)
    assert with_intent.progress is None and with_intent.user_comment == "u"


def test_edges_of_the_bounds_decode() -> None:
    tag = (f"{{rl1:d={MAX_EPOCH},g=1-{MAX_GPUS},s={MAX_INT},b={MAX_INT}}}"
           f"{{rlp:{MAX_INT}/{MAX_INT}@9.007e+15;t={MAX_EPOCH}}}")
    decoded = decode_comment(tag)
    assert decoded.intent == Intent(deadline=float(MAX_EPOCH), gpus_min=1, gpus_max=MAX_GPUS,
                                    total_steps=MAX_INT, batch_size=MAX_INT)
    assert decoded.progress == Progress(steps_done=MAX_INT, steps_total=MAX_INT, rate=9.007e15,
                                        updated_at=float(MAX_EPOCH))
    assert decode_comment(f"{{rl1:d={MIN_EPOCH}}}").intent == Intent(deadline=float(MIN_EPOCH))
    assert decode_comment("{rl1:c=critical}\n").intent is None  # not before a final newline


BAD_INTENTS: dict[str, dict[str, object]] = {
    "deadline-nan": {"deadline": math.nan}, "deadline-inf": {"deadline": math.inf},
    "deadline-negative": {"deadline": -1.0}, "deadline-after-2100": {"deadline": MAX_EPOCH + 1},
    "deadline-huge": {"deadline": 1e300}, "deadline-text": {"deadline": "soon"},
    "gpus-min-zero": {"gpus_min": 0}, "gpus-max-negative": {"gpus_max": -1},
    "gpus-huge": {"gpus_max": 2**53}, "gpus-bool": {"gpus_min": True},
    "gpus-float": {"gpus_min": 1.5}, "gpus-text": {"gpus_max": "2"},
    "steps-negative": {"total_steps": -1}, "steps-2^53": {"total_steps": 2**53},
    "steps-2^64": {"total_steps": 2**64}, "steps-float": {"total_steps": 10.0},
    "batch-2^63": {"batch_size": 2**63}, "batch-bool": {"batch_size": False},
}


@pytest.mark.parametrize("key", list(BAD_INTENTS))
def test_no_poisonous_intent_can_be_built(key: str) -> None:
    with pytest.raises(ValueError, match=next(iter(BAD_INTENTS[key]))):
        Intent(**BAD_INTENTS[key])  # type: ignore[arg-type]


BAD_PROGRESS: dict[str, dict[str, object]] = {
    "done-negative": {"steps_done": -1}, "done-2^53": {"steps_done": 2**53},
    "done-float": {"steps_done": 1.5}, "done-bool": {"steps_done": True},
    "done-text": {"steps_done": "1"}, "total-negative": {"steps_total": -1},
    "total-2^70": {"steps_total": 2**70}, "rate-nan": {"rate": math.nan},
    "rate-inf": {"rate": math.inf}, "rate-negative": {"rate": -0.5},
    "rate-2^54": {"rate": 2.0**54}, "rate-bool": {"rate": True},
    "updated-nan": {"updated_at": math.nan}, "updated-negative": {"updated_at": -1.0},
    "updated-after-2100": {"updated_at": MAX_EPOCH + 1.0},
}


@pytest.mark.parametrize("key", list(BAD_PROGRESS))
def test_no_poisonous_progress_can_be_built(key: str) -> None:
    values: dict[str, object] = {"steps_done": 0, **BAD_PROGRESS[key]}
    with pytest.raises(ValueError, match=next(iter(BAD_PROGRESS[key]))):
        Progress(**values)  # type: ignore[arg-type]


def test_bounds_hold_what_the_simulator_and_policies_use() -> None:
    Intent(deadline=0.0, gpus_min=1, gpus_max=10_000, total_steps=0)  # trace seconds, big sims
    Progress(steps_done=5, steps_total=3, rate=0, updated_at=0.0)


BAD_ENCODES: dict[str, dict[str, object]] = {
    "gpus-min-zero": {"gpus_min": 0}, "gpus-over-cap": {"gpus_max": MAX_GPUS + 1},
    "steps-2^53": {"total_steps": 2**53}, "batch-zero": {"batch_size": 0},
    "deadline-year-5138": {"deadline": 1e11}, "deadline-nan": {"deadline": math.nan},
    "deadline-1999": {"deadline": MIN_EPOCH - 1.0}, "steps-bool": {"total_steps": True},
}


@pytest.mark.parametrize("key", list(BAD_ENCODES))
def test_the_encoder_writes_nothing_the_decoder_would_refuse(key: str) -> None:
    with pytest.raises(CommentError):
        encode_intent_values(**BAD_ENCODES[key])  # type: ignore[arg-type]


NOW = 1_800_000_000.0
BAD_DEADLINES = {
    "+99999999999w": "is more than 10 years ahead", "+3660d": "is more than 10 years ahead",
    "+" + "9" * 5000 + "s": "+999999999999999999999999999999999999... is more than 10 years",
    "+00000000000000000000000000000s": "is not in the future",
    "9999-12-31": "9999-12-31 is more than 10 years ahead",
    "2099-12-31T23:59": "is more than 10 years ahead",
    "0001-01-01": "0001-01-01 is out of range",
    "\uff12\uff10\uff12\uff17-01-01": "can't read", "2027-01-0\u0663": "can't read",
    "+\u0663h": "can't read", "+\uff13h": "can't read", "+3\u2083h": "can't read",
    "+1e3s": "can't read", "+-5h": "can't read", "nan": "can't read", "inf": "can't read",
}


@pytest.mark.parametrize("text", list(BAD_DEADLINES))
def test_rlsbatch_deadline_bounds(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_deadline(text, NOW)
    assert err.value.message.startswith("--rl-deadline: ")
    assert BAD_DEADLINES[text] in err.value.message
    assert len(err.value.message) < 200 and "\n" not in err.value.message


def test_rlsbatch_deadline_edges() -> None:
    assert parse_deadline("+3650d", NOW) == NOW + 3650 * 86400
    assert parse_deadline("+1s", NOW) == NOW + 1


BAD_GPU_RANGES = {
    **{f"{k}-range": (f"{d}-4", "can't read") for k, d in UNICODE_THREES.items()},
    "fullwidth-both": ("\uff11-\uff12", "can't read"), "over-cap": ("1-4097", "at most 4096"),
    "huge": ("1-99999999999999999999", "at most 4096"), "huge-min": ("99999999999999999999",
                                                                    "at most 4096"),
    "zero": ("0-2", "the minimum must be at least 1"), "negative": ("-1-2", "can't read"),
    "float": ("1.5-2", "can't read"), "sign": ("+1-2", "can't read"),
    "underscore": ("1_0-20", "can't read"), "empty": ("", "can't read"),
}


@pytest.mark.parametrize("key", list(BAD_GPU_RANGES))
def test_rlsbatch_gpu_range_bounds(key: str) -> None:
    text, message = BAD_GPU_RANGES[key]
    with pytest.raises(UsageError, match="^--rl-gpus: ") as err:
        parse_gpu_range(text)
    assert message in err.value.message


BAD_COUNTS = {
    **{f"{k}": (d, "is not a positive whole number") for k, d in UNICODE_THREES.items()},
    "2^53": (str(2**53), "is too large (at most 9007199254740991)"),
    "huge": ("9" * 26, "is too large"), "very-huge": ("9" * 5000, "is too large"),
    "zero": ("0", "is not a positive"), "negative": ("-5", "is not a positive"),
    "float": ("5.0", "is not a positive"), "exp": ("1e3", "is not a positive"),
    "underscore": ("1_000", "is not a positive"), "plus": ("+5", "is not a positive"),
}


@pytest.mark.parametrize("flag", ["rl-steps", "rl-batch-size"])
@pytest.mark.parametrize("key", list(BAD_COUNTS))
def test_rlsbatch_count_bounds(key: str, flag: str) -> None:
    text, message = BAD_COUNTS[key]
    with pytest.raises(UsageError, match=f"^--{flag}: ") as err:
        parse_positive_int(flag, text)
    assert message in err.value.message and len(err.value.message) < 120


def test_rlsbatch_count_edges() -> None:
    assert parse_positive_int("rl-steps", str(MAX_INT)) == MAX_INT
    assert parse_positive_int("rl-steps", "0" * 30 + "7") == 7


BAD_PROGRESS_ARGS = {
    **{f"steps-{k}": ([d], "STEPS") for k, d in UNICODE_THREES.items()},
    "steps-negative": (["--", "-1"], "STEPS"), "steps-huge": (["9" * 23], "STEPS"),
    "steps-2^53": ([str(2**53)], "STEPS"), "steps-float": (["1.5"], "STEPS"),
    "steps-plus": (["+5"], "STEPS"), "steps-underscore": (["1_000"], "STEPS"),
    "steps-nan": (["nan"], "STEPS"), "steps-empty": ([""], "STEPS"),
    "steps-above-total": (["5", "--total", "3"], "STEPS"),
    "total-zero": (["1", "--total", "0"], "--total"),
    "total-huge": (["1", "--total", "9" * 24], "--total"),
    "total-fullwidth": (["1", "--total", "\uff19"], "--total"),
    "rate-nan": (["1", "--rate", "nan"], "--rate"), "rate-inf": (["1", "--rate", "inf"], "--rate"),
    "rate-minus-inf": (["1", "--rate=-inf"], "--rate"),
    "rate-negative": (["1", "--rate=-1"], "--rate"),
    "rate-overflow": (["1", "--rate", "1e400"], "--rate"),
    "rate-2^54": (["1", "--rate", "1.8e16"], "--rate"),
    "rate-arabic": (["1", "--rate", "\u0661.\u0665"], "--rate"),
    "rate-hex": (["1", "--rate", "0x10"], "--rate"),
    "rate-underscore": (["1", "--rate", "1_0"], "--rate"),
    "interval-nan": (["1", "--interval", "nan"], "--interval"),
    "interval-inf": (["1", "--interval", "inf"], "--interval"),
    "interval-negative": (["1", "--interval=-5"], "--interval"),
    "job-path": (["1", "--job", "../../etc/passwd"], "--job"),
    "job-letters": (["1", "--job", "abc"], "--job"), "job-empty": (["1", "--job", ""], "--job"),
    "job-newline": (["1", "--job", "12\n13"], "--job"),
}


@pytest.mark.parametrize("key", list(BAD_PROGRESS_ARGS))
def test_progress_command_refuses_bad_values(key: str, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    args, param = BAD_PROGRESS_ARGS[key]
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue or scontrol could run
    result = CliRunner().invoke(progress_command, args)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and f"Invalid value for '{param}'" in errors[0], result.output


class NoSlurm:
    """A runner that fails the test if anything is run (fake: pure-logic test)."""

    def run(self, args: object, *, timeout_s: float | None = None) -> object:
        raise AssertionError(f"ran {args!r}")


BAD_REPORTS: dict[str, tuple[object, object, object]] = {
    "done-negative": (-1, None, None), "done-2^53": (2**53, None, None),
    "done-float": (1.5, None, None), "done-bool": (True, None, None),
    "done-above-total": (11, 10, None), "total-zero": (0, 0, None),
    "total-huge": (1, 10**30, None), "rate-nan": (1, 10, math.nan),
    "rate-inf": (1, 10, math.inf), "rate-negative": (1, 10, -2.0),
    "rate-huge": (1, 10, 1e300), "rate-text": (1, 10, "fast"),
}


@pytest.mark.parametrize("key", list(BAD_REPORTS))
def test_progress_api_refuses_bad_values(key: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    done, total, rate = BAD_REPORTS[key]
    rep = ProgressReporter("42", runner=NoSlurm(),  # type: ignore[arg-type]
                           state_file=tmp_path / "state")
    with pytest.raises(ValueError):
        rep.report(done, total, rate)  # type: ignore[arg-type]
    assert not (tmp_path / "state").exists()
    # report_progress never raises: it says so once on stderr and updates nothing
    monkeypatch.setattr(progress_module, "_warned", False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert report_progress(done, total, rate, job_id="42") is False  # type: ignore[arg-type]
    assert report_progress(done, total, rate, job_id="42") is False  # type: ignore[arg-type]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("slurm-rl progress: "), err


def test_progress_api_refuses_a_bad_interval(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "_warned", False)
    assert report_progress(1, job_id="43", min_interval_s=math.nan) is False
    assert "min_interval_s" in capsys.readouterr().err
