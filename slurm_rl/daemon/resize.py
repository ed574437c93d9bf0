"""Live resizes of running elastic jobs: signal → grace → requeuehold → PENDING → update →
release (docs/daemon.md, "Resizing running jobs").

A policy's `Resize` is applied only to a job that opted in (`--rl-elastic`, so it checkpoints), is
managed and RUNNING, and only when it pays: a grow must save more predicted run time than a restart
costs, a shrink is not made on a job that would finish within the restart cost anyway. The new count
must stay inside the job's declared GPU range and inside what its owner could ask for in its
partition (limits.py: the daemon acts as operator), split evenly over nodes, and a grow must fit
now: on enough nodes, the free GPUs plus those the job itself holds there (its `placement`, where
Slurm says the count: a multi-node `--gpus=N` job's own GPUs are not counted) must reach the new
count per node, as the simulator and the policies plan it (a requeued grow that does not fit would
wait in the queue); at most `max_per_hour` restarts a job per hour. A job whose CPUs the daemon
chose (a deadline-only job: sizing.py) gets its CPUs per node anew in the same update, at the CPUs
per GPU it was sized with, under the same caps (limits.cpus_for): left alone, Slurm keeps the job's
total CPUs, so a shrink from 2 nodes of 4 GPUs/8 CPUs to 2 GPUs on one node ran on 2 nodes again,
with 4 GPUs (measured on the test cluster).

The sequence spans cycles: the daemon first sends the job `signal` (`scancel --signal=SIG
--full`, batch shell included) so that it can checkpoint, and `grace_s` later requeues it held,
waits (up to `wait_pending_s`) for it to be PENDING, updates its GPU request with
`StartTime=now+1`, and releases it. Why `now+1` and not `now`: a requeue makes slurmd revoke
the job's credential at the kill time T (whole seconds); a credential created in the same
second (ctime <= T) is refused, and slurmctld then kills the job ("Killing non-startable batch
JobId=…: Job credential revoked"). Slurm's own guard is a begin time ~120 s ahead after a
requeue; `now+1` is the shortest begin time that keeps every new credential after T.
Every command is an action in the database (PLANNED before, DONE/FAILED after); a job left
held by an interrupted resize is released by the next daemon (`Sequencer.recover`). The
commands, the action log and the per-hour cap (shared with preemptions, preempt.py) are in
restart.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from slurm_rl.config import ResizeConfig
from slurm_rl.core import ClusterSnapshot, JobId, JobView, NodeName, NodeView, Resize
from slurm_rl.daemon.actuator import SAFE_ID, gpu_request
from slurm_rl.daemon.limits import AssocLimits, PartitionLimits, cpus_for, job_limits
from slurm_rl.daemon.restart import Sequencer, gpu_fields, recent_restarts, recent_signals
from slurm_rl.daemon.restart import release_lines as _release_lines
from slurm_rl.daemon.sizing import sized_cpus_per_gpu
from slurm_rl.db.kinds import ActionKind
from slurm_rl.policies.restart_gate import HOUR_S, restart_gain


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether to resize one job now: `why` is empty for go, else the one-line reason not."""

    job_id: JobId
    gpus: int
    per_node: int = 0
    nodes: int = 0
    cpus_per_node: int | None = None
    """For a job the daemon sized: its new CPUs per node (None: its CPUs are left alone)."""
    gain_s: float = 0.0
    why: str = ""


def judge(resize: Resize, job: JobView | None, *, now: float, settings: ResizeConfig,
          limits: Mapping[str, PartitionLimits] | None, assoc: AssocLimits | None,
          node_free: Sequence[int], recent: int, cpus_per_gpu: int | None = None,
          nodes: Sequence[NodeView] = ()) -> Verdict:
    """Pure: may `resize` be applied to `job` now? `node_free`: free GPUs on each usable node of
    the job's partition, the job's own GPUs there included (`free_for`); `recent`: its restarts
    (by resize or preemption) in the last hour; `cpus_per_gpu`: for a job the daemon sized, the
    CPUs per GPU it was given, and then `nodes`: the partition's nodes (its CPUs per node follow
    the new count)."""
    def no(why: str) -> Verdict:
        return Verdict(job_id=resize.job_id, gpus=resize.gpus, why=why)

    if job is None:
        return no("not in the snapshot")
    if not job.managed:
        return no("outside the daemon's scope")
    if not job.state.is_running or job.held:
        return no(f"{job.state.value.lower()}, not running")
    if job.intent is None or not job.intent.elastic:
        return no("not elastic (submitted without --rl-elastic)")
    if not SAFE_ID.fullmatch(job.id):
        return no("job id is not a plain Slurm job id")
    if resize.gpus == job.gpus:
        return no("already at that count")
    lo, hi = job.intent.gpus_min, job.intent.gpus_max
    if lo is None or hi is None or not lo <= resize.gpus <= hi:
        return no(f"{resize.gpus} GPUs is outside the job's range {lo}-{hi}")
    limit = job_limits(job, limits, assoc)
    if limit is None:
        return no(f"partition {job.partition!r} has no known GPU limits")
    if resize.gpus > limit.max_total():
        return no(f"{resize.gpus} GPUs exceed what partition {job.partition!r} allows this "
                  f"job ({limit.max_total()})")
    req = gpu_request(resize.gpus, limit.per_node_cap())
    if req is None:
        return no(f"{resize.gpus} GPUs can not be split evenly over nodes of "
                  f"{limit.per_node_cap()} GPUs")
    per_node, n_nodes = req
    if resize.gpus > job.gpus and sum(1 for f in node_free if f >= per_node) < n_nodes:
        return no(f"does not fit now: {resize.gpus} GPUs need {n_nodes} node(s) with "
                  f"{per_node} GPUs free or its own")
    cpus = None
    if cpus_per_gpu is not None:
        cpus = cpus_for(per_node, n_nodes, cpus_per_gpu,
                        [n for n in nodes if job.partition in n.partitions], limit)
        if cpus is None:
            return no(f"no usable node of partition {job.partition!r} has {per_node} GPUs")
    if recent >= settings.max_per_hour:
        return no(f"restarted {recent} times in the last hour (max_per_hour "
                  f"{settings.max_per_hour}, resizes and preemptions together)")
    pays = restart_gain(job, resize.gpus, now=now, cost_s=settings.restart_cost_s)
    if pays.why:
        return no(pays.why)
    return Verdict(job_id=job.id, gpus=resize.gpus, per_node=per_node, nodes=n_nodes,
                   cpus_per_node=cpus, gain_s=pays.seconds)


def release_lines(v: Verdict, nodes_now: int, top: tuple[str, int] | None = None
                  ) -> tuple[str, ...]:
    """scontrol stdin lines that give a held, requeued job its new count and release it.
    `top`: ("SiteFactor" or "Priority", the daemon's rank-0 value), so that the job restarts
    ahead of the queue, as the simulator models a resize (restart.release_lines)."""
    return _release_lines(v.job_id, gpu_fields(v.per_node, v.nodes, nodes_now,
                                               v.cpus_per_node), top)


@dataclass(frozen=True, kw_only=True)
class InFlight:
    """A job that got the checkpoint signal at `since`; requeued once the grace is over."""

    verdict: Verdict
    since: float


@dataclass(frozen=True, kw_only=True)
class ResizeReport:
    signalled: int = 0
    resized: int = 0
    failed: int = 0
    skipped: tuple[tuple[JobId, str], ...] = ()

    def notes(self) -> list[str]:
        out = []
        if self.signalled or self.resized or self.failed:
            out.append(f"resizes: {self.signalled} signalled, {self.resized} restarted at a "
                       f"new count, {self.failed} failed")
        out += [f"resize of {j} skipped: {why}" for j, why in self.skipped[:20]]
        return out


PREEMPTION_UNDER_WAY = "a preemption of it is under way (signalled, in its grace period)"
RESIZE_UNDER_WAY = "a resize of it is under way (signalled, in its grace period)"


class Resizer(Sequencer):
    """Carries resizes across cycles (in memory; the action log makes them crash-safe). Its
    Sequencer (the commands, recovery) is shared with the daemon's Preempter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight: dict[JobId, InFlight] = {}

    def step(self, session: Session, resizes: Sequence[Resize], snapshot: ClusterSnapshot, *,
             limits: Mapping[str, PartitionLimits] | None, assoc: AssocLimits | None,
             cycle_id: int, decision_id: int | None, restarting: Collection[JobId] = ()
             ) -> ResizeReport:
        """Advance every resize by what this cycle allows; returns what happened.
        `restarting`: jobs a preemption has signalled and will requeue (not signalled again
        for a resize: the job restarts once, for the preemption)."""
        if not (resizes or self.in_flight or self.recover_due):
            return ResizeReport()  # the usual cycle: nothing to look at
        s = self.settings
        now = snapshot.time
        jobs = {j.id: j for j in snapshot.jobs}
        wanted = {r.job_id: r for r in resizes}
        skipped: list[tuple[JobId, str]] = []
        ready: list[tuple[Verdict, JobView]] = []  # restarted together at the end
        signalled = resized = failed = 0
        if self.recover_due:
            self.recover_due = False
            resized += self.recover(session, snapshot, cycle_id)
        free = _free_by_partition(snapshot)  # taken by each grow carried out this cycle
        looked_at = sorted({*wanted, *self.in_flight})
        recent = recent_restarts(session, looked_at, since=now - HOUR_S)
        sized = sized_cpus_per_gpu(session, looked_at)  # their CPUs follow their GPUs
        # Resizes under way: the job was told to checkpoint, so the restart goes ahead unless
        # the job no longer runs or no count passes the rules any more (a signal is sent only
        # for a restart that follows). The count: the one the policy wants now, else the one
        # signalled.
        for job_id, fl in list(self.in_flight.items()):
            job, want = jobs.get(job_id), wanted.pop(job_id, None)
            if job is None or not job.state.is_running:
                del self.in_flight[job_id]
                skipped.append((job_id, f"resize to {fl.verdict.gpus} GPUs dropped: the job no "
                                "longer runs"))
                continue
            if now - fl.since < s.grace_s:
                continue
            del self.in_flight[job_id]
            # Judged again: in the grace period the GPUs may have gone, or the gain.
            v, why = self._after_signal(fl, want, job, now=now, limits=limits, assoc=assoc,
                                        free=free, recent=recent.get(job_id, 0),
                                        sized=sized.get(job_id), nodes=snapshot.nodes)
            if v is None:
                skipped.append((job_id, f"resize to {fl.verdict.gpus} GPUs dropped after the "
                                f"signal: {why}"))
                continue
            _take(free.get(job.partition, []), v, job)
            ready.append((v, job))
        if not s.enabled:
            done = self._restart(session, ready, cycle_id, decision_id)
            skipped += [(j, "resizing is off ([resize] enabled = false)") for j in wanted]
            return ResizeReport(resized=resized + done, failed=failed + len(ready) - done,
                                skipped=tuple(skipped))
        signals = (recent_signals(session, list(wanted), since=now - HOUR_S)
                   if s.grace_s > 0 else {})
        for job_id, want in sorted(wanted.items()):
            if job_id in restarting:
                skipped.append((job_id, PREEMPTION_UNDER_WAY))
                continue
            job = jobs.get(job_id)
            v = judge(want, job, now=now, settings=s, limits=limits, assoc=assoc,
                      node_free=free_for(free.get(job.partition, []), job) if job else [],
                      recent=recent.get(job_id, 0), cpus_per_gpu=sized.get(job_id),
                      nodes=snapshot.nodes)
            if v.why or job is None:
                skipped.append((job_id, v.why))
                continue
            if signals.get(job_id, 0) >= s.max_per_hour:
                skipped.append((job_id, f"signalled {signals[job_id]} times in the last hour "
                                f"(max_per_hour {s.max_per_hour}): not told to checkpoint "
                                "again"))
                continue
            _take(free.get(job.partition, []), v, job)
            if s.grace_s > 0:
                if self.signal(session, ActionKind.RESIZE_SIGNAL, job.id, cycle_id,
                               decision_id):
                    self.in_flight[job.id] = InFlight(verdict=v, since=now)
                    signalled += 1
                else:
                    failed += 1
            else:
                ready.append((v, job))
        done = self._restart(session, ready, cycle_id, decision_id)
        return ResizeReport(signalled=signalled, resized=resized + done,
                            failed=failed + len(ready) - done, skipped=tuple(skipped))

    def _after_signal(self, fl: InFlight, want: Resize | None, job: JobView, *, now: float,
                      limits: Mapping[str, PartitionLimits] | None, assoc: AssocLimits | None,
                      free: Mapping[str, list[_Free]], recent: int, sized: int | None,
                      nodes: Sequence[NodeView]) -> tuple[Verdict | None, str]:
        """The restart a signalled job gets once its grace is over: at the count the policy
        wants now if that passes the rules, else at the signalled count if that still does;
        (None, why) when neither does."""
        tries = [want] if want is not None and want.gpus != fl.verdict.gpus else []
        tries.append(Resize(job_id=job.id, gpus=fl.verdict.gpus))
        why = ""
        for r in tries:
            v = judge(r, job, now=now, settings=self.settings, limits=limits, assoc=assoc,
                      node_free=free_for(free.get(job.partition, []), job), recent=recent,
                      cpus_per_gpu=sized, nodes=nodes)
            if not v.why:
                return v, ""
            why = why or v.why
        return None, why

    def _restart(self, session: Session, ready: Sequence[tuple[Verdict, JobView]],
                 cycle_id: int, decision_id: int | None) -> int:
        """requeuehold each → wait for them to be PENDING → update + release each
        (StartTime=now+1). Returns how many were released at their new counts."""
        if not ready:
            return 0
        verdicts = {job.id: v for v, job in ready}
        held = self.requeue_held_all(session, ActionKind.REQUEUE_HOLD,
                                     [job for _, job in ready], cycle_id, decision_id)
        return sum(self.release(session, ActionKind.REQUEUE_HOLD, job.id, gpu_fields(
            verdicts[job.id].per_node, verdicts[job.id].nodes, job.nodes,
            verdicts[job.id].cpus_per_node), cycle_id, decision_id) for job in held)


@dataclass
class _Free:
    """A usable node's free GPUs as this cycle's grows take them (a running tally)."""

    node: NodeName
    gpus: int


def _free_by_partition(snapshot: ClusterSnapshot) -> dict[str, list[_Free]]:
    """Free GPUs per usable node, by partition (a node in two partitions is in both lists)."""
    free: dict[str, list[_Free]] = {}
    for node in snapshot.nodes:
        for part in node.partitions:
            free.setdefault(part, []).append(_Free(node=node.name, gpus=node.gpus_free))
    return free


def _own(job: JobView) -> dict[NodeName, int]:
    """The GPUs the job holds on each of its nodes, where the snapshot says."""
    return {name: n for name, n in job.placement if n}


def free_for(node_free: Sequence[_Free], job: JobView) -> list[int]:
    """Per node: its free GPUs plus the job's own there (a requeue frees them for its restart)."""
    own = _own(job)
    return [f.gpus + own.get(f.node, 0) for f in node_free]


def _take(node_free: list[_Free], v: Verdict, job: JobView) -> None:
    """A grow about to be made takes its GPUs from the nodes it will likely get (the fullest
    that fit, its own counted): there it then holds `per_node`."""
    if v.gpus <= job.gpus:
        return
    with_own = free_for(node_free, job)
    own = _own(job)
    fitting = sorted((i for i, f in enumerate(with_own) if f >= v.per_node),
                     key=lambda i: with_own[i])[:v.nodes]
    for i in fitting:
        f = node_free[i]
        f.gpus = max(0, f.gpus + own.get(f.node, 0) - v.per_node)
