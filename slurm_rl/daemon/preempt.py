"""Live preemptions: a policy's `Preempt` of a running job, applied as a restart without a GPU
change (docs/daemon.md, "Preemption").

A preemption is applied only to a job that is managed, plainly RUNNING, opted in to restarts
(`--rl-elastic`: it checkpoints on the signal), has a plain Slurm job id, and that its owner
could requeue: Slurm 22.05 requeues batch jobs only, and not one submitted with
`--no-requeue` (`Requeue=0`) — refused to the owner and the operator alike (docs/design.md,
measured), so asking as operator grants nothing the owner lacks; both facts are read with one
`squeue` call for the candidates before any signal. At most [resize] max_per_hour restarts
a job per hour, resizes and preemptions together. Everything else stays on paper, with the
reason in the cycle's notes (`preemption of 42 skipped: …`).

The sequence (restart.py) spans cycles: `scancel --signal=SIG --full` so the job checkpoints;
`grace_s` later, if the policy still asks for it and it still passes the rules,
`scontrol requeuehold`, wait for PENDING, then `update JobId=… SiteFactor=<lowest>
StartTime=now+1` and `release`. The job then waits in the queue behind the job the policy
put first (the one that preempts it, ranked above it), and the next cycle ranks it like any
pending job. Dry runs never act; [resize] preempt = false records preemptions only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from slurm_rl.config import ResizeConfig
from slurm_rl.core import ClusterSnapshot, JobId, JobState, JobView, Preempt
from slurm_rl.daemon.actuator import SAFE_ID
from slurm_rl.daemon.resize import RESIZE_UNDER_WAY, Resizer
from slurm_rl.daemon.restart import recent_restarts, recent_signals
from slurm_rl.db.kinds import ActionKind
from slurm_rl.policies.restart_gate import HOUR_S

NOT_OPTED_IN = "not applied: job did not opt in to restarts (--rl-elastic)"

REQUEUE_FIELDS = ("JobID:24", "Requeue:8", "BatchFlag:8")
"""`squeue -O` fields that say whether Slurm would requeue a job for its owner."""


@dataclass(frozen=True, kw_only=True)
class Requeueable:
    """What Slurm says of a job's requeue (squeue `Requeue`, `BatchFlag`)."""

    requeue: bool
    batch: bool


def parse_requeueable(stdout: str) -> dict[JobId, Requeueable]:
    """`squeue -h -O JobID,Requeue,BatchFlag` output → per job (pure; odd lines are left out,
    and a job left out is not preempted)."""
    out: dict[JobId, Requeueable] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) != 3 or not SAFE_ID.fullmatch(words[0]) \
                or not all(w in ("0", "1") for w in words[1:]):
            continue
        out[JobId(words[0])] = Requeueable(requeue=words[1] == "1", batch=words[2] == "1")
    return out


def judge(job: JobView | None, *, settings: ResizeConfig, recent: int,
          slurm: Requeueable | None = None, check_slurm: bool = True) -> str:
    """Pure: why `job` may not be preempted now ("" if it may). `recent`: its restarts (by
    resize or preemption) in the last hour; `slurm`: what squeue says of its requeue
    (`check_slurm` False: not asked yet, the rules before it only)."""
    if job is None:
        return "not in the snapshot"
    if not job.managed:
        return "outside the daemon's scope"
    if job.state is not JobState.RUNNING or job.held:
        return f"{job.state.value.lower()}, not running"
    if job.intent is None or not job.intent.elastic:
        return NOT_OPTED_IN
    if not SAFE_ID.fullmatch(job.id):
        return "job id is not a plain Slurm job id"
    if recent >= settings.max_per_hour:
        return (f"restarted {recent} times in the last hour (max_per_hour "
                f"{settings.max_per_hour}, resizes and preemptions together)")
    if not check_slurm:
        return ""
    if slurm is None:
        return "Slurm did not say whether the job can be requeued"
    if not slurm.batch:
        return "not a batch job: Slurm requeues batch jobs only"
    if not slurm.requeue:
        return "submitted with --no-requeue: Slurm would not requeue it for its owner"
    return ""


@dataclass(frozen=True, kw_only=True)
class PreemptReport:
    signalled: int = 0
    preempted: int = 0
    failed: int = 0
    skipped: tuple[tuple[JobId, str], ...] = ()

    def notes(self) -> list[str]:
        out = []
        if self.signalled or self.preempted or self.failed:
            out.append(f"preemptions: {self.signalled} signalled, {self.preempted} requeued, "
                       f"{self.failed} failed")
        out += [f"preemption of {j} skipped: {why}" for j, why in self.skipped[:20]]
        return out


class Preempter:
    """Carries preemptions across cycles (in memory; the action log makes them crash-safe),
    with the commands and recovery of the daemon's one Sequencer (the Resizer). A job a resize
    has signalled is not signalled again for a preemption, nor the other way round (the
    Resizer is told `restarting`): each restart's signal is followed by that restart alone."""

    def __init__(self, seq: Resizer, *, enabled: bool = True) -> None:
        self.seq = seq
        self.enabled = enabled
        self.in_flight: dict[JobId, float] = {}
        """Jobs signalled, with when: requeued once the grace is over."""

    def step(self, session: Session, preemptions: Sequence[Preempt], snapshot: ClusterSnapshot,
             *, cycle_id: int, decision_id: int | None) -> PreemptReport:
        """Advance every preemption by what this cycle allows; returns what happened."""
        if not (preemptions or self.in_flight):
            return PreemptReport()
        s = self.seq.settings
        now = snapshot.time
        jobs = {j.id: j for j in snapshot.jobs}
        wanted = {p.job_id: p for p in preemptions}
        if not self.enabled:
            self.in_flight.clear()
            return PreemptReport(skipped=tuple(
                (j, "preemption is off ([resize] preempt = false)") for j in sorted(wanted)))
        recent = recent_restarts(session, [*wanted, *self.in_flight], since=now - HOUR_S)
        skipped: list[tuple[JobId, str]] = []
        due: list[JobId] = []
        # A signalled job was told to checkpoint: its requeue goes ahead even if the policy no
        # longer asks for it (a signal is sent only for a restart that follows), unless the job
        # no longer runs.
        for job_id, since in list(self.in_flight.items()):
            job = jobs.get(job_id)
            if job is None or not job.state.is_running:
                del self.in_flight[job_id]
                skipped.append((job_id, "dropped: the job no longer runs"))
            elif now - since >= s.grace_s:
                due.append(job_id)
            wanted.pop(job_id, None)
        signals = (recent_signals(session, sorted(wanted), since=now - HOUR_S)
                   if s.grace_s > 0 else {})
        fresh = []
        for job_id in sorted(wanted):
            if job_id in self.seq.in_flight:
                skipped.append((job_id, RESIZE_UNDER_WAY))
                continue
            why = judge(jobs.get(job_id), settings=s, recent=recent.get(job_id, 0),
                        check_slurm=False)
            if not why and signals.get(job_id, 0) >= s.max_per_hour:
                why = (f"signalled {signals[job_id]} times in the last hour (max_per_hour "
                       f"{s.max_per_hour}): not told to checkpoint again")
            if why:
                skipped.append((job_id, why))
            else:
                fresh.append(job_id)
        facts = self._requeueable([*due, *fresh])
        signalled = failed = 0
        ready: list[JobView] = []  # requeued together at the end (one wait for PENDING)
        for job_id in due:  # judged again: Slurm's answer, the cap
            del self.in_flight[job_id]
            job = jobs[job_id]
            why = judge(job, settings=s, recent=recent.get(job_id, 0), slurm=facts.get(job_id))
            if why:
                skipped.append((job_id, f"dropped after the signal: {why}"))
            else:
                ready.append(job)
        for job_id in fresh:
            job = jobs[job_id]
            why = judge(job, settings=s, recent=recent.get(job_id, 0), slurm=facts.get(job_id))
            if why:
                skipped.append((job_id, why))
            elif s.grace_s > 0:
                if self.seq.signal(session, ActionKind.PREEMPT_SIGNAL, job_id, cycle_id,
                                   decision_id):
                    self.in_flight[job_id] = now
                    signalled += 1
                else:
                    failed += 1
            else:
                ready.append(job)
        preempted = self._restart(session, ready, cycle_id, decision_id)
        failed += len(ready) - preempted
        return PreemptReport(signalled=signalled, preempted=preempted, failed=failed,
                             skipped=tuple(skipped))

    def _restart(self, session: Session, jobs: Sequence[JobView], cycle_id: int,
                 decision_id: int | None) -> int:
        """requeuehold each → wait for them to be PENDING → release each at the lowest rank
        (StartTime=now+1). Returns how many were released."""
        if not jobs:
            return 0
        kind = ActionKind.PREEMPT_REQUEUE
        held = self.seq.requeue_held_all(session, kind, jobs, cycle_id, decision_id)
        return sum(self.seq.release(session, kind, job.id, "", cycle_id, decision_id)
                   for job in held)

    def _requeueable(self, job_ids: Sequence[JobId]) -> Mapping[JobId, Requeueable]:
        """One squeue call for the candidates (ids already SAFE_ID); {} if it fails."""
        if not job_ids:
            return {}
        out = self.seq.runner.run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids),
                                   "-O", ",".join(REQUEUE_FIELDS)])
        return parse_requeueable(out.stdout) if out.ok else {}
