"""Trace loaders: ITP (raw and deadline), Philly-style CSV and SWF, into `TraceJob`s.

Every loader returns the jobs sorted by submit time (stable, so equal times keep file order) and
raises `TraceError` naming the file, line and column of a malformed row. Times are trace seconds:
ITP's own clock, epoch seconds for Philly date-times, SWF's seconds from the log's start.

Optional columns, recognised by header name in every CSV format: `time_limit` (seconds),
`deadline` (trace seconds; a date-time in Philly files), `user`, `gpus_min`, `gpus_max`,
`elastic` (0/1/true/false), `num_iteration`, `model_name`, `batch_size`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path


class TraceFormat(Enum):
    ITP = "itp"
    ITP_DEADLINE = "itp-deadline"
    PHILLY = "philly"
    SWF = "swf"


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceJob:
    """One job of a trace. `duration` is its run time at `gpus` GPUs."""

    id: str
    submit: float
    duration: float
    gpus: int
    time_limit_s: float | None = None
    """The limit the user gave, if the trace has one (SWF: requested time)."""
    deadline: float | None = None
    total_steps: int | None = None
    model: str | None = None
    batch_size: int | None = None
    user: str = ""
    gpus_min: int | None = None
    gpus_max: int | None = None
    elastic: bool = False


@dataclass(frozen=True, kw_only=True)
class Trace:
    source: str
    format: TraceFormat
    jobs: tuple[TraceJob, ...]
    skipped: int = 0
    """Rows the format marks as unusable (SWF: unknown run time or no processors)."""


class TraceError(ValueError):
    def __init__(self, path: str, line: int, column: str | None, message: str) -> None:
        where = f"{path}:{line}" + (f": column {column}" if column else "")
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.column = path, line, column


# --- cell parsers ----------------------------------------------------------------------------

def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def _int(text: str) -> int:
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"not a whole number: {text!r}")
    return int(value)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "y"):
        return True
    if low in ("0", "false", "no", "n", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _is_number(text: str) -> bool:
    try:
        _float(text)
    except ValueError:
        return False
    return True


def _datetime(text: str) -> float:
    """Epoch seconds from a date-time (naive times are UTC) or from a plain number."""
    text = text.strip()
    try:
        return _float(text)
    except ValueError:
        pass
    for fmt in ("%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a date-time: {text!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


class TraceFormatError(TraceError):
    """A trace that does not read as the format asked for, whose contents look like another
    known format (`guessed`): the one-line error names it."""

    def __init__(self, path: str, line: int, column: str | None, asked: TraceFormat,
                 guessed: TraceFormat) -> None:
        # Between two CSV formats the column that is missing says what differs.
        why = f" (no {column} column)" if column and TraceFormat.SWF not in (asked, guessed) else ""
        ValueError.__init__(self, f"{path} looks like {_DESCRIBED[guessed]}, not "
                                  f"{asked.value}{why}: use --format {guessed.value}")
        self.path, self.line, self.column = path, line, column
        self.asked, self.guessed = asked, guessed


_DESCRIBED = {
    TraceFormat.ITP: "an ITP trace",
    TraceFormat.ITP_DEADLINE: "an ITP trace with deadlines",
    TraceFormat.PHILLY: "a Philly-style trace",
    TraceFormat.SWF: "an SWF trace (Standard Workload Format)",
}


# --- CSV formats -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Column:
    names: tuple[str, ...]
    """Accepted header names (the first is canonical)."""
    parse: Callable[[str], object]
    required: bool = False


_NUMBER_OPTIONAL = {
    "time_limit": _Column(("time_limit", "time_limit_s"), _float),
    "user": _Column(("user", "user_id"), str),
    "gpus_min": _Column(("gpus_min",), _int),
    "gpus_max": _Column(("gpus_max",), _int),
    "elastic": _Column(("elastic",), _bool),
    "num_iteration": _Column(("num_iteration", "total_steps"), _int),
    "model_name": _Column(("model_name", "model"), str),
    "batch_size": _Column(("batch_size",), _int),
}

_LAYOUTS: dict[TraceFormat, dict[str, _Column]] = {
    TraceFormat.ITP: {
        "job_id": _Column(("job_id",), str, True),
        "submit": _Column(("submission_time",), _float, True),
        "duration": _Column(("duration",), _float, True),
        "gpus": _Column(("num_gpu",), _int, True),
        "deadline": _Column(("deadline",), _float),
        **_NUMBER_OPTIONAL,
    },
    TraceFormat.PHILLY: {
        "job_id": _Column(("job_id", "jobid", "id"), str),
        "submit": _Column(("timestamp", "submitted_time", "submit_time"), _datetime, True),
        "duration": _Column(("duration",), _float, True),
        "gpus": _Column(("num_gpus", "num_gpu"), _int, True),
        "deadline": _Column(("deadline",), _datetime),
        **_NUMBER_OPTIONAL,
    },
}
_LAYOUTS[TraceFormat.ITP_DEADLINE] = {
    **_LAYOUTS[TraceFormat.ITP],
    "deadline": _Column(("deadline",), _float, True),
    "num_iteration": _Column(("num_iteration",), _int, True),
    "model_name": _Column(("model_name",), str, True),
    "batch_size": _Column(("batch_size",), _int, True),
}


def _load_csv(path: Path, fmt: TraceFormat) -> list[TraceJob]:
    layout = _LAYOUTS[fmt]
    name = str(path)
    jobs: list[TraceJob] = []
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise TraceError(name, 1, None, "empty file (a header row is required)")
        index = {h.strip().lower(): i for i, h in enumerate(header)}
        cols: dict[str, tuple[int, str]] = {}
        for key, col in layout.items():
            found = next((n for n in col.names if n in index), None)
            if found is not None:
                cols[key] = (index[found], found)
            elif col.required:
                raise TraceError(name, 1, col.names[0],
                                 f"missing from the header (have: {', '.join(header)})")
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(name, line, None,
                                 f"{len(row)} fields, the header has {len(header)}")
            values: dict[str, object] = {}
            for key, (i, label) in cols.items():
                cell = row[i].strip()
                if cell == "" and not layout[key].required:
                    continue
                try:
                    values[key] = layout[key].parse(cell)
                except ValueError as exc:
                    raise TraceError(name, line, f"{label} ({i + 1})", str(exc)) from None
            job_id = str(values.get("job_id") or f"{path.stem}-{line}")
            jobs.append(_make(name, line, cols, job_id=job_id, values=values))
    return jobs


def _make(name: str, line: int, cols: dict[str, tuple[int, str]], *, job_id: str,
          values: dict[str, object]) -> TraceJob:
    def col(key: str) -> str:
        i, label = cols[key]
        return f"{label} ({i + 1})"

    duration, gpus = values["duration"], values["gpus"]
    assert isinstance(duration, float) and isinstance(gpus, int)
    if duration < 0:
        raise TraceError(name, line, col("duration"), f"negative duration {duration}")
    if gpus <= 0:
        raise TraceError(name, line, col("gpus"), f"GPU count must be positive, got {gpus}")
    limit = values.get("time_limit")
    if limit is not None and not (isinstance(limit, float) and limit > 0):
        raise TraceError(name, line, col("time_limit"), f"time limit must be positive: {limit}")
    steps = values.get("num_iteration")
    if steps is not None and not (isinstance(steps, int) and steps > 0):
        raise TraceError(name, line, col("num_iteration"), f"must be positive, got {steps}")
    lo, hi = values.get("gpus_min"), values.get("gpus_max")
    if isinstance(lo, int) and isinstance(hi, int) and not 1 <= lo <= hi:
        raise TraceError(name, line, col("gpus_max"), f"bad GPU range {lo}-{hi}")
    return TraceJob(
        id=job_id, submit=float(values["submit"]),  # type: ignore[arg-type]
        duration=duration, gpus=gpus,
        time_limit_s=limit,  # type: ignore[arg-type]
        deadline=values.get("deadline"),  # type: ignore[arg-type]
        total_steps=steps,  # type: ignore[arg-type]
        model=values.get("model_name"),  # type: ignore[arg-type]
        batch_size=values.get("batch_size"),  # type: ignore[arg-type]
        user=str(values.get("user", "")),
        gpus_min=lo, gpus_max=hi,  # type: ignore[arg-type]
        elastic=bool(values.get("elastic", False)),
    )


# --- SWF -------------------------------------------------------------------------------------

# Standard Workload Format: 18 whitespace-separated fields, -1 for unknown, ';' comments.
# We read 1 job number, 2 submit time, 4 run time, 5 allocated processors (8 requested, when
# 5 is unknown), 9 requested time (the time limit) and 12 user id. Processors count as GPUs.
_SWF_FIELDS = 18


def _load_swf(path: Path) -> tuple[list[TraceJob], int]:
    name = str(path)
    jobs: list[TraceJob] = []
    skipped = 0
    with path.open() as fh:
        for line_no, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text or text.startswith(";"):
                continue
            fields = text.split()
            if len(fields) < _SWF_FIELDS:
                raise TraceError(name, line_no, None,
                                 f"{len(fields)} fields, SWF has {_SWF_FIELDS}")
            nums: list[float] = []
            for i, cell in enumerate(fields[:_SWF_FIELDS]):
                try:
                    nums.append(_float(cell))
                except ValueError as exc:
                    raise TraceError(name, line_no, f"field {i + 1}", str(exc)) from None
            run, procs = nums[3], nums[4] if nums[4] > 0 else nums[7]
            if run < 0 or procs <= 0:
                skipped += 1
                continue
            if not procs.is_integer():
                raise TraceError(name, line_no, "field 5", f"not a whole number: {procs}")
            jobs.append(TraceJob(
                id=fields[0], submit=nums[1], duration=run, gpus=int(procs),
                time_limit_s=nums[8] if nums[8] > 0 else None,
                user=fields[11] if nums[11] >= 0 else "",
            ))
    return jobs, skipped


# --- telling formats apart ------------------------------------------------------------------

def sniff(path: Path) -> TraceFormat | None:
    """The format the start of `path` looks like, or None: SWF when it opens with a `;`
    comment or its first row is 18 or more whitespace-separated numbers; a CSV format when the
    header has all that format's required columns (the one with the most, as ITP with deadlines
    is ITP with more columns)."""
    try:
        with path.open(newline="", errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
    except OSError:
        return None
    text = first.strip()
    if text.startswith(";"):
        return TraceFormat.SWF
    fields = text.split()
    if len(fields) >= _SWF_FIELDS and all(_is_number(f) for f in fields):
        return TraceFormat.SWF
    header = {h.strip().lower() for h in next(csv.reader([text]), [])}
    fits = [(sum(c.required for c in layout.values()), fmt) for fmt, layout in _LAYOUTS.items()
            if all(any(n in header for n in c.names) for c in layout.values() if c.required)]
    return max(fits, key=lambda f: f[0])[1] if fits else None


# --- entry points ----------------------------------------------------------------------------

def load(path: str | Path, fmt: TraceFormat | str) -> Trace:
    """Load a trace file; raises TraceError (file, line, column) on a malformed row, or
    TraceFormatError when the file does not read as `fmt` and looks like another format."""
    fmt = TraceFormat(fmt) if isinstance(fmt, str) else fmt
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    skipped = 0
    try:
        if fmt is TraceFormat.SWF:
            jobs, skipped = _load_swf(path)
        else:
            jobs = _load_csv(path, fmt)
    except TraceError as exc:
        guessed = sniff(path)
        if guessed is None or guessed is fmt:
            raise
        raise TraceFormatError(str(path), exc.line, exc.column, fmt, guessed) from None
    jobs.sort(key=lambda j: j.submit)
    return Trace(source=str(path), format=fmt, jobs=tuple(jobs), skipped=skipped)


def window(jobs: Sequence[TraceJob], start: int, count: int | None) -> tuple[TraceJob, ...]:
    """Jobs start..start+count-1 in submit order (count None: to the end)."""
    if start < 0 or (count is not None and count < 0):
        raise ValueError(f"bad window {start}:{count}")
    end = None if count is None else start + count
    return tuple(jobs[start:end])


def parse_window(text: str) -> tuple[int, int | None]:
    """'START:COUNT' or 'START:' -> (start, count)."""
    start_s, sep, count_s = text.partition(":")
    try:
        start = int(start_s) if start_s else 0
        count = int(count_s) if count_s else None
    except ValueError:
        raise ValueError(f"window must be START:COUNT, got {text!r}") from None
    if not sep or start < 0 or (count is not None and count <= 0):
        raise ValueError(f"window must be START:COUNT with COUNT > 0, got {text!r}")
    return start, count


def mean_demand(jobs: Sequence[TraceJob]) -> float:
    """Mean GPUs asked for over the trace: sum(gpus x duration) / submission span.

    The span is first to last submission; a trace submitted all at once uses its longest job.
    """
    if not jobs:
        return 0.0
    work = sum(j.gpus * j.duration for j in jobs)
    first = min(j.submit for j in jobs)
    span = max(j.submit for j in jobs) - first
    if span <= 0:
        span = max(j.duration for j in jobs) or 1.0
    return work / span


def nodes_for_load(jobs: Sequence[TraceJob], load: float, gpus_per_node: int) -> int:
    """Smallest node count with mean demand / capacity <= load (and room for the largest job)."""
    if load <= 0:
        raise ValueError(f"load must be positive, got {load}")
    need = math.ceil(mean_demand(jobs) / load / gpus_per_node - 1e-9)
    biggest = max((j.gpus for j in jobs), default=1)
    return max(1, need, math.ceil(biggest / gpus_per_node))


def overlay(traces: Iterable[Sequence[TraceJob]], *, repeat: int = 1,
            limit: int | None = None) -> tuple[TraceJob, ...]:
    """Several traces on one clock: each shifted to start at 0; the union then repeated
    back to back (each copy after the previous one's last submission). Ids get '#k' suffixes
    (k = the copy) to stay unique. Used to build the benchmark's 100,000-job trace."""
    shifted: list[TraceJob] = []
    for t in traces:
        if not t:
            continue
        first = min(j.submit for j in t)
        shifted.extend(replace(j, submit=j.submit - first,
                               deadline=None if j.deadline is None else j.deadline - first)
                       for j in t)
    shifted.sort(key=lambda j: j.submit)
    if not shifted:
        return ()
    period = shifted[-1].submit + 1.0
    out: list[TraceJob] = []
    for k in range(repeat):
        off = k * period
        for j in shifted:
            out.append(replace(j, id=f"{j.id}#{k}", submit=j.submit + off,
                               deadline=None if j.deadline is None else j.deadline + off))
            if limit is not None and len(out) >= limit:
                return tuple(out)
    return tuple(out)
