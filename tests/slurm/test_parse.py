"""Parsers on output recorded from the real 22.05 test cluster (tests/fixtures/slurm).

The fixtures were recorded by tests/slurm/poll_recording.py with fixed marks (RECORDED); the
hostile one holds the job names and comments that would stop every cycle of a
line-based poller.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poll_recording import FIXTURES, HOSTILE_COMMENTS, LEGACY, RECORDED

from slurm_rl.core import JobState, NodeState, NodeView, ServiceClass
from slurm_rl.gpu_extra import decode_samples
from slurm_rl.slurm.adapter import partitions_scope, rlsbatch_scope
from slurm_rl.slurm.parse import (
    MAX_NUMBER,
    SQUEUE_FIELDS,
    ParseError,
    SqueueRecord,
    job_view,
    parse_duration,
    parse_gpu_count,
    parse_sinfo_nodes,
    parse_squeue,
    parse_time,
)


def fixture(name: str) -> str:
    """As the runner decodes output: UTF-8, bytes that are not become U+FFFD."""
    return (FIXTURES / name).read_bytes().decode(errors="replace")


SQUEUE = fixture("squeue-22.05.txt")
HOSTILE = fixture("squeue-hostile-22.05.txt")


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def records(text: str) -> dict[str, SqueueRecord]:
    parsed = parse_squeue(text, RECORDED)
    assert parsed.quarantined == ()
    return {r.job_id: r for r in parsed.records}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("UNLIMITED", None), ("10:00", 600.0), ("1:00:00", 3600.0), ("1-00:00:00", 86400.0),
     ("2-03:05:00", 2 * 86400 + 3 * 3600 + 300.0), ("365-00:00:00", 365 * 86400.0),
     ("5", 300.0), ("2-3", 2 * 86400 + 3 * 3600.0), ("N/A", None)],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["١٠:٠٠", "１０", "1:2:3:4", "-5", "1-", "99999999999", "5m"])
def test_parse_duration_refuses_what_is_not_ascii_digits(text: str) -> None:
    with pytest.raises(ParseError, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "count"),
    [("gres:gpu:3", 3), ("gres/gpu:1", 1), ("gpu:1", 1), ("gres/gpu=1", 1), ("N/A", 0),
     ("gpu:a100:4(IDX:0-3)", 4), ("gpu:4", 4), ("gpu:0", 0), ("(null)", 0),
     ("gres:gpu:2,gres:shard:8", 2), ("gres:gpu:٣", 0), ("gres:gpu:３", 0)],
)
def test_parse_gpu_count(text: str, count: int) -> None:
    assert parse_gpu_count(text) == count


def test_parse_gpu_count_is_bounded() -> None:
    with pytest.raises(ParseError, match="GPU count"):
        parse_gpu_count("gres:gpu:99999999999999999999999")


def test_parse_time() -> None:
    for word in ("N/A", "NONE", "Unknown", ""):
        assert parse_time(word) is None
    assert parse_time("2026-11-29T20:45:04") == ts("2026-11-29T20:45:04")
    for bad in ("٢٠٢٦-11-29T20:45:04", "99999-01-01T00:00:00", "2026-13-01T00:00:00",
                "2026-11-29 20:45:04", "2026-11-29T20:45:04+01:00"):
        with pytest.raises(ParseError, match="bad time"):
            parse_time(bad)


def test_squeue_recorded_output() -> None:
    rec = records(SQUEUE)
    assert sorted(rec) == ["4114", "4115", "4116", "4117", "4118_[0-2]", "4119", "4120",
                           "4121", "4122"]
    assert rec["4114"].state is JobState.COMPLETED and rec["4114"].gpus == 1
    assert rec["4114"].end_time == ts("2026-12-01T01:28:25")
    running = rec["4115"]
    assert running.state is JobState.RUNNING and running.start_time == ts("2026-12-01T01:28:26")
    assert running.end_time is None  # expected end of a running job is not a fact
    assert running.time_limit_s == 300
    # A job name holding '|' and a space; gres:gpu:4 per node x 2 nodes.
    assert rec["4116"].name.endswith(" b|x") and (rec["4116"].nodes, rec["4116"].gpus) == (2, 8)
    assert rec["4116"].time_limit_s == 86400
    assert rec["4117"].gpus == 3 and rec["4117"].gpus_per_job  # --gpus=3 is tres-per-job
    # A pending array remainder keeps Slurm's expression as its id.
    assert rec["4118_[0-2]"].reason == "JobHeldUser"
    assert rec["4119"].state is JobState.CANCELLED
    assert rec["4120"].state is JobState.PENDING and rec["4120"].start_time is None
    assert rec["4120"].time_limit_s == 2 * 86400 + 3 * 3600 + 300
    assert rec["4114"].comment == ""
    # No accounting on the test cluster: Slurm shows "(null)" for account and QOS.
    assert (rec["4114"].user, rec["4114"].account, rec["4114"].qos) == ("root", "", "")


def test_running_jobs_show_their_nodes_and_gpus_on_each() -> None:
    """Recorded: a 2-node job with --gres=gpu:2 (2 on each), one with --gpus=3 over 2 nodes
    (split unknown: None), a 1-node job; jobs that are not running hold nothing."""
    rec = records(SQUEUE)
    assert rec["4121"].placement == (("node1", 2), ("node2", 2))
    assert rec["4122"].placement == (("node3", None), ("node4", None))
    assert rec["4115"].placement == (("node1", 1),)
    for job_id in ("4114", "4116", "4117", "4120"):  # completed, held (pending)
        assert rec[job_id].placement == ()
    view = job_view(rec["4121"], now=ts("2026-12-01T01:29:00"), managed=rlsbatch_scope)
    assert view.placement == (("node1", 2), ("node2", 2)) and view.gpus == 4


@pytest.mark.parametrize(
    ("value", "why"),
    [("node[1-3]", "more than 2 names"), ("node[1-99999999999]", "more than 2 names"),
     ("node[2-1]", "backwards"), ("node[1-2", "unclosed"), ("node[[1]]", "nested"),
     ("no de[1-2]", "not a host list"), ("node[١-2]", "not printable ASCII"), ("node1", "1 nodes")],
)
def test_a_bad_node_list_quarantines_its_job(value: str, why: str) -> None:
    parsed = parse_squeue(mutate(SQUEUE, "4121", "NodeList", value), RECORDED)
    assert "4121" not in {r.job_id for r in parsed.records}
    (bad,) = parsed.quarantined
    assert bad.job_id == "4121" and bad.reason.startswith("NodeList") and why in bad.reason


def test_job_view_decodes_intent_and_progress() -> None:
    rec = records(SQUEUE)
    view = job_view(rec["4120"], now=ts("2026-11-30T21:35:00"), managed=rlsbatch_scope)
    assert view.managed and view.held
    assert view.intent is not None and view.intent.service_class is ServiceClass.CRITICAL
    assert (view.intent.gpus_min, view.intent.gpus_max, view.intent.elastic) == (1, 4, True)
    assert view.progress is not None and view.progress.steps_done == 100
    assert view.predicted_remaining_s == pytest.approx(900 / 2.5)
    assert view.restartable  # --rl-elastic: the daemon may requeue it
    plain = job_view(rec["4117"], now=0.0, managed=rlsbatch_scope)
    assert not plain.managed and plain.intent is None and not plain.restartable
    scoped = job_view(rec["4117"], now=0.0, managed=partitions_scope(frozenset({"gpu"})))
    assert scoped.managed


def test_hostile_names_and_comments_are_data() -> None:
    """Every hostile job (one that would stop a line-based poller's cycle) parses, with its
    text as the user wrote it (a byte that is not UTF-8 shown as U+FFFD), and the honest job
    next to them is right."""
    rec = records(HOSTILE)
    assert len(rec) == 1 + len(HOSTILE_COMMENTS) + 3
    by_name = {r.name.split("-", 1)[1]: r for r in rec.values()}
    for name, comment in HOSTILE_COMMENTS.items():
        assert by_name[name].comment == comment
    assert by_name["n-nl\nx"].state is JobState.PENDING
    assert "n-us\x1fx" in by_name and "n-ff\ufffdx" in by_name
    honest = by_name["honest"]
    assert (honest.gpus, honest.reason, honest.comment) == (1, "JobHeldUser", "")


def test_hostile_records_under_the_old_format_would_not_split() -> None:
    """The same output split the naive way (records are lines, fields end at U+001F): the
    comment's newline cuts a record in two. This is what the marks prevent."""
    old = HOSTILE.replace(RECORDED.field_mark, "\x1f").replace(RECORDED.record_mark, "\x1f")
    assert len(old.splitlines()) > len(records(HOSTILE))


def mutate(text: str, job_id: str, field: str, value: str) -> str:
    """The recorded record of `job_id` with one field replaced."""
    out = []
    for chunk in text.split(RECORDED.record_mark + "\n")[:-1]:
        fields = chunk.split(RECORDED.field_mark)
        if fields[0] == job_id:
            fields[SQUEUE_FIELDS.index(field)] = value
        out.append(RECORDED.field_mark.join(fields) + RECORDED.record_mark + "\n")
    return "".join(out)


@pytest.mark.parametrize(
    ("field", "value"),
    [("JobID", "41١7"), ("JobID", "4117;x"), ("JobID", "１"), ("ArrayTaskID", "0-2]x"),
     ("NumNodes", "١"), ("NumNodes", "99999999999999999999"), ("PriorityLong", "-1"),
     ("PriorityLong", str(MAX_NUMBER + 1)), ("SubmitTime", "99999-01-01T00:00:00"),
     ("SubmitTime", "2026-02-30T00:00:00"), ("TimeLimit", "１０:00"), ("State", "BOGUS"),
     ("State", "PENDİNG"), ("tres-per-node", "gres:gpu:99999999999999999999"),
     ("Comment", "x" * 1025), ("Name", "n" * 1025), ("Reason", "Held\nx")],
)
def test_a_bad_record_is_quarantined_and_the_others_parse(field: str, value: str) -> None:
    parsed = parse_squeue(mutate(SQUEUE, "4116", field, value), RECORDED)
    assert sorted(r.job_id for r in parsed.records) == sorted(set(records(SQUEUE)) - {"4116"})
    (bad,) = parsed.quarantined
    named = "JobID" if field == "ArrayTaskID" else field  # the composed id is what is checked
    assert bad.reason.startswith(named) or named in bad.reason, bad.reason
    assert bad.job_id in ("4116", None) and len(bad.reason) <= 200 and len(bad.excerpt) <= 200
    assert bad.reason.isprintable() and RECORDED.field_mark not in bad.excerpt


def test_a_record_cut_short_or_missing_a_mark_is_quarantined() -> None:
    end = RECORDED.record_mark + "\n"
    chunks = SQUEUE.split(end)[:-1]
    assert chunks[1].startswith("4114") and chunks[-1].startswith("4122")
    chunks[1] = chunks[1].replace(RECORDED.field_mark, "", 1)  # two fields run together
    cut = "".join(c + end for c in chunks[:-1]) + chunks[-1][:30]  # output ends in a record
    parsed = parse_squeue(cut, RECORDED)
    assert len(parsed.records) == len(chunks) - 2
    assert sorted((q.job_id or "", q.reason) for q in parsed.quarantined) == [
        ("41144114", "19 fields, expected 20"), ("4122", "output ends inside this record")]


def test_a_job_id_printed_twice_is_trusted_neither_time() -> None:
    parsed = parse_squeue(mutate(SQUEUE, "4117", "JobID", "4116"), RECORDED)
    assert "4116" not in {r.job_id for r in parsed.records}
    assert [q.job_id for q in parsed.quarantined] == ["4116", "4116"]
    assert "printed 2 times" in parsed.quarantined[0].reason


_pieces = st.one_of(
    st.text(max_size=30), st.sampled_from(
        [RECORDED.field_mark, RECORDED.record_mark + "\n", "\n", "\x1f", "N/A", "PENDING",
         "2026-11-30T21:30:03", "gres:gpu:2", "١", "99999999999999999999", "(null)"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_pieces, max_size=60))
def test_parse_squeue_never_raises(pieces: list[str]) -> None:
    text = "".join(pieces)
    parsed = parse_squeue(SQUEUE + text + HOSTILE, RECORDED)
    ids = [r.job_id for r in parsed.records]
    assert len(ids) == len(set(ids))
    assert all(len(q.reason) <= 200 and len(q.excerpt) <= 200 for q in parsed.quarantined)
    parse_sinfo_nodes(text, RECORDED)


def test_sinfo_recorded_output() -> None:
    parsed = parse_sinfo_nodes(fixture("sinfo-marks-22.05.txt"), RECORDED)
    nodes: dict[str, NodeView] = {n.name: n for n in parsed.nodes}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"] and parsed.bad == ()
    assert nodes["node1"].state is NodeState.MIXED and nodes["node1"].gpus_alloc == 1
    assert nodes["node2"].gpus_free == 4 and nodes["node2"].cpus_total == 8
    assert nodes["node1"].partitions == ("gpu",) and nodes["node1"].samples == ()


def test_sinfo_extra_samples_in_the_format_before_issue_8() -> None:
    parsed = parse_sinfo_nodes(fixture("sinfo-22.05.txt"), LEGACY)
    nodes: dict[str, NodeView] = {n.name: n for n in parsed.nodes}
    assert nodes["node3"].gpus_total == 4 and nodes["node3"].gpus_alloc == 3
    assert nodes["node1"].samples == ()  # Extra {"a":1} is not ours
    samples = nodes["node2"].samples
    assert len(samples) == 2 and samples[0].util_pct == 55 and samples[0].power_w == 250.5
    assert nodes["node2"].sampled_at == 1795985200


def test_a_bad_node_record_is_skipped_with_its_name() -> None:
    text = fixture("sinfo-marks-22.05.txt").replace("0/8/0/8", "0/٨/0/8", 1)
    text = text.replace("(null)", '{"rl":1,"t":1e999,"g":[[0,NaN,1,1,1,1]]}', 1)
    parsed = parse_sinfo_nodes(text, RECORDED)
    assert sorted(n.name for n in parsed.nodes) == ["node1", "node3", "node4"]
    assert parsed.nodes[0].samples == ()  # node1's Extra was not ours: no samples, no error
    (bad,) = parsed.bad
    assert bad.job_id is None and bad.reason.startswith("node node2: CPUsState")


def test_node_state_flags() -> None:
    assert NodeState.parse("idle*") is NodeState.IDLE
    assert NodeState.parse("mixed+drain") is NodeState.MIXED
    assert NodeState.parse("down~") is NodeState.DOWN
    assert NodeState.parse("weird") is NodeState.UNKNOWN


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=7) | st.dictionaries(
        st.sampled_from(["rl", "t", "g", "x"]), inner, max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), _json.map(lambda v: json.dumps({"rl": 1, "t": 5,
                                                                        "g": v}))))
def test_node_extra_never_raises_and_gives_only_bounded_numbers(extra: str) -> None:
    samples, at = decode_samples(extra)
    assert at is None or math.isfinite(at)
    for s in samples:
        for v in (s.util_pct, s.mem_used_mib, s.mem_total_mib, s.power_w, s.temp_c):
            assert v is None or (not isinstance(v, bool) and math.isfinite(v))
