"""`slurm-rl train --from-db DB --init CKPT --out CKPT`: the jobs the live daemon recorded, as a
trace the simulator replays, to fine-tune the policy the daemon runs (docs/rl.md, "Update
scheme on a live cluster").

The trace is `sim.recorded`'s (the one `slurm-rl replay` reads): a job becomes a trace job
when the daemon saw it start and end: submit time, run time (end - start, at the GPUs it had),
GPUs, the Slurm time limit, user, and the recorded intent (deadline, GPU range, elastic, steps,
model, batch size; the service class and hardness have no trace column and are dropped). Jobs
still pending or running, and jobs that ended without starting (cancelled in the queue), are
skipped and counted. Times are shifted so that the trace's first submission is at 0. The
cluster is the recorded nodes (nodes x the most common GPUs per node).

The database is opened read-only (the daemon may be running); it is never created or changed.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from slurm_rl.db.readonly import ReadOnlyError, read_only_session
from slurm_rl.sim.recorded import RecordedTrace, read_recorded
from slurm_rl.sim.trace import TraceJob

FINE_TUNE: dict[str, Any] = {
    "iterations": 10,
    "learning_rate": 1e-4,
    "imitation_epochs": 0,
    "steps_per_worker": 256,
    "minibatch_size": 64,
    "validate_every": 1,
}
"""TrainConfig defaults for a fine-tuning run ([train] in --scenarios and the flags override)."""

TRACE_HEADER = ("job_id", "submission_time", "duration", "num_gpu", "time_limit", "deadline",
                "user", "gpus_min", "gpus_max", "elastic", "num_iteration", "model_name",
                "batch_size")
TRACE_FORMAT = "itp"
"""The written trace's format (ITP columns plus the optional ones every CSV loader reads)."""


class FromDbError(ValueError):
    """The database can not give a trace; the message is one line naming the file."""


def read_db(path: Path) -> RecordedTrace:
    """The recorded trace of the daemon database at `path` (`sim.recorded`, opened read-only:
    never created, changed or migrated). FromDbError when the file is missing, not SQLite, not
    a slurm-rl database of this version, or holds no job the daemon saw start and end."""
    if not path.is_file():
        raise FromDbError(f"{path}: no such database file")
    try:
        with read_only_session(path) as session:
            rec = read_recorded(session, since=-math.inf)
    except ReadOnlyError as exc:
        raise FromDbError(str(exc)) from None
    if not rec.jobs:
        why = "; ".join(f"{n} {r}" for r, n in rec.skipped.items()) or "the jobs table is empty"
        raise FromDbError(f"{path}: no job the daemon saw start and end ({why})")
    return rec


def write_trace(jobs: tuple[TraceJob, ...], path: Path) -> None:
    """Write `jobs` as a CSV trace (`TRACE_FORMAT`) that `sim.trace.load` reads back."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def cell(v: object) -> object:
        return "" if v is None else v

    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(TRACE_HEADER)
        for j in jobs:
            w.writerow([j.id, repr(j.submit), repr(j.duration), j.gpus, cell(j.time_limit_s),
                        cell(j.deadline), j.user, cell(j.gpus_min), cell(j.gpus_max),
                        int(j.elastic), cell(j.total_steps), cell(j.model),
                        cell(j.batch_size)])


def summary(rec: RecordedTrace) -> str:
    """One line: what the trace holds and what was skipped."""
    span = max(j.submit for j in rec.jobs)
    dl = sum(1 for j in rec.jobs if j.deadline is not None)
    skipped = ", ".join(f"{n} {r}" for r, n in sorted(rec.skipped.items())) or "none"
    size = (f"{rec.nodes} nodes x {rec.gpus_per_node} GPUs" if rec.nodes
            else "no nodes recorded")
    return (f"{len(rec.jobs)} recorded jobs over {span:.0f} s ({dl} with a deadline), "
            f"{sum(j.gpus for j in rec.jobs)} GPUs asked in all, cluster {size}; "
            f"skipped: {skipped}")
