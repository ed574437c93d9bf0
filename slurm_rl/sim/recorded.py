"""A trace from what the daemon recorded: the jobs in its database that ran and ended.

`read_recorded(session, since=..., until=...)` returns a `RecordedTrace`: the jobs as
`TraceJob`s in trace seconds (0 = the first submission in the window; duration = what the job
actually ran, end minus start, at the GPUs it held), what actually happened to each (`actual`),
and the cluster as the daemon saw it (node count, GPUs per node). Used by `slurm-rl replay` and
`slurm-rl train --from-db` (rl/fromdb.py): `RecordedTrace.jobs` feeds `sim.run.simulate` or the
gym environment as any loaded trace does.

Jobs left out are counted by reason in `skipped` (`trace_job`): still pending or running,
ended without starting (cancelled in the queue), no GPUs, or inconsistent times. Durations are
run times at the recorded GPU count; a job resized or requeued is replayed at its final count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from slurm_rl.core import JobState
from slurm_rl.db.models import DecisionRow, Job, Node
from slurm_rl.sim.trace import TraceJob

_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_span(text: str) -> float:
    """"7d", "12h", "30m", "90s", "2w" → seconds; ValueError naming the text."""
    m = _SPAN.match(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a time span like 7d, 12h, 30m or 90s")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass(frozen=True, kw_only=True)
class ActualJob:
    """What happened to one job, in trace seconds."""

    job_id: str
    submit: float
    start: float
    end: float
    gpus: int
    deadline: float | None
    state: JobState


@dataclass(frozen=True, kw_only=True)
class RecordedTrace:
    origin: float
    """Epoch seconds of trace time 0 (the first submission kept)."""
    jobs: tuple[TraceJob, ...]
    """In submit order; ids are Slurm's job ids."""
    actual: tuple[ActualJob, ...]
    """The same jobs, as they ran."""
    nodes: int
    gpus_per_node: int
    policies: Mapping[str, int] = field(default_factory=dict)
    """Decisions in the window by the policy that made them (what ran)."""
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def policy_that_ran(self) -> str | None:
        return max(self.policies, key=lambda p: self.policies[p]) if self.policies else None


def trace_job(job: Job, origin: float) -> TraceJob | str:
    """One recorded job -> a TraceJob in trace seconds (`origin` = trace time 0), or why it is
    left out. Values the daemon stored are bounded already (db/bounds.py); what would not make
    a valid trace job (a time limit or step count <= 0, a GPU range that is not one) is
    dropped here, not the job."""
    start, end = job.start_time, job.end_time
    if not job.state.is_finished:
        return "still pending or running"
    if start is None or start <= 0:
        return "ended without starting"
    if end is None:
        return "no end time recorded"
    if end < start or start < job.submit_time:
        return "inconsistent times"
    if job.gpus < 1:
        return "no GPUs"
    lo, hi = job.gpus_min, job.gpus_max
    if lo is None or hi is None or not 1 <= lo <= hi:
        lo = hi = None
    limit, steps = job.time_limit_s, job.total_steps
    return TraceJob(
        id=job.job_id, submit=job.submit_time - origin, duration=end - start, gpus=job.gpus,
        time_limit_s=limit if limit is not None and limit > 0 else None,
        deadline=None if job.deadline is None else job.deadline - origin,
        total_steps=steps if steps is not None and steps > 0 else None,
        model=job.model, batch_size=job.batch_size, user=job.user or "",
        gpus_min=lo, gpus_max=hi, elastic=bool(job.elastic))


def read_recorded(session: Session, *, since: float, until: float | None = None,
                  managed_only: bool = False, name_prefix: str | None = None) -> RecordedTrace:
    """Jobs submitted in [since, until) (epoch seconds) that ran and ended."""
    query = select(Job).where(Job.submit_time >= since)
    if until is not None:
        query = query.where(Job.submit_time < until)
    if managed_only:
        query = query.where(Job.managed.is_(True))
    skipped: Counter[str] = Counter()
    kept: list[tuple[Job, TraceJob]] = []
    for job in session.execute(query.order_by(Job.submit_time, Job.job_id)).scalars():
        if name_prefix is not None and not job.name.startswith(name_prefix):
            continue
        made = trace_job(job, 0.0)
        if isinstance(made, str):
            skipped[made] += 1
        else:
            kept.append((job, made))
    nodes, per_node = _cluster(session)
    origin = kept[0][0].submit_time if kept else since
    jobs = tuple(replace(t, submit=t.submit - origin,
                         deadline=None if t.deadline is None else t.deadline - origin)
                 for _, t in kept)
    actual = tuple(ActualJob(
        job_id=t.id, submit=t.submit, start=j.start_time - origin,
        end=j.end_time - origin, gpus=t.gpus, deadline=t.deadline, state=j.state)
        for (j, _), t in zip(kept, jobs, strict=True)
        if j.start_time is not None and j.end_time is not None)
    window = select(DecisionRow.policy, func.count()).where(DecisionRow.at >= since)
    if until is not None:
        window = window.where(DecisionRow.at < until)
    policies = {str(p): int(n) for p, n in session.execute(window.group_by(DecisionRow.policy))}
    return RecordedTrace(origin=origin, jobs=jobs, actual=actual, nodes=nodes,
                         gpus_per_node=per_node, policies=policies, skipped=dict(skipped))


def _cluster(session: Session) -> tuple[int, int]:
    """(nodes with GPUs, GPUs per node): the most common GPU count among the nodes recorded."""
    counts = Counter(int(g) for (g,) in session.execute(select(Node.gpus_total))
                     if g and g > 0)
    if not counts:
        return 0, 0
    per_node = counts.most_common(1)[0][0]
    return sum(counts.values()), per_node
