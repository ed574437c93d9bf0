"""An incremental poll: parse and persist only the squeue lines that changed since the last cycle.

With 10,000 pending jobs, parsing every line, decoding every comment and comparing every job with
its stored row each cycle costs most of a second, while a quiet cycle changes a handful of lines.
A job's squeue line holds nothing that moves with the clock (no elapsed time), so an unchanged
line means an unchanged job: its parsed record, its JobView (pending and finished jobs do not
depend on `now`) and its stored row are all still right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_rl.core import JobId, JobView, NodeView
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import SqueueRecord, job_view, parse_squeue
from slurm_rl.submit.intent import decode_comment


@dataclass(frozen=True, slots=True)
class _Entry:
    record: SqueueRecord
    view: JobView
    user_comment: str


@dataclass(frozen=True, kw_only=True)
class Polled:
    now: float
    jobs: tuple[JobView, ...]
    """Every job squeue shows, finished ones included (one per id)."""
    changed: tuple[JobView, ...]
    """Jobs whose squeue line differs from the last committed poll (all of them the first
    time): the ones the database must look at."""
    user_comments: Mapping[JobId, str]
    """The user's part of the comment, for the changed jobs."""
    nodes: tuple[NodeView, ...]
    gpus_per_job: frozenset[JobId]
    """Jobs that asked for GPUs per job (--gpus): TresPerNode would not resize them."""
    entries: Mapping[str, _Entry]


class Poller:
    def __init__(self, adapter: SlurmAdapter) -> None:
        self.adapter = adapter
        self._committed: dict[str, _Entry] = {}

    def poll(self, now: float) -> Polled:
        text = self.adapter.squeue().stdout
        nodes = tuple(self.adapter.poll_nodes())
        entries: dict[str, _Entry] = {}
        by_id: dict[JobId, JobView] = {}
        changed: dict[JobId, JobView] = {}
        comments: dict[JobId, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            old = self._committed.get(line)
            if old is not None:
                entry = old
                if old.record.state.is_running:
                    # attained GPU time moves with the clock; nothing stored does
                    entry = _Entry(record=old.record, user_comment=old.user_comment,
                                   view=job_view(old.record, now, self.adapter.scope))
            else:
                (record,) = parse_squeue(line)
                entry = _Entry(record=record, view=job_view(record, now, self.adapter.scope),
                               user_comment=decode_comment(record.comment).user_comment)
            entries[line] = entry
            job_id = entry.record.job_id
            by_id[job_id] = entry.view
            if old is None:
                changed[job_id] = entry.view
                comments[job_id] = entry.user_comment
            else:
                changed.pop(job_id, None)  # a later line for the same id wins
        per_job = frozenset(e.record.job_id for e in entries.values() if e.record.gpus_per_job)
        return Polled(now=now, jobs=tuple(by_id.values()), changed=tuple(changed.values()),
                      user_comments=comments, nodes=nodes, gpus_per_job=per_job,
                      entries=entries)

    def commit(self, polled: Polled) -> None:
        """The database now holds `polled`: next time, only lines that differ are new."""
        self._committed = dict(polled.entries)

    def reset(self) -> None:
        self._committed = {}
