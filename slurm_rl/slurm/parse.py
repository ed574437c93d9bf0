"""Pure parsers for Slurm 22.05's format-string output (tested on recorded cluster output).

Polls use `squeue -O` / `sinfo -O` with a field suffix of U+001F (unit separator) so that job
names and comments may hold any printable character; the comment is the last field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from slurm_rl.core import (
    ClusterSnapshot,
    JobId,
    JobState,
    JobView,
    NodeName,
    NodeState,
    NodeView,
)
from slurm_rl.gpu_extra import decode_samples
from slurm_rl.submit.intent import decode_comment

SEP = "\x1f"

SQUEUE_FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "UserName", "Name", "Partition", "State",
    "SubmitTime", "StartTime", "EndTime", "TimeLimit", "NumNodes", "tres-per-node",
    "tres-per-job", "PriorityLong", "Reason", "Comment",
)
SINFO_FIELDS = ("NodeList", "StateLong", "Gres", "GresUsed", "CPUsState", "Partition", "Extra")


def format_option(fields: Iterable[str]) -> str:
    """The -O argument: every field unpadded, each followed by the separator."""
    return ",".join(f"{f}:{SEP}" for f in fields)


class ParseError(ValueError):
    """Output we do not understand; carries the offending line."""


_NONE_WORDS = frozenset({"", "N/A", "NONE", "Unknown", "(null)", "n/a", "INVALID", "NOT_SET"})


def parse_time(text: str) -> float | None:
    """A Slurm timestamp (local time, ISO without zone) as epoch seconds; None for N/A etc."""
    text = text.strip()
    if text in _NONE_WORDS:
        return None
    return datetime.fromisoformat(text).timestamp()


_LIMIT_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)$")


def parse_duration(text: str) -> float | None:
    """A Slurm duration ("UNLIMITED", "5:00", "1:00:00", "1-00:00:00", "2-3") in seconds."""
    text = text.strip()
    if text in _NONE_WORDS or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        # "days-hours", "days-hours:minutes", "days-hours:minutes:seconds"
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0  # a bare number is minutes
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        elif len(parts) == 3:
            h, m, s = parts
        else:
            raise ParseError(f"bad duration {text!r}")
    return float(days * 86400 + h * 3600 + m * 60 + s)


_GPU_RE = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::[^:,=()]+)?[:=](\d+)")


def parse_gpu_count(text: str) -> int:
    """GPU count from a TRES/GRES string: 'gres:gpu:2', 'gres/gpu=1', 'gpu:a100:4(IDX:0-3)'."""
    text = text.strip()
    if text in _NONE_WORDS:
        return 0
    return sum(int(m.group(1)) for m in _GPU_RE.finditer(text))


@dataclass(frozen=True, kw_only=True)
class SqueueRecord:
    """One squeue line, typed but not yet interpreted."""

    job_id: JobId
    user: str
    name: str
    partition: str
    state: JobState
    submit_time: float
    start_time: float | None
    end_time: float | None
    time_limit_s: float | None
    nodes: int
    gpus: int
    priority: int
    reason: str
    comment: str
    gpus_per_job: bool = False
    """The GPUs were asked for per job (--gpus), not per node (--gres=gpu:K)."""


def job_id_of(job_id: str, array_job_id: str, array_task_id: str) -> JobId:
    """Array tasks are "<array job>_<task>", a pending array remainder "<array job>_[0-9]"."""
    if array_task_id in _NONE_WORDS:
        return JobId(job_id)
    task = array_task_id if array_task_id.isdigit() else f"[{array_task_id}]"
    return JobId(f"{array_job_id}_{task}")


def parse_squeue(text: str) -> list[SqueueRecord]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split(SEP)
        if cols and cols[-1] == "":
            cols.pop()
        if len(cols) < len(SQUEUE_FIELDS):
            raise ParseError(f"squeue line {lineno}: {len(cols)} fields, "
                             f"expected {len(SQUEUE_FIELDS)}: {line!r}")
        # Anything past the expected count belongs to the comment (it was the last field).
        f = dict(zip(SQUEUE_FIELDS[:-1], cols, strict=False))
        comment = SEP.join(cols[len(SQUEUE_FIELDS) - 1:])
        try:
            nodes = int(f["NumNodes"]) if f["NumNodes"].isdigit() else 1
            per_job = parse_gpu_count(f["tres-per-job"])
            gpus = per_job or parse_gpu_count(f["tres-per-node"]) * nodes
            submit = parse_time(f["SubmitTime"])
            state = JobState.parse(f["State"])
            out.append(SqueueRecord(
                job_id=job_id_of(f["JobID"], f["ArrayJobID"], f["ArrayTaskID"]),
                user=f["UserName"], name=f["Name"], partition=f["Partition"], state=state,
                submit_time=submit if submit is not None else 0.0,
                # For pending jobs squeue prints the *expected* start: not a fact, drop it.
                start_time=None if state.is_pending else parse_time(f["StartTime"]),
                end_time=parse_time(f["EndTime"]) if state.is_finished else None,
                time_limit_s=parse_duration(f["TimeLimit"]),
                nodes=nodes, gpus=gpus,
                priority=int(f["PriorityLong"]) if f["PriorityLong"].isdigit() else 0,
                reason=f["Reason"],
                comment="" if comment == "(null)" else comment,
                gpus_per_job=per_job > 0,
            ))
        except (ValueError, KeyError) as exc:
            raise ParseError(f"squeue line {lineno}: {exc}: {line!r}") from None
    return out


def job_view(record: SqueueRecord, now: float,
             managed: Callable[[SqueueRecord, bool], bool]) -> JobView:
    """Interpret a record: decode the comment, predict remaining time from progress.

    `managed(record, has_intent)` is the daemon's scope rule.
    """
    decoded = decode_comment(record.comment)
    remaining = None
    prog = decoded.progress
    if prog is not None and prog.rate and prog.steps_total is not None:
        remaining = max(0.0, (prog.steps_total - prog.steps_done) / prog.rate)
    run_s = 0.0
    if record.start_time is not None:
        run_s = max(0.0, (record.end_time or now) - record.start_time)
    return JobView(
        id=record.job_id, user=record.user, name=record.name, partition=record.partition,
        state=record.state, submit_time=record.submit_time, start_time=record.start_time,
        end_time=record.end_time, time_limit_s=record.time_limit_s, gpus=record.gpus,
        nodes=record.nodes, priority=record.priority,
        held=record.reason in ("JobHeldUser", "JobHeldAdmin"),
        managed=managed(record, decoded.intent is not None),
        intent=decoded.intent, progress=prog, predicted_remaining_s=remaining,
        attained_gpu_s=run_s * record.gpus if record.state.is_running else 0.0,
    )


def parse_sinfo_nodes(text: str) -> list[NodeView]:
    """`sinfo -N -O` lines into NodeViews (a node in several partitions appears once)."""
    nodes: dict[str, NodeView] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split(SEP)
        if len(cols) < len(SINFO_FIELDS):
            raise ParseError(f"sinfo line {lineno}: {len(cols)} fields, "
                             f"expected {len(SINFO_FIELDS)}: {line!r}")
        f = dict(zip(SINFO_FIELDS, cols, strict=False))
        name = f["NodeList"].strip()
        partition = f["Partition"].strip().rstrip("*")
        if name in nodes:
            prev = nodes[name]
            nodes[name] = replace(prev, partitions=prev.partitions + (partition,))
            continue
        alloc_cpus, _idle, _other, total_cpus = (int(x) for x in f["CPUsState"].split("/"))
        samples, sampled_at = decode_samples(f["Extra"].strip())
        nodes[name] = NodeView(
            name=NodeName(name), state=NodeState.parse(f["StateLong"]),
            gpus_total=parse_gpu_count(f["Gres"]), gpus_alloc=parse_gpu_count(f["GresUsed"]),
            cpus_total=total_cpus, cpus_alloc=alloc_cpus, partitions=(partition,),
            samples=samples, sampled_at=sampled_at,
        )
    return list(nodes.values())


def build_snapshot(now: float, jobs: Iterable[JobView], nodes: Iterable[NodeView]
                   ) -> ClusterSnapshot:
    return ClusterSnapshot(time=now, jobs=tuple(jobs), nodes=tuple(nodes))
