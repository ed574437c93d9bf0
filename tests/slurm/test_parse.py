"""Parsers on output recorded from the real 22.05 test cluster (tests/fixtures/slurm)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from slurm_rl.core import JobState, NodeState, NodeView, ServiceClass
from slurm_rl.slurm.adapter import partitions_scope, rlsbatch_scope
from slurm_rl.slurm.parse import (
    ParseError,
    SqueueRecord,
    job_view,
    parse_duration,
    parse_gpu_count,
    parse_sinfo_nodes,
    parse_squeue,
    parse_time,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("UNLIMITED", None), ("10:00", 600.0), ("1:00:00", 3600.0), ("1-00:00:00", 86400.0),
     ("2-03:05:00", 2 * 86400 + 3 * 3600 + 300.0), ("365-00:00:00", 365 * 86400.0),
     ("5", 300.0), ("2-3", 2 * 86400 + 3 * 3600.0), ("N/A", None)],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "count"),
    [("gres:gpu:3", 3), ("gres/gpu:1", 1), ("gpu:1", 1), ("gres/gpu=1", 1), ("N/A", 0),
     ("gpu:a100:4(IDX:0-3)", 4), ("gpu:4", 4), ("gpu:0", 0), ("(null)", 0),
     ("gres:gpu:2,gres:shard:8", 2)],
)
def test_parse_gpu_count(text: str, count: int) -> None:
    assert parse_gpu_count(text) == count


def test_parse_time_none_words() -> None:
    for word in ("N/A", "NONE", "Unknown", ""):
        assert parse_time(word) is None
    assert parse_time("2026-11-29T20:45:04") == ts("2026-11-29T20:45:04")


def test_squeue_recorded_output() -> None:
    records: dict[str, SqueueRecord] = {
        r.job_id: r for r in parse_squeue((FIXTURES / "squeue-22.05.txt").read_text())}
    assert len(records) == 15
    # A job name holding '|' and a space survives the separator.
    assert records["10"].name == "rec b|x"
    assert records["10"].state is JobState.RUNNING
    assert records["10"].nodes == 2 and records["10"].gpus == 8  # gres:gpu:4 per node x 2
    assert records["10"].start_time == ts("2026-11-29T20:45:04")
    assert records["10"].end_time is None  # expected end of a running job is not a fact
    assert records["11"].gpus == 3  # --gpus=3 is tres-per-job
    assert records["15"].state is JobState.PENDING and records["15"].start_time is None
    assert records["13"].state is JobState.CANCELLED
    assert records["1"].end_time == ts("2026-11-29T20:42:59")
    # A pending array remainder keeps Slurm's expression as its id.
    assert records["12_[0-2]"].reason == "JobHeldUser"
    assert records["18"].time_limit_s == 2 * 86400 + 3 * 3600 + 300
    assert records["8"].comment == ""


def test_job_view_decodes_intent_and_progress() -> None:
    rec: dict[str, SqueueRecord] = {
        r.job_id: r for r in parse_squeue((FIXTURES / "squeue-22.05.txt").read_text())}
    view = job_view(rec["18"], now=ts("2026-11-29T20:50:00"), managed=rlsbatch_scope)
    assert view.managed and view.held
    assert view.intent is not None and view.intent.service_class is ServiceClass.CRITICAL
    assert (view.intent.gpus_min, view.intent.gpus_max, view.intent.elastic) == (1, 4, True)
    assert view.progress is not None and view.progress.steps_done == 100
    assert view.predicted_remaining_s == pytest.approx(900 / 2.5)
    plain = job_view(rec["15"], now=0.0, managed=rlsbatch_scope)
    assert not plain.managed and plain.intent is None
    scoped = job_view(rec["15"], now=0.0, managed=partitions_scope(frozenset({"gpu"})))
    assert scoped.managed


def test_squeue_short_line_is_an_error() -> None:
    with pytest.raises(ParseError, match="squeue line 1"):
        parse_squeue("12\x1f12\x1fN/A\x1f")


def test_sinfo_recorded_output() -> None:
    nodes: dict[str, NodeView] = {
        n.name: n for n in parse_sinfo_nodes((FIXTURES / "sinfo-22.05.txt").read_text())}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node3"].gpus_total == 4 and nodes["node3"].gpus_alloc == 3
    assert nodes["node4"].state is NodeState.IDLE and nodes["node4"].gpus_free == 4
    assert nodes["node1"].state is NodeState.MIXED and nodes["node1"].samples == ()
    samples = nodes["node2"].samples
    assert len(samples) == 2 and samples[0].util_pct == 55 and samples[0].power_w == 250.5
    assert nodes["node2"].sampled_at == 1795985200
    assert nodes["node1"].partitions == ("gpu",)


def test_node_state_flags() -> None:
    assert NodeState.parse("idle*") is NodeState.IDLE
    assert NodeState.parse("mixed+drain") is NodeState.MIXED
    assert NodeState.parse("down~") is NodeState.DOWN
    assert NodeState.parse("weird") is NodeState.UNKNOWN
