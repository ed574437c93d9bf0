"""An incremental poll: parse and persist only the squeue records that changed since the last cycle.

With 10,000 pending jobs, parsing every record, decoding every comment and comparing every job
with its stored row each cycle costs most of a second, while a quiet cycle changes a handful of
records. A job's squeue record holds nothing that moves with the clock (no elapsed time), so an
unchanged record means an unchanged job: its parsed record, its JobView (pending and finished
jobs do not depend on `now`) and its stored row are all still right. Records are keyed by
(field mark, record text): the record mark changes every poll, the field mark is the adapter's
for its life, and with one field mark the text determines the fields exactly (splitting every
record into its fields to key on the tuple costs 4x more at 10,000 jobs).

A record that cannot be parsed or interpreted is quarantined: it is left out of `jobs` and
`changed` (the daemon leaves that job alone) and returned in `quarantined`, with `first_time`
set only the first poll in a row that reports it, so the caller logs and records it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_rl.core import JobId, JobView, NodeView
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.framing import Quarantined
from slurm_rl.slurm.parse import (
    SQUEUE_FIELDS,
    ParseError,
    SqueueRecord,
    job_view,
    parse_squeue_record,
    quarantine,
)
from slurm_rl.slurm.predict import RateFit, update
from slurm_rl.submit.intent import DecodedComment, decode_comment

RecordKey = tuple[str, str]
"""(field mark, the record's text without its record mark)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    record: SqueueRecord
    view: JobView
    decoded: DecodedComment
    """record.comment decoded (once per record)."""
    running: bool
    """record.state.is_running, looked up once (it is asked of every entry every poll)."""


@dataclass(frozen=True, kw_only=True)
class Polled:
    now: float
    jobs: tuple[JobView, ...]
    """Every job squeue shows, finished ones included (one per id), quarantined ones left out."""
    changed: tuple[JobView, ...]
    """Jobs whose squeue record differs from the last committed poll (all of them the first
    time): the ones the database must look at."""
    user_comments: Mapping[JobId, str]
    """The user's part of the comment, for the changed jobs."""
    nodes: tuple[NodeView, ...]
    gpus_per_job: frozenset[JobId]
    """Jobs that asked for GPUs per job (--gpus): TresPerNode would not resize them."""
    quarantined: tuple[Quarantined, ...] = ()
    """squeue records that could not be trusted (their jobs are left alone)."""
    bad_nodes: tuple[Quarantined, ...] = ()
    """sinfo records that could not be parsed (those nodes are left out of `nodes`)."""
    entries: Mapping[RecordKey, _Entry]


class Poller:
    def __init__(self, adapter: SlurmAdapter) -> None:
        self.adapter = adapter
        self._committed: dict[RecordKey, _Entry] = {}
        self._reported: frozenset[str] = frozenset()
        self._fits: dict[JobId, RateFit] = {}
        """Each job's progress-rate fit (slurm/predict.py), kept while squeue shows the job."""

    def poll(self, now: float) -> Polled:
        framing = self.adapter.new_framing()
        text = self.adapter.squeue(framing).stdout
        sinfo = self.adapter.poll_sinfo()
        records, tail = framing.records(text)
        n_fields = len(SQUEUE_FIELDS)
        bad: list[Quarantined] = []
        entries: dict[RecordKey, _Entry] = {}
        by_id: dict[JobId, JobView] = {}
        changed: dict[JobId, JobView] = {}
        comments: dict[JobId, str] = {}
        twice: dict[JobId, list[RecordKey]] = {}
        committed = self._committed
        for record in records:
            key = (framing.field_mark, record)
            old = committed.get(key)
            try:
                if old is None:
                    fields = framing.fields(record)
                    if len(fields) != n_fields:
                        bad.append(framing.broken(record, n_fields))
                        continue
                    entry = self._entry(parse_squeue_record(fields), now)
                elif old.running:
                    # attained GPU time moves with the clock; nothing stored does
                    entry = replace(old, view=job_view(old.record, now, self.adapter.scope,
                                                       self._fits.get(old.record.job_id),
                                                       old.decoded))
                else:
                    entry = old
            except Exception as exc:  # noqa: BLE001 - one job must never stop the poll
                bad.append(quarantine(framing.fields(record), framing, exc))
                continue
            job_id = entry.record.job_id
            if job_id in by_id:  # rare: look for the earlier record(s) only then
                if job_id not in twice:
                    twice[job_id] = [k for k, e in entries.items() if e.record.job_id == job_id]
                twice[job_id].append(key)
            entries[key] = entry
            by_id[job_id] = entry.view
            if old is None:
                changed[job_id] = entry.view
                comments[job_id] = entry.decoded.user_comment
        if tail is not None:
            bad.append(framing.broken(tail, n_fields, cut_short=True))
        for job_id, keys in twice.items():  # Slurm printed one id twice: trust neither
            for key in keys:
                entries.pop(key, None)
                bad.append(quarantine(framing.fields(key[1]), framing, ParseError(
                    f"JobID: {job_id} printed {len(keys)} times")))
            by_id.pop(job_id)
            changed.pop(job_id, None)
            comments.pop(job_id, None)
        per_job = frozenset(e.record.job_id for e in entries.values() if e.record.gpus_per_job)
        if len(self._fits) > len(by_id) // 2:  # forget the jobs squeue no longer shows
            self._fits = {k: v for k, v in self._fits.items() if k in by_id}
        quarantined, bad_nodes = self._mark_reported(bad, sinfo.bad)
        return Polled(now=now, jobs=tuple(by_id.values()), changed=tuple(changed.values()),
                      user_comments=comments, nodes=sinfo.nodes, gpus_per_job=per_job,
                      quarantined=quarantined, bad_nodes=bad_nodes, entries=entries)

    def _entry(self, record: SqueueRecord, now: float) -> _Entry:
        decoded = decode_comment(record.comment)
        p = decoded.progress
        if p is not None and p.updated_at is not None and p.updated_at > now:
            # A report's time is the job's own word: never later than the poll that first saw
            # it (a report dated in the future would otherwise count as not yet made, which
            # `impossible_progress` and the remaining time read it by).
            decoded = replace(decoded, progress=replace(p, updated_at=now))
        fit = self._fits.get(record.job_id)
        if (record.state.is_running and record.start_time is not None
                and decoded.progress is not None):
            fit = update(fit, decoded.progress, record.start_time, record.gpus)
            if fit is not None:
                self._fits[record.job_id] = fit
        return _Entry(record=record, view=job_view(record, now, self.adapter.scope, fit, decoded),
                      decoded=decoded, running=record.state.is_running)

    def _mark_reported(self, jobs: list[Quarantined], nodes: tuple[Quarantined, ...]
                       ) -> tuple[tuple[Quarantined, ...], tuple[Quarantined, ...]]:
        """first_time=False for what the previous poll reported already; remember this poll's
        (so the set stays as small as what is quarantined now)."""
        keyed = [(f"job {q.key}", q) for q in jobs] + [(f"node {q.key}", q) for q in nodes]
        marked = [replace(q, first_time=key not in self._reported) for key, q in keyed]
        self._reported = frozenset(key for key, _ in keyed)
        return tuple(marked[:len(jobs)]), tuple(marked[len(jobs):])

    def commit(self, polled: Polled) -> None:
        """The database now holds `polled`: next time, only records that differ are new."""
        self._committed = dict(polled.entries)
