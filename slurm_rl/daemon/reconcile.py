"""Finishing actions a crash left PLANNED: look at what Slurm shows, never run them again.

An action is written PLANNED (and committed) just before its scontrol command runs and finished
just after, so one still PLANNED at start-up may or may not have reached Slurm. For each job it
covers, Slurm is asked whether the change is there:

  SiteFactor   `sprio` shows it for pending jobs that are eligible to start; for held jobs or
               jobs waiting for a begin time or dependency, 22.05 shows it nowhere: unknown.
  Priority     squeue's priority.
  TresPerNode  squeue's GPU request and node count.

All live jobs show it → DONE. None does → ABANDONED (the next cycle decides afresh, and re-issues
the value if it still wants it). Some do → ABANDONED, plus a new DONE action covering exactly the
jobs that show it, so that "the last DONE action" stays the truth for every job. Jobs that are no
longer pending count for nothing either way, nor do jobs submitted after the action was planned
(another job with a reused id, or the job requeued since, which reset its submit time).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_rl.core import JobId, JobView
from slurm_rl.daemon.actuator import Change, parse_change
from slurm_rl.db.actions import ActionRecord
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.slurm.parse import parse_gpu_count
from slurm_rl.slurm.runner import Runner, check

SPRIO_CHUNK = 2000


class Seen(enum.Enum):
    APPLIED = "applied"
    NOT_APPLIED = "not applied"
    UNKNOWN = "unverifiable"
    GONE = "no longer pending"


@dataclass(frozen=True, kw_only=True)
class Resolution:
    action_id: int
    status: ActionStatus
    note: str
    applied: Change | None = None
    """When only some jobs show the change: a DONE action to record for exactly those."""


def parse_sprio(text: str) -> dict[JobId, int]:
    """`sprio -h -o "%i %S"` lines: job id → site factor."""
    out: dict[JobId, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[JobId(parts[0])] = int(parts[1])
    return out


def read_site_factors(runner: Runner, job_ids: Sequence[JobId]) -> dict[JobId, int]:
    """Site factors Slurm shows for these jobs (eligible pending jobs only)."""
    out: dict[JobId, int] = {}
    for i in range(0, len(job_ids), SPRIO_CHUNK):
        chunk = job_ids[i:i + SPRIO_CHUNK]
        result = runner.run(["sprio", "-h", "-j", ",".join(chunk), "-o", "%i %S"])
        if not result.ok and "Unable to find jobs" in result.stderr:
            continue  # none of them is eligible
        out.update(parse_sprio(check(result).stdout))
    return out


def seen(change: Change, job: JobView | None, site_factors: Mapping[JobId, int]) -> Seen:
    """Whether Slurm shows `change` for one job."""
    if job is None or not job.state.is_pending:
        return Seen.GONE
    fields = dict(change.fields)
    if change.kind is ActionKind.SITE_FACTOR:
        have = site_factors.get(job.id)
        if have is None:
            return Seen.UNKNOWN
        return Seen.APPLIED if str(have) == fields.get("SiteFactor") else Seen.NOT_APPLIED
    if change.kind is ActionKind.PRIORITY:
        return Seen.APPLIED if str(job.priority) == fields.get("Priority") else Seen.NOT_APPLIED
    if change.kind is ActionKind.TRES_PER_NODE:
        per_node = parse_gpu_count(fields.get("TresPerNode", ""))
        nodes = int(fields.get("NumNodes", job.nodes))
        ok = job.nodes == nodes and job.gpus == per_node * nodes
        return Seen.APPLIED if ok else Seen.NOT_APPLIED
    return Seen.UNKNOWN


def same_job(job: JobView | None, rec: ActionRecord) -> JobView | None:
    """`job` if it can be the job `rec` was planned for; None if it was submitted after (a
    reused id, or a requeue since: what Slurm shows of it says nothing about the action)."""
    if job is None or job.submit_time > rec.started_at:
        return None
    return job


def resolve(
    records: Sequence[ActionRecord],
    jobs: Mapping[JobId, JobView],
    site_factors: Mapping[JobId, int],
) -> list[Resolution]:
    """How to finish each interrupted action, from what Slurm shows now (pure)."""
    out = []
    for rec in records:
        change = parse_change(rec.kind, rec.argv)
        verdicts = {j: seen(change, same_job(jobs.get(j), rec), site_factors)
                    for j in rec.job_ids}
        counts = {s: sum(1 for v in verdicts.values() if v is s) for s in Seen}
        summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
        applied = [j for j, v in verdicts.items() if v is Seen.APPLIED]
        missing = [j for j, v in verdicts.items() if v in (Seen.NOT_APPLIED, Seen.UNKNOWN)]
        prefix = "reconciled after an interruption, not re-run"
        if applied and not missing:
            out.append(Resolution(action_id=rec.id, status=ActionStatus.DONE,
                                  note=f"{prefix}: Slurm shows it ({summary})"))
        elif not applied:
            out.append(Resolution(action_id=rec.id, status=ActionStatus.ABANDONED,
                                  note=f"{prefix}: Slurm does not show it ({summary}); "
                                       "the next cycle decides afresh"))
        else:
            out.append(Resolution(
                action_id=rec.id, status=ActionStatus.ABANDONED,
                note=f"{prefix}: partly applied ({summary}); the applied part is recorded "
                     "as a separate DONE action",
                applied=change.only(applied)))
    return out
