"""Restarting a running job through Slurm: the command sequence that live resizes (resize.py)
and preemptions (preempt.py) share, and what the action log says about earlier restarts.

    signal (`scancel --signal=SIG --full`) → grace_s → `scontrol requeuehold` → wait PENDING →
    `update JobId=… [new GPU request] [SiteFactor=v] StartTime=now+1` + `release`

(why `now+1`: resize.py's docstring). Every command is an action in the database (PLANNED
before, DONE/FAILED after). A requeue of either kind counts against one cap per job per hour
([resize] max_per_hour: a restart is a restart), and a job that either sequence left held (a
crash, a requeue slower than `wait_pending_s`, a refused release) is released by the next
cycle or the next daemon (`Sequencer.recover`).

A job released at a new count by a resize is pending until Slurm starts it again, and a policy
that sees a pending range job gives it its pending count (often the range minimum). So for
`SETTLE_S` after the release, or until it runs, the actuator leaves its GPU count alone
(`Sequencer.settling`). Before this rule, live: the actuator set a job grown 1 → 2 back to
1 GPU 0.8 s after the release, and the job needed a second resize.

The live snapshot does not say how often a job was restarted or what its earlier runs were
(Slurm's StartTime is the current run's): `Sequencer.annotate` adds both, from the action log
(restarts, all requeues the daemon made) and from memory (GPU-seconds of the runs the daemon
ended; a daemon restart forgets those).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from slurm_rl.config import ResizeConfig
from slurm_rl.core import ClusterSnapshot, JobId, JobView
from slurm_rl.db.actions import ActionOutcome, ActionSpec, finish_actions, plan_actions
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.models import Action, ActionJob
from slurm_rl.slurm.runner import CommandResult, InputRunner

_actions = Action.__table__
_action_jobs = ActionJob.__table__
assert isinstance(_actions, Table) and isinstance(_action_jobs, Table)

SETTLE_S = 120.0
"""How long after a resize's release the job keeps its new GPU count while pending (a little
more than slurmctld's default sched_interval, 60 s, and bf_interval, 30 s: time for a
scheduling pass to start it). After that, or once it ran, the policy's pending count applies
again (e.g. the GPUs it was grown into went to another job meanwhile)."""

REQUEUES = (ActionKind.REQUEUE_HOLD, ActionKind.PREEMPT_REQUEUE)
"""`scontrol requeuehold` by a resize, by a preemption: both count as restarts."""
RELEASE_OF: Mapping[ActionKind, ActionKind] = {
    ActionKind.REQUEUE_HOLD: ActionKind.RESIZE_RELEASE,
    ActionKind.PREEMPT_REQUEUE: ActionKind.PREEMPT_RELEASE,
}


def release_lines(job_id: JobId, fields: str, place: tuple[str, int] | None) -> tuple[str, ...]:
    """scontrol stdin lines that update a held, requeued job (`fields`, e.g. a new GPU request;
    may be "") and release it. `place`: ("SiteFactor" or "Priority", value), where the job goes
    in the queue until the next cycle ranks it (Slurm refuses Priority= on a held job: that one
    goes after the release)."""
    words = [f"update JobId={job_id}"]
    if fields:
        words.append(fields)
    if place is not None and place[0] == "SiteFactor":
        words.append(f"SiteFactor={place[1]}")
    lines = [" ".join([*words, "StartTime=now+1"]), f"release {job_id}"]
    if place is not None and place[0] == "Priority":
        lines.append(f"update JobId={job_id} Priority={place[1]}")
    return tuple(lines)


def gpu_fields(per_node: int, nodes: int, nodes_now: int, cpus_per_node: int | None = None
               ) -> str:
    """The update fields of a new GPU request; `cpus_per_node`: a job the daemon sized
    (sizing.py), whose CPUs follow its GPUs in the same update."""
    fields = f"TresPerNode=gres:gpu:{per_node}"
    fields += f" NumNodes={nodes}" if nodes != nodes_now else ""
    return fields + (f" MinCPUsNode={cpus_per_node}" if cpus_per_node is not None else "")


class Sequencer:
    """Runs and logs the restart commands; one per daemon, shared by resizes and preemptions."""

    def __init__(self, runner: InputRunner, settings: ResizeConfig | None = None, *,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 top: tuple[str, int] | None = None, bottom: int = 1) -> None:
        self.runner = runner
        self.settings = settings or ResizeConfig()
        self.clock = clock
        self.sleep = sleep
        self.top = top
        """("SiteFactor" or "Priority", the rank-0 value): a resized job restarts ahead of the
        queue, as the simulator models a resize."""
        self.bottom = bottom
        """The lowest value: a preempted job waits behind the job that preempted it."""
        self.recover_due = True
        """Look for jobs an earlier restart left held: at start, and after a requeue that was
        not PENDING within `wait_pending_s` or a release that failed."""
        self._restarts: dict[JobId, int] | None = None  # from the action log, then kept up
        self._requeued_at: dict[JobId, float] = {}
        """When the daemon last requeued each job of `_restarts` (read and kept with it)."""
        self._earlier_gpu_s: dict[JobId, float] = {}
        self._submitted_at: dict[JobId, float] = {}
        """When each job this daemon requeued was submitted before its first requeue: Slurm
        gives a requeued job the requeue's time as its submit time (`as_submitted`)."""
        self._aged: dict[JobId, tuple[JobView, JobView]] = {}
        """(view shown, the view with its first submit time): the same object while the view
        is, so that policies keeping work per view keep it."""
        self._released: dict[JobId, float] | None = None
        """Jobs a resize released, with when (from the action log at start, then kept up)."""

    def place(self, kind: ActionKind) -> tuple[str, int] | None:
        """Where a job released after a requeue of `kind` goes in the queue."""
        if self.top is None:
            return None
        return self.top if kind is ActionKind.REQUEUE_HOLD else (self.top[0], self.bottom)

    # --- the commands -------------------------------------------------------------------------
    def signal(self, session: Session, kind: ActionKind, job_id: JobId, cycle_id: int,
               decision_id: int | None) -> bool:
        argv = ("scancel", f"--signal={self.settings.signal}", "--full", job_id)
        return self._run_logged(session, kind, job_id, argv, None, cycle_id, decision_id)

    def requeue_held(self, session: Session, kind: ActionKind, job: JobView, cycle_id: int,
                     decision_id: int | None) -> bool:
        """requeuehold (a restart: counted, the run's GPU-time kept) → wait for PENDING (one
        job: benchmarks/calibrate_restart.py times each step of one restart)."""
        return bool(self.requeue_held_all(session, kind, [job], cycle_id, decision_id))

    def requeue_held_all(self, session: Session, kind: ActionKind, jobs: Sequence[JobView],
                         cycle_id: int, decision_id: int | None) -> list[JobView]:
        """requeuehold each job (a restart: counted, the run's GPU-time kept), then wait for
        them to be PENDING together: one wait for the cycle's restarts, not one after each
        (live, six preemptions due in one cycle took 2.7 s one by one, each job's GPUs freed
        0.3 s after the one before). Returns the jobs requeued and PENDING, in order; a job
        not PENDING within `wait_pending_s` is released by `recover` next cycle (its requeue
        is DONE)."""
        restarts = self._restarts_from(session)  # read before these requeues are in the log
        held: list[JobView] = []
        for job in jobs:
            if not self._run_logged(session, kind, job.id, ("scontrol", "requeuehold", job.id),
                                    None, cycle_id, decision_id):
                continue
            restarts[job.id] = restarts.get(job.id, 0) + 1
            self._requeued_at[job.id] = self.clock()
            self._submitted_at.setdefault(job.id, job.submit_time)
            if job.start_time is not None:
                ran = max(0.0, self.clock() - job.start_time) * job.gpus
                self._earlier_gpu_s[job.id] = self._earlier_gpu_s.get(job.id, 0.0) + ran
            held.append(job)
        pending = self._wait_pending_all([j.id for j in held]) if held else set()
        if len(pending) < len(held):
            self.recover_due = True
        return [j for j in held if j.id in pending]

    def release(self, session: Session, kind: ActionKind, job_id: JobId, fields: str,
                cycle_id: int, decision_id: int | None) -> bool:
        """`kind`: the requeue this release ends (REQUEUE_HOLD: a resize)."""
        lines = release_lines(job_id, fields, self.place(kind))
        ok = self._run_logged(session, RELEASE_OF[kind], job_id,
                              ("scontrol", *" ; ".join(lines).split(" ")),
                              "".join(line + "\n" for line in lines), cycle_id, decision_id)
        self.recover_due |= not ok  # still held: tried again next cycle
        if ok and kind is ActionKind.REQUEUE_HOLD:
            self._released_from(session)[job_id] = self.clock()
        return ok

    def settling(self, session: Session, snapshot: ClusterSnapshot) -> frozenset[JobId]:
        """Jobs a resize released less than `SETTLE_S` ago that are still pending: the
        actuator leaves their GPU count alone (module docstring). Jobs seen running, gone, or
        released longer ago are forgotten."""
        released = self._released_from(session)
        if not released:
            return frozenset()
        jobs = {j.id: j for j in snapshot.jobs}
        for job_id, at in list(released.items()):
            job = jobs.get(job_id)
            if job is None or not job.state.is_pending or snapshot.time - at > SETTLE_S:
                del released[job_id]
        return frozenset(released)

    def _released_from(self, session: Session) -> dict[JobId, float]:
        if self._released is None:
            self._released = released_since(session, self.clock() - SETTLE_S)
        return self._released

    def recover(self, session: Session, snapshot: ClusterSnapshot, cycle_id: int) -> int:
        """Release jobs that a restart left held (a requeue with no release after it): a crash,
        or a job that took longer than `wait_pending_s` to be requeued."""
        jobs = {j.id: j for j in snapshot.jobs}
        count = 0
        self._restarts_from(session)  # (loads `_requeued_at`)
        for job_id, kind in held_after_requeue(session).items():
            job = jobs.get(job_id)
            # Slurm 22.05 shows such a job PENDING with the reason "job requeued in held
            # state" (not JobHeldAdmin, so JobView.held is False): pending is what counts.
            if job is None:
                continue
            if not (job.managed and job.restartable
                    and same_submission(job, self._requeued_at.get(job_id))):
                continue  # another job under the id Slurm gave again, or not one we restart
            if not job.state.is_pending:  # (still completing: look again next cycle)
                self.recover_due = True
                continue
            fields = ""
            if kind is ActionKind.REQUEUE_HOLD:  # the count Slurm shows
                fields = gpu_fields(max(1, job.gpus // max(1, job.nodes)), job.nodes, job.nodes)
            count += self.release(session, kind, job_id, fields, cycle_id, None)
        return count

    def _wait_pending(self, job_id: JobId) -> bool:
        return job_id in self._wait_pending_all([job_id])

    def _wait_pending_all(self, job_ids: Sequence[JobId]) -> set[JobId]:
        """The jobs of `job_ids` seen PENDING within `wait_pending_s` (one squeue per look)."""
        deadline = self.clock() + self.settings.wait_pending_s
        waiting, pending = set(job_ids), set()
        while True:
            out = self.runner.run(["squeue", "-h", "-t", "all", "-j", ",".join(sorted(waiting)),
                                   "-o", "%i %T"])
            if out.ok:
                for line in out.stdout.splitlines():
                    job_id, _, state = line.strip().partition(" ")
                    if state == "PENDING" and job_id in waiting:
                        waiting.discard(JobId(job_id))
                        pending.add(JobId(job_id))
            if not waiting or self.clock() >= deadline:
                return pending
            self.sleep(0.2)

    def _run_logged(self, session: Session, kind: ActionKind, job_id: JobId,
                    argv: tuple[str, ...], stdin: str | None, cycle_id: int,
                    decision_id: int | None) -> bool:
        ids = plan_actions(session, [ActionSpec(kind=kind, job_ids=(job_id,), argv=argv,
                                                cycle_id=cycle_id, decision_id=decision_id)],
                           at=self.clock())
        result: CommandResult
        if stdin is not None:
            # scontrol reading stdin exits 0 even when a line fails (its stderr says so) and
            # goes on to the next line: the first line (the update, with StartTime=now+1)
            # runs alone, and the rest (the release) only if Slurm took it.
            first, _, rest = stdin.partition("\n")
            result = self.runner.run(["scontrol"], input=first + "\n")
            ok = result.ok and not result.stderr.strip()
            if ok and rest.strip():
                result = self.runner.run(["scontrol"], input=rest)
        else:
            result = self.runner.run(list(argv))
        ok = result.ok and not result.stderr.strip()
        finish_actions(session, [ActionOutcome(
            action_id=ids[0], exit_code=result.returncode,
            # scontrol echoes each stdin line as a prompt on stdout: only stderr says anything.
            output=(result.stderr if stdin is not None else result.stdout + result.stderr).strip(),
            status=ActionStatus.DONE if ok else ActionStatus.FAILED)], at=self.clock())
        return ok

    # --- what the snapshot does not say -------------------------------------------------------
    def _restarts_from(self, session: Session) -> dict[JobId, int]:
        if self._restarts is None:
            self._restarts = restart_counts(session)
            self._requeued_at = latest_requeues(session)
        return self._restarts

    def annotate(self, session: Session, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with each job's restarts by this daemon and, added to its attained
        GPU-seconds, the runs those restarts ended (as the simulator counts them); jobs no
        longer in the snapshot are forgotten."""
        restarts = self._restarts_from(session)
        if not restarts:
            return snapshot
        live = {j.id: j for j in snapshot.jobs}
        for job_id in [j for j in restarts if j not in live
                       or not same_submission(live[j], self._requeued_at.get(j))]:
            # gone, or another job under the id Slurm gave again: not restarted by us
            del restarts[job_id]
            self._requeued_at.pop(job_id, None)
            self._earlier_gpu_s.pop(job_id, None)
            self._submitted_at.pop(job_id, None)
        if not restarts:
            return snapshot
        jobs = tuple(
            replace(j, restarts=max(j.restarts, restarts[j.id]),
                    attained_gpu_s=j.attained_gpu_s + self._earlier_gpu_s.get(j.id, 0.0))
            if j.id in restarts else j for j in snapshot.jobs)
        return replace(snapshot, jobs=jobs)

    def as_submitted(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot a policy decides on: each job this daemon requeued with the submit
        time it had before its first requeue. Slurm dates a requeued job submitted at the
        requeue, so a preempted job would rank as the youngest by age and its wait would count
        from its requeue; the simulator keeps the first (live, `deadline`'s preempted jobs
        waited 22 s to run again where the simulated ones waited 13 s). A daemon restarted
        since the requeue does not know it: Slurm's then stands. Only the policy sees it: the
        daemon's own records keep Slurm's, by which it tells a job from another under the same
        id (`same_submission`)."""
        if not self._submitted_at:
            self._aged.clear()
            return snapshot
        aged: dict[JobId, tuple[JobView, JobView]] = {}
        jobs = []
        for j in snapshot.jobs:
            first = self._submitted_at.get(j.id)
            if first is None or first >= j.submit_time:
                jobs.append(j)
                continue
            kept = self._aged.get(j.id)
            view = kept[1] if kept is not None and kept[0] is j else replace(j, submit_time=first)
            aged[j.id] = (j, view)
            jobs.append(view)
        self._aged = aged
        return replace(snapshot, jobs=tuple(jobs)) if aged else snapshot


def recent_restarts(session: Session, job_ids: Sequence[JobId], *, since: float
                    ) -> dict[JobId, int]:
    """Requeues (by resize or preemption) per job since `since` (the per-hour cap survives
    restarts of the daemon)."""
    if not job_ids:
        return {}
    return _requeues(session, since=since, job_ids=job_ids)


SIGNALS = (ActionKind.RESIZE_SIGNAL, ActionKind.PREEMPT_SIGNAL)
"""`scancel --signal`: the checkpoint warning that announces a restart."""


def recent_signals(session: Session, job_ids: Sequence[JobId], *, since: float
                   ) -> dict[JobId, int]:
    """Checkpoint signals (by resize or preemption) per job since `since`. Once signalled a
    restart goes ahead unless the job stops running or the restart no longer passes its rules;
    a job is never signalled more often than `max_per_hour` an hour, so a restart that keeps
    being dropped after its signal cannot have its job checkpoint over and over."""
    if not job_ids:
        return {}
    return _count(session, SIGNALS, since=since, job_ids=job_ids)


def restart_counts(session: Session) -> dict[JobId, int]:
    """Requeues the daemon made per job, as far as the action log goes back (retention)."""
    return _requeues(session, since=None, job_ids=None)


def _requeues(session: Session, *, since: float | None, job_ids: Sequence[JobId] | None
              ) -> dict[JobId, int]:
    return _count(session, REQUEUES, since=since, job_ids=job_ids)


def _count(session: Session, kinds: Sequence[ActionKind], *, since: float | None,
           job_ids: Sequence[JobId] | None) -> dict[JobId, int]:
    """Actions of `kinds` per job that were not refused (FAILED), since `since`."""
    query = (select(_action_jobs.c.job_id)
             .join(_actions, _actions.c.id == _action_jobs.c.action_id)
             .where(_actions.c.kind.in_(kinds), _actions.c.status != ActionStatus.FAILED))
    if since is not None:
        query = query.where(_actions.c.started_at >= since)
    if job_ids is not None:
        query = query.where(_action_jobs.c.job_id.in_(list(job_ids)))
    out: dict[JobId, int] = {}
    for (job_id,) in session.execute(query).all():
        out[JobId(job_id)] = out.get(JobId(job_id), 0) + 1
    return out


def released_since(session: Session, since: float) -> dict[JobId, float]:
    """Jobs a resize's release (RESIZE_RELEASE, DONE) ended a requeue of since `since`, each
    with the time of its latest one (a daemon restarted within `SETTLE_S` still knows them)."""
    rows = session.execute(
        select(_action_jobs.c.job_id, _actions.c.finished_at)
        .join(_actions, _actions.c.id == _action_jobs.c.action_id)
        .where(_actions.c.kind == ActionKind.RESIZE_RELEASE,
               _actions.c.status == ActionStatus.DONE, _actions.c.finished_at >= since)
        .order_by(_actions.c.id)
    ).all()
    return {JobId(job_id): float(at) for job_id, at in rows}


SAME_SUBMISSION_S = 600.0
"""A requeue resets the job's submit time to about its own instant ("so the restarted job looks
like a new job", slurmctld says), so a job submitted more than this after the daemon's latest
requeue of its id is another job, under an id Slurm gave again (a slurmctld started with fresh
state numbers jobs from 1): recovery never releases it."""


def same_submission(job: JobView, requeued_at: float | None) -> bool:
    """Whether `job` can be the one the daemon requeued at `requeued_at` (module constant)."""
    return requeued_at is not None and job.submit_time <= requeued_at + SAME_SUBMISSION_S


def latest_requeues(session: Session) -> dict[JobId, float]:
    """When the daemon last requeued each job, of the requeues `restart_counts` counts (those
    not FAILED)."""
    rows = session.execute(
        select(_action_jobs.c.job_id, _actions.c.started_at)
        .join(_actions, _actions.c.id == _action_jobs.c.action_id)
        .where(_actions.c.kind.in_(REQUEUES), _actions.c.status != ActionStatus.FAILED)
        .order_by(_actions.c.id)
    ).all()
    return {JobId(job_id): float(started) for job_id, started in rows}


def held_after_requeue(session: Session) -> dict[JobId, ActionKind]:
    """Jobs whose latest restart step was a requeuehold with no release DONE after it, each
    with the kind of that requeue (a resize's or a preemption's).

    Only a requeue that may have run counts as a step: a FAILED one (Slurm refused it) and an
    ABANDONED one (interrupted by a crash, and reconciliation found that Slurm never showed
    it) never held the job, so they are never an instruction to release it; a job held then
    was held by someone else (an admin, or its owner)."""
    kinds = [*REQUEUES, *RELEASE_OF.values()]
    rows = session.execute(
        select(_action_jobs.c.job_id, _actions.c.kind, _actions.c.status)
        .join(_actions, _actions.c.id == _action_jobs.c.action_id)
        .where(_actions.c.kind.in_(kinds))
        .order_by(_actions.c.id)
    ).all()
    last: dict[str, tuple[ActionKind, ActionStatus]] = {}
    requeue: dict[str, ActionKind] = {}
    for job_id, kind, status in rows:
        if kind in REQUEUES:
            if status in (ActionStatus.FAILED, ActionStatus.ABANDONED):
                continue  # never held by us (a crash's PLANNED one may have been)
            requeue[job_id] = kind
        last[job_id] = (kind, status)
    return {JobId(j): requeue[j] for j, (k, st) in last.items()
            if j in requeue and (k in REQUEUES or st is not ActionStatus.DONE)}
