"""Pure parsers for Slurm 22.05's format-string output (tested on recorded cluster output).

Polls use `squeue -O` / `sinfo -O` with per-poll secret marks between fields and records
(`framing.py`), so names, comments and node Extra may hold any byte. Every record is then
validated on its own: a record that does not parse is quarantined (returned with a reason, its
job left alone) and never stops the poll for the others. Only ASCII digits are digits (`int()`
and `str.isdigit()` accept Arabic-Indic and full-width ones), and every number is bounded.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

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
from slurm_rl.slurm import predict
from slurm_rl.slurm.framing import Framing, Quarantined, one_line
from slurm_rl.slurm.hostlist import HostlistError, expand
from slurm_rl.slurm.predict import RateFit
from slurm_rl.submit.intent import DecodedComment, decode_comment

# Slurm-written fields first; the ones users write (Name, Comment) last.
SQUEUE_FIELDS = (
    "JobID", "ArrayJobID", "ArrayTaskID", "UserName", "Account", "QOS", "Partition", "State",
    "SubmitTime", "StartTime", "EndTime", "TimeLimit", "NumNodes", "tres-per-node",
    "tres-per-job", "NodeList", "PriorityLong", "Reason", "Name", "Comment",
)
SINFO_FIELDS = ("NodeList", "StateLong", "Gres", "GresUsed", "CPUsState", "Partition", "Extra")

MAX_NUMBER = 2**53 - 1
"""Every number parsed is below this (exact in a float, fits SQLite's INTEGER)."""
MAX_TEXT = 1024
"""slurmctld refuses names, comments, accounts longer than 1024 bytes ("Pathname ... too long");
a longer field is not Slurm's output as we know it, so its record is quarantined."""
JOB_ID_RE = re.compile(r"[0-9]+(?:_[0-9]+|_\[[0-9,\-%]+\])?")
_DIGITS = re.compile(r"[0-9]{1,16}")
_SLURM_WRITTEN = ("JobID", "ArrayJobID", "ArrayTaskID", "State", "SubmitTime", "StartTime",
                  "EndTime", "TimeLimit", "NumNodes", "NodeList", "PriorityLong", "Reason")
MAX_NODES = 100_000
"""A job's node list never names more nodes than this (nor more than its NumNodes)."""


_T = TypeVar("_T")


class ParseError(ValueError):
    """A field or record we do not understand; the message names it."""


_NONE_WORDS = frozenset({"", "N/A", "NONE", "Unknown", "(null)", "n/a", "INVALID", "NOT_SET"})


def parse_count(text: str, what: str, maximum: int = MAX_NUMBER) -> int:
    """A non-negative integer written in ASCII digits, at most `maximum`; else ParseError
    naming `what` (`submit.tags.ascii_int` is the comment codec's: None instead of raising)."""
    if not _DIGITS.fullmatch(text):
        raise ParseError(f"{what}: not a number: {text[:40]!r}")
    value = int(text)
    if value > maximum:
        raise ParseError(f"{what}: {value} is more than {maximum}")
    return value


_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")


def parse_time(text: str) -> float | None:
    """A Slurm timestamp (local time, ISO without zone) as epoch seconds; None for N/A etc."""
    text = text.strip()
    if text in _NONE_WORDS:
        return None
    if not _TIME_RE.fullmatch(text):
        raise ParseError(f"bad time {text[:40]!r}")
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError) as exc:
        raise ParseError(f"bad time {text!r}: {exc}") from None


_DURATION_RE = re.compile(
    r"(?:([0-9]{1,9})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?")


def parse_duration(text: str) -> float | None:
    """A Slurm duration ("UNLIMITED", "5:00", "1:00:00", "1-00:00:00", "2-3") in seconds."""
    text = text.strip()
    if text in _NONE_WORDS or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _DURATION_RE.fullmatch(text)
    if m is None:
        raise ParseError(f"bad duration {text[:40]!r}")
    days, a, b, c = m.groups()
    if days is not None:  # "days-hours", "days-hours:minutes", "days-hours:minutes:seconds"
        h, mi, s = int(a), int(b or 0), int(c or 0)
    elif c is not None:
        h, mi, s = int(a), int(b), int(c)
    elif b is not None:
        h, mi, s = 0, int(a), int(b)
    else:
        h, mi, s = 0, int(a), 0  # a bare number is minutes
    return float(int(days or 0) * 86400 + h * 3600 + mi * 60 + s)


_GPU_RE = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::[^:,=()]+)?[:=]([0-9]+)")


def parse_gpu_count(text: str) -> int:
    """GPU count from a TRES/GRES string: 'gres:gpu:2', 'gres/gpu=1', 'gpu:a100:4(IDX:0-3)'."""
    text = text.strip()
    if text in _NONE_WORDS:
        return 0
    total = sum(parse_count(m.group(1), "GPU count") for m in _GPU_RE.finditer(text))
    if total > MAX_NUMBER:
        raise ParseError(f"GPU count {total} is more than {MAX_NUMBER}")
    return total


@dataclass(frozen=True, kw_only=True)
class SqueueRecord:
    """One squeue record, typed and bounded but not yet interpreted."""

    job_id: JobId
    user: str
    account: str
    """The job's Slurm account ("" when Slurm shows none)."""
    qos: str
    """The job's Slurm QOS ("" when Slurm shows none)."""
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
    placement: tuple[tuple[NodeName, int | None], ...] = ()
    """A running job's nodes and its GPUs on each (see JobView.placement)."""


def job_id_of(job_id: str, array_job_id: str, array_task_id: str) -> JobId:
    """Array tasks are "<array job>_<task>", a pending array remainder "<array job>_[0-9]"."""
    if array_task_id in _NONE_WORDS:
        return JobId(job_id)
    task = array_task_id if _DIGITS.fullmatch(array_task_id) else f"[{array_task_id}]"
    return JobId(f"{array_job_id}_{task}")


def _named(field: str, parse: Callable[[str], _T], text: str) -> _T:
    """`parse(text)`, its ParseError naming `field`."""
    try:
        return parse(text)
    except ParseError as exc:
        raise ParseError(f"{field}: {exc}") from None


def _none_or(text: str) -> str:
    return "" if text == "(null)" else text


def parse_squeue_record(fields: Sequence[str]) -> SqueueRecord:
    """One record's fields (in SQUEUE_FIELDS order); ParseError naming the field if bad."""
    if len(fields) != len(SQUEUE_FIELDS):
        raise ParseError(f"{len(fields)} fields, expected {len(SQUEUE_FIELDS)}")
    f = dict(zip(SQUEUE_FIELDS, fields, strict=True))
    for key, value in f.items():
        if len(value) > MAX_TEXT:
            raise ParseError(f"{key}: longer than {MAX_TEXT} characters")
    for key in _SLURM_WRITTEN:
        if not (f[key].isascii() and f[key].isprintable()):
            raise ParseError(f"{key}: not printable ASCII: {f[key][:40]!r}")
    job_id = job_id_of(f["JobID"], f["ArrayJobID"], f["ArrayTaskID"])
    if not JOB_ID_RE.fullmatch(job_id):
        raise ParseError(f"JobID: not a job id: {job_id[:40]!r}")
    nodes_text = f["NumNodes"].partition("-")[0]  # a range "min-max": the minimum
    nodes = 1 if nodes_text in _NONE_WORDS else parse_count(nodes_text, "NumNodes")
    per_job = _named("tres-per-job", parse_gpu_count, f["tres-per-job"])
    gpus = per_job or _named("tres-per-node", parse_gpu_count, f["tres-per-node"]) * nodes
    if gpus > MAX_NUMBER:
        raise ParseError(f"tres-per-node: {gpus} GPUs in all is more than {MAX_NUMBER}")
    submit = _named("SubmitTime", parse_time, f["SubmitTime"])
    try:
        state = JobState.parse(f["State"])
    except ValueError as exc:
        raise ParseError(f"State: {exc}") from None
    priority = f["PriorityLong"]
    placement = _placement(f["NodeList"], nodes, gpus, per_job, f["tres-per-node"],
                           exact=state is not JobState.COMPLETING) if state.is_running else ()
    return SqueueRecord(
        job_id=job_id, user=f["UserName"], account=_none_or(f["Account"]),
        qos=_none_or(f["QOS"]), name=f["Name"], partition=f["Partition"], state=state,
        submit_time=submit if submit is not None else 0.0,
        # For pending jobs squeue prints the *expected* start: not a fact, drop it.
        start_time=None if state.is_pending else _named("StartTime", parse_time, f["StartTime"]),
        end_time=_named("EndTime", parse_time, f["EndTime"]) if state.is_finished else None,
        time_limit_s=_named("TimeLimit", parse_duration, f["TimeLimit"]),
        nodes=nodes, gpus=gpus,
        priority=0 if priority in _NONE_WORDS else parse_count(priority, "PriorityLong"),
        reason=f["Reason"], comment=_none_or(f["Comment"]), gpus_per_job=per_job > 0,
        placement=placement,
    )


def _placement(node_list: str, nodes: int, gpus: int, per_job: int, per_node_text: str, *,
               exact: bool) -> tuple[tuple[NodeName, int | None], ...]:
    """A running job's (node, GPUs there) from its compressed NodeList: --gres=gpu:K means K on
    every node, a one-node job holds all its GPUs there; --gpus=N over several nodes: None
    (squeue does not say how Slurm split them). A list that names more nodes than NumNodes is
    not trusted (ParseError); one with fewer only while the job is COMPLETING (`exact` False:
    Slurm releases its nodes one by one)."""
    if node_list in _NONE_WORDS:
        return ()
    try:
        names = expand(node_list, min(nodes, MAX_NODES))
    except HostlistError as exc:
        raise ParseError(f"NodeList: {exc}") from None
    if len(names) != nodes and (exact or not names):
        raise ParseError(f"NodeList: {len(names)} nodes, NumNodes says {nodes}")
    each: int | None
    if per_job:
        each = per_job if nodes == 1 else None
    else:
        each = parse_gpu_count(per_node_text) if gpus else 0
    return tuple((NodeName(n), each) for n in names)


def quarantine(fields: Sequence[str], framing: Framing, exc: Exception) -> Quarantined:
    """The record `fields` could not be used because of `exc`."""
    first = fields[0] if fields else ""
    job_id: str | None = None
    if len(fields) >= 3:
        candidate = job_id_of(fields[0], fields[1], fields[2])
        if JOB_ID_RE.fullmatch(candidate):
            job_id = candidate
    if job_id is None and _DIGITS.fullmatch(first):
        job_id = first
    reason = str(exc) if isinstance(exc, ParseError) else f"{type(exc).__name__}: {exc}"
    return Quarantined(job_id=job_id, reason=one_line(reason),
                       excerpt=framing.excerpt(framing.field_mark.join(fields)))


@dataclass(frozen=True, kw_only=True)
class SqueueParse:
    records: tuple[SqueueRecord, ...]
    quarantined: tuple[Quarantined, ...]


def parse_squeue(text: str, framing: Framing) -> SqueueParse:
    """Every record of `squeue -O <framing.format_option(SQUEUE_FIELDS)>` output; never raises.

    A job id printed twice in one poll is not trusted either way: both records are quarantined.
    """
    chunks, bad = framing.split(text, len(SQUEUE_FIELDS))
    parsed: list[tuple[tuple[str, ...], SqueueRecord]] = []
    for fields in chunks:
        try:
            parsed.append((fields, parse_squeue_record(fields)))
        except Exception as exc:  # noqa: BLE001 - one record must never stop the poll
            bad.append(quarantine(fields, framing, exc))
    counts = Counter(r.job_id for _, r in parsed)
    records = []
    for fields, record in parsed:
        if counts[record.job_id] > 1:
            bad.append(quarantine(fields, framing, ParseError(
                f"JobID: {record.job_id} printed {counts[record.job_id]} times")))
        else:
            records.append(record)
    return SqueueParse(records=tuple(records), quarantined=tuple(bad))


def job_view(record: SqueueRecord, now: float,
             managed: Callable[[SqueueRecord, bool], bool], fit: RateFit | None = None,
             decoded: DecodedComment | None = None) -> JobView:
    """Interpret a record: decode the comment, predict remaining time from progress (with the
    rate fitted over the run's reports, `fit`, when the caller keeps one: slurm/predict.py).

    `managed(record, has_intent)` is the daemon's scope rule; `decoded`: the record's comment
    decoded already (the poller keeps it, so a running job's view is rebuilt at every poll
    without decoding its comment again).
    """
    if decoded is None:
        decoded = decode_comment(record.comment)
    prog = decoded.progress
    running = record.state.is_running and record.start_time is not None
    remaining = predict.remaining(fit, prog, now=now, gpus=record.gpus,
                                  run_start=record.start_time if running else None,
                                  intent=decoded.intent)
    run_s = 0.0
    if record.start_time is not None:
        run_s = max(0.0, (record.end_time or now) - record.start_time)
    return JobView(
        id=record.job_id, user=record.user, name=record.name, partition=record.partition,
        account=record.account, qos=record.qos, state=record.state,
        submit_time=record.submit_time, start_time=record.start_time,
        end_time=record.end_time, time_limit_s=record.time_limit_s, gpus=record.gpus,
        nodes=record.nodes, priority=record.priority,
        held=record.reason in ("JobHeldUser", "JobHeldAdmin"),
        managed=managed(record, decoded.intent is not None),
        intent=decoded.intent, progress=prog, predicted_remaining_s=remaining,
        attained_gpu_s=run_s * record.gpus if record.state.is_running else 0.0,
        restartable=decoded.intent is not None and decoded.intent.elastic,  # --rl-elastic
        placement=record.placement,
    )


_NODE_NAME_RE = re.compile(r"[A-Za-z0-9._\-\[\]]{1,255}")
_CPUS_RE = re.compile(r"([0-9]{1,9})/([0-9]{1,9})/([0-9]{1,9})/([0-9]{1,9})")


@dataclass(frozen=True, kw_only=True)
class SinfoParse:
    nodes: tuple[NodeView, ...]
    bad: tuple[Quarantined, ...]
    """Node records that did not parse (job_id None; the reason names the node if known)."""


def parse_sinfo_record(fields: Sequence[str]) -> NodeView:
    """One `sinfo -N -O` record (SINFO_FIELDS order); Extra that is not ours means no samples."""
    f = dict(zip(SINFO_FIELDS, fields, strict=True))
    name = f["NodeList"].strip()
    if not _NODE_NAME_RE.fullmatch(name):
        raise ParseError(f"NodeList: not a node name: {name[:40]!r}")
    partition = f["Partition"].strip().rstrip("*")
    if len(partition) > MAX_TEXT:
        raise ParseError(f"Partition: longer than {MAX_TEXT} characters")
    cpus = _CPUS_RE.fullmatch(f["CPUsState"].strip())
    if cpus is None:
        raise ParseError(f"CPUsState: not A/I/O/T: {f['CPUsState'][:40]!r}")
    samples, sampled_at = decode_samples(f["Extra"].strip())
    return NodeView(
        name=NodeName(name), state=NodeState.parse(f["StateLong"]),
        gpus_total=parse_gpu_count(f["Gres"]), gpus_alloc=parse_gpu_count(f["GresUsed"]),
        cpus_total=int(cpus.group(4)), cpus_alloc=int(cpus.group(1)), partitions=(partition,),
        samples=samples, sampled_at=sampled_at,
    )


def parse_sinfo_nodes(text: str, framing: Framing) -> SinfoParse:
    """`sinfo -N -O` records into NodeViews (a node in several partitions appears once, with
    all of them); a record that does not parse is returned in `bad`; never raises."""
    chunks, bad = framing.split(text, len(SINFO_FIELDS), job_ids=False)
    nodes: dict[str, NodeView] = {}
    for fields in chunks:
        try:
            node = parse_sinfo_record(fields)
        except Exception as exc:  # noqa: BLE001 - one node must never stop the poll
            name = one_line(fields[0], 40)
            bad.append(Quarantined(job_id=None, reason=one_line(f"node {name}: {exc}"),
                                   excerpt=framing.excerpt(framing.field_mark.join(fields))))
            continue
        prev = nodes.get(node.name)
        if prev is None:
            nodes[node.name] = node
        elif node.partitions[0] not in prev.partitions:
            nodes[node.name] = replace(prev, partitions=prev.partitions + node.partitions)
    return SinfoParse(nodes=tuple(nodes.values()), bad=tuple(bad))


def build_snapshot(now: float, jobs: Iterable[JobView], nodes: Iterable[NodeView]
                   ) -> ClusterSnapshot:
    return ClusterSnapshot(time=now, jobs=tuple(jobs), nodes=tuple(nodes))
