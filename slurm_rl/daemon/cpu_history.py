"""CPUs per GPU from a user's earlier run of the same model ([sizing] cpus_from_history).

A deadline-only job gets its CPUs per GPU from the site's config, or from what the user's
earlier runs used. The daemon's database records no job's CPUs, so "earlier runs used" is read
from Slurm's accounting for one job the database names:

- the earlier run: the owner's most recent job with the same `--rl-model`, COMPLETED, that
  held GPUs (the daemon's `jobs` table: user and state from Slurm, model from the first intent
  seen; pruned after [database] retention_days);
- its allocation: `sacct -nP -X -j ID -o AllocTRES` (cpu=, and gres/gpu= where accounting
  tracks it, else the GPUs the daemon saw the job hold); CPUs per GPU = cpu // GPUs, at least 1.

Allocated, not measured: Slurm's TotalCPU needs jobacct_gather, and an allocation is what the
owner could ask for again. None (then the site's cpus_per_gpu applies) when there is no such
run, accounting is off (`sacct`: "Slurm accounting storage is disabled", on a cluster without
slurmdbd), or sacct says anything this does not understand. The caps of sizing.py (the node,
the partition's and the owner's CPU limits) apply to the result as to the site's value, so an
owner gets no more than they could have asked for.
"""

from __future__ import annotations

import re

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from slurm_rl.core import JobId, JobState, JobView
from slurm_rl.daemon.actuator import SAFE_ID
from slurm_rl.db.models import Job
from slurm_rl.slurm.runner import InputRunner

_jobs = Job.__table__
assert isinstance(_jobs, Table)

_CPU = re.compile(r"(?:^|,)cpu=([0-9]{1,9})(?:,|$)")
_GPU = re.compile(r"(?:^|,)gres/gpu=([0-9]{1,9})(?:,|$)")


def parse_alloc_tres(text: str) -> tuple[int, int | None] | None:
    """`sacct -nP -X -o AllocTRES` for one job → (CPUs, GPUs or None when not tracked); None
    when the output is not one line with cpu=N."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    cpu, gpu = _CPU.search(lines[0]), _GPU.search(lines[0])
    if cpu is None:
        return None
    return int(cpu.group(1)), int(gpu.group(1)) if gpu else None


def previous_run(session: Session, job: JobView) -> tuple[JobId, int] | None:
    """The owner's latest COMPLETED job with `job`'s model that held GPUs: (id, its GPUs)."""
    model = job.intent.model if job.intent is not None else None
    if not model or not job.user:
        return None
    row = session.execute(
        select(_jobs.c.job_id, _jobs.c.gpus)
        .where(_jobs.c.user == job.user, _jobs.c.model == model,
               _jobs.c.state == JobState.COMPLETED, _jobs.c.gpus > 0,
               _jobs.c.job_id != job.id)
        .order_by(_jobs.c.end_time.desc().nulls_last(), _jobs.c.state_changed_at.desc())
        .limit(1)).first()
    return (JobId(row[0]), int(row[1])) if row is not None else None


class CpuHistory:
    """CPUs per GPU of a job's earlier run (module docstring); remembers each answer sacct gave
    (a finished job's allocation does not change)."""

    def __init__(self, runner: InputRunner) -> None:
        self.runner = runner
        self._seen: dict[JobId, int | None] = {}

    def cpus_per_gpu(self, session: Session, job: JobView) -> tuple[int, JobId] | None:
        """(CPUs per GPU, the run it comes from), or None: the site's value applies."""
        prev = previous_run(session, job)
        if prev is None or SAFE_ID.fullmatch(prev[0]) is None:
            return None
        job_id, gpus_seen = prev
        if job_id not in self._seen:
            res = self.runner.run(["sacct", "-nP", "-X", "-j", job_id, "-o", "AllocTRES"])
            if not res.ok:
                return None  # accounting off or away: asked again at the next job to size
            got = parse_alloc_tres(res.stdout)
            ratio = None
            if got is not None:
                cpus, gpus = got
                gpus = gpus or gpus_seen
                ratio = max(1, cpus // gpus) if gpus > 0 and cpus > 0 else None
            if len(self._seen) >= 10_000:
                self._seen.clear()
            self._seen[job_id] = ratio
        ratio = self._seen[job_id]
        return (ratio, job_id) if ratio is not None else None
