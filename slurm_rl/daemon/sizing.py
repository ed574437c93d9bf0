"""Deadline-only jobs: the daemon picks their GPUs and CPUs, then releases them.

`rlsbatch --rl-deadline +6h --rl-model NAME job.sh`, with no GPU or CPU request, submits the
job *held*, asking for no GPUs, with the GPU range 1..[sizing] max_gpus in its intent
(docs/rlsbatch.md, "Deadline only"). Such a job is *awaiting sizing*: managed, pending, held by
its user (`JobHeldUser`; never an admin's hold), no GPUs asked for, and a GPU range in its
intent; rlsbatch never makes a job like that in any other way. Each cycle, for each of them:

- the GPU count is the policy's (the `deadline` policy gives the fewest GPUs that meet the
  deadline given the queue; a policy that gives none: the range minimum), inside the range,
  inside `max_gpus`, and inside what the job's owner could ask for in its partition
  (limits.py: the daemon acts as operator, so it must not grant more), split evenly over nodes
  (a count that does not split is lowered to the next one that does);
- CPUs per node: `cpus_per_gpu` × GPUs per node ([sizing]; 0: the node's CPUs shared evenly
  over its GPUs; with `cpus_from_history`, the CPUs per GPU of the owner's last completed run
  of the same model where sacct knows it: cpu_history.py), never more than the smallest node
  of the partition that has those GPUs, nor than the owner could ask for (the partition's
  MaxCPUsPerNode, QOS and association cpu limits: limits.py), and at least 1;
- scontrol runs `update JobId=… TresPerNode=gres:gpu:K [NumNodes=N] MinCPUsNode=C`, then, in
  a second process and only if Slurm took the update, `release …` (scontrol reading stdin goes
  on after a refused line, so one process would release a job with no GPUs), recorded as one
  SIZE_RELEASE action (PLANNED before, DONE or FAILED after), like every other command the
  daemon runs.

A job the daemon can not size (partition limits not readable, scontrol refused) is tried again
next cycle; after `max_wait_cycles` tries it is released at the range minimum with a note. An
update that took without its release leaves the job held with GPUs: the job's last SIZE_RELEASE
action is then not DONE, and that is how it is recognised and released next cycle. The actuator
leaves these jobs' GPU counts to this module (`withheld`); their order it sets as for any job.

Once sized, the job's CPUs are the daemon's: when a resize later changes its GPUs (resize.py),
its CPUs per node follow in the same update, at the CPUs per GPU it was sized with
(`sized_cpus_per_gpu`, read from its DONE SIZE_RELEASE action: the daemon's own record, which
no user can write) under the same caps (`cpus_for`). A job whose CPUs its owner asked for has no
such action and keeps them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from slurm_rl.config import SizingConfig
from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, NodeView
from slurm_rl.daemon.actuator import SAFE_ID, gpu_request, without_gpus
from slurm_rl.daemon.cpu_history import CpuHistory
from slurm_rl.daemon.limits import (
    AssocLimits,
    PartitionLimits,
    cpus_for,
    cpus_per_node,
    job_limits,
)
from slurm_rl.daemon.poll import Polled
from slurm_rl.db.actions import ActionOutcome, ActionSpec, finish_actions, plan_actions
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.models import Action, ActionJob, Job
from slurm_rl.slurm.runner import InputRunner

log = logging.getLogger("slurm_rl.daemon")

_actions = Action.__table__
_action_jobs = ActionJob.__table__
_jobs = Job.__table__
assert isinstance(_actions, Table) and isinstance(_action_jobs, Table)
assert isinstance(_jobs, Table)

USER_HOLD = "JobHeldUser"
"""squeue's reason for a job held by its user (sbatch --hold): the only hold this releases."""


@dataclass(frozen=True, kw_only=True)
class Sized:
    """What one job gets: `gpus` in all, `per_node` on each of `nodes` nodes, with
    `cpus_per_node` CPUs on each; `why` says where the count comes from."""

    job_id: JobId
    gpus: int
    per_node: int
    nodes: int
    cpus_per_node: int
    why: str

    def lines(self, nodes_now: int) -> tuple[str, ...]:
        """scontrol stdin lines: the request, then the release."""
        fields = f"TresPerNode=gres:gpu:{self.per_node}"
        if self.nodes != nodes_now:
            fields += f" NumNodes={self.nodes}"
        return (f"update JobId={self.job_id} {fields} MinCPUsNode={self.cpus_per_node}",
                f"release {self.job_id}")


def awaiting_sizing(job: JobView, reason: str, retry: bool = False) -> bool:
    """Whether `job` waits for the daemon to size it (module docstring). `retry`: its last
    SIZE_RELEASE action did not finish DONE (then it may already have its GPUs)."""
    it = job.intent
    return (job.managed and job.state.is_pending and reason == USER_HOLD
            and (job.gpus == 0 or retry) and it is not None
            and (it.gpus_min is not None or it.gpus_max is not None)
            and SAFE_ID.fullmatch(job.id) is not None)


def size_job(job: JobView, chosen: int | None, *, settings: SizingConfig,
             limits: Mapping[str, PartitionLimits] | None, assoc: AssocLimits | None,
             nodes: Sequence[NodeView], fallback: bool = False,
             cpus_per_gpu: tuple[int, str] | None = None) -> Sized | str:
    """Pure: what `job` gets when the policy chose `chosen` GPUs (None: none), or the one-line
    reason it can not be sized now. `fallback`: the range minimum, whatever the policy chose.
    `cpus_per_gpu`: (CPUs per GPU, where from) instead of the site's [sizing] value."""
    it = job.intent
    assert it is not None
    lo = max(it.gpus_min or 1, 1)
    hi = min(it.gpus_max if it.gpus_max is not None else lo, settings.max_gpus)
    limit = job_limits(job, limits, assoc)
    if limit is None:
        return f"partition {job.partition!r} has no known GPU limits"
    top = min(hi, limit.max_total())
    if top < lo:
        return (f"its range {lo}-{it.gpus_max} exceeds what partition {job.partition!r} allows "
                f"this job ({limit.max_total()}) or [sizing] max_gpus ({settings.max_gpus})")
    want = lo if fallback or chosen is None else min(max(chosen, lo), top)
    why = ("the range minimum (not sized in time)" if fallback else
           "the range minimum (the policy gave no count)" if chosen is None else
           f"the policy's count, {chosen}, capped at {top}" if chosen > top else
           f"the policy's count, {chosen}, raised to the range minimum" if chosen < lo else
           "the policy's count")
    cap = limit.per_node_cap()
    for gpus in range(want, lo - 1, -1):
        req = gpu_request(gpus, cap)
        if req is None:
            continue
        per_node, n = req
        members = [nd for nd in nodes if job.partition in nd.partitions]
        each = settings.cpus_per_gpu if cpus_per_gpu is None else cpus_per_gpu[0]
        cpus = cpus_for(per_node, n, each, members, limit)
        if cpus is None:
            return f"no usable node of partition {job.partition!r} has {per_node} GPUs"
        if gpus != want:
            why += f", lowered to {gpus} to split evenly over nodes of {cap} GPUs"
        if cpus_per_gpu is not None:
            why += f"; {each} CPUs per GPU, {cpus_per_gpu[1]}"
        if cpus != cpus_per_node(per_node, each, members):
            why += f"; CPUs capped at {cpus} a node by the owner's CPU limits"
        return Sized(job_id=job.id, gpus=gpus, per_node=per_node, nodes=n,
                     cpus_per_node=cpus, why=why)
    return f"no count in {lo}-{want} splits evenly over nodes of {cap} GPUs"


@dataclass(frozen=True, kw_only=True)
class SizingPlan:
    """This cycle's jobs awaiting sizing: what each gets, or why it waits."""

    sized: tuple[tuple[Sized, int], ...] = ()
    """(what it gets, its node count now)."""
    waiting: tuple[tuple[JobId, str], ...] = ()

    def notes(self, done: int | None = None) -> list[str]:
        out = []
        if self.sized:
            said = ", ".join(f"{s.job_id}: {s.gpus} GPU(s), {s.cpus_per_node} CPUs/node "
                             f"({s.why})" for s, _ in self.sized[:20])
            verb = "to size (dry run)" if done is None else f"sized and released {done} of"
            out.append(f"deadline-only jobs {verb} {len(self.sized)}: {said}")
        out += [f"sizing of {j} waits: {why}" for j, why in self.waiting[:20]]
        return out


class Sizer:
    """Sizes and releases deadline-only jobs (module docstring); remembers only how many
    cycles each job has waited, and the CPUs per GPU of each one's earlier run (the action log
    keeps the rest)."""

    def __init__(self, runner: InputRunner, settings: SizingConfig | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.runner = runner
        self.settings = settings or SizingConfig()
        self.clock = clock
        self.tries: dict[JobId, int] = {}
        self.history = CpuHistory(runner) if self.settings.cpus_from_history else None
        self.ratios: dict[JobId, tuple[int, str]] = {}
        """CPUs per GPU of the earlier run (`awaiting` finds them; `plan` uses them)."""

    def awaiting(self, session: Session, polled: Polled, snapshot: ClusterSnapshot
                 ) -> list[JobView]:
        """The snapshot's jobs awaiting sizing (usually none, found without a query)."""
        maybe = [j for j in snapshot.pending if j.held and j.managed and j.intent is not None
                 and (j.intent.gpus_min is not None or j.intent.gpus_max is not None)]
        if not maybe:
            return []
        retry = set(unfinished_sizing(session, [j.id for j in maybe if j.gpus > 0]))
        maybe = [j for j in maybe if j.gpus == 0 or j.id in retry]  # else never awaiting
        ids = {j.id for j in maybe}
        reasons = {e.record.job_id: e.record.reason for e in polled.entries.values()
                   if e.record.job_id in ids} if ids else {}
        out = [j for j in maybe if awaiting_sizing(j, reasons.get(j.id, ""), j.id in retry)]
        self.ratios = {}
        if self.history is not None:
            for job in out:
                if (found := self.history.cpus_per_gpu(session, job)) is not None:
                    self.ratios[job.id] = (found[0],
                                           f"as the owner's run {found[1]} of the model had")
        return out

    def unheld(self, snapshot: ClusterSnapshot, waiting: Sequence[JobView]) -> ClusterSnapshot:
        """The snapshot the policy decides on: jobs awaiting sizing shown as not held (they are
        held only until the daemon sizes them; a policy leaves held jobs out of its plans)."""
        ids = {j.id for j in waiting}
        if not ids:
            return snapshot
        return replace(snapshot, jobs=tuple(replace(j, held=False) if j.id in ids else j
                                            for j in snapshot.jobs))

    def withheld(self, decision: Decision, waiting: Sequence[JobView]) -> Decision:
        """`decision` without GPU counts for the jobs this module sizes (the actuator would
        otherwise change their request without CPUs, and without releasing them)."""
        return without_gpus(decision, (j.id for j in waiting))

    def plan(self, decision: Decision, waiting: Sequence[JobView], snapshot: ClusterSnapshot, *,
             limits: Mapping[str, PartitionLimits] | None, assoc: AssocLimits | None
             ) -> SizingPlan:
        chosen = {o.job_id: o.gpus for o in decision.order}
        sized: list[tuple[Sized, int]] = []
        waits: list[tuple[JobId, str]] = []
        for job in waiting:
            late = self.tries.get(job.id, 0) >= self.settings.max_wait_cycles
            got = size_job(job, chosen.get(job.id), settings=self.settings, limits=limits,
                           assoc=assoc, nodes=snapshot.nodes, fallback=late,
                           cpus_per_gpu=self.ratios.get(job.id))
            if isinstance(got, str) and late and job_limits(job, limits, assoc) is None:
                # Limits still unreadable: the minimum on one node, as a last resort, so that
                # the job is not held for ever.
                got = _minimum(job, self.settings, snapshot.nodes) or got
            if isinstance(got, str):
                waits.append((job.id, got))
            else:
                sized.append((got, job.nodes))
        return SizingPlan(sized=tuple(sized), waiting=tuple(waits))

    def apply(self, session: Session, plan: SizingPlan, live: Sequence[JobView], *,
              cycle_id: int, decision_id: int | None) -> list[str]:
        """Run the plan (one scontrol process per job, each an action); returns notes."""
        done = 0
        for sized, nodes_now in plan.sized:
            if self._run(session, sized, nodes_now, cycle_id, decision_id):
                done += 1
                self.tries.pop(sized.job_id, None)
            else:
                self.tries[sized.job_id] = self.tries.get(sized.job_id, 0) + 1
        for job_id, _ in plan.waiting:
            self.tries[job_id] = self.tries.get(job_id, 0) + 1
        keep = {j.id for j in live}
        self.tries = {j: n for j, n in self.tries.items() if j in keep}
        return plan.notes(done)

    def _run(self, session: Session, sized: Sized, nodes_now: int, cycle_id: int,
             decision_id: int | None) -> bool:
        lines = sized.lines(nodes_now)
        argv = ("scontrol", *" ; ".join(lines).split(" "))
        (action_id,) = plan_actions(session, [ActionSpec(
            kind=ActionKind.SIZE_RELEASE, job_ids=(sized.job_id,), argv=argv, cycle_id=cycle_id,
            decision_id=decision_id)], at=self.clock())
        *update, release = lines
        # scontrol reading stdin exits 0 even when a line fails (its stderr says so) and goes
        # on to the next line: the release runs only once the update was taken.
        result = self.runner.run(["scontrol"], input="".join(line + "\n" for line in update))
        ok = result.ok and not result.stderr.strip()
        if ok:
            result = self.runner.run(["scontrol"], input=release + "\n")
            ok = result.ok and not result.stderr.strip()
        finish_actions(session, [ActionOutcome(
            action_id=action_id, exit_code=result.returncode, output=result.stderr.strip(),
            status=ActionStatus.DONE if ok else ActionStatus.FAILED)], at=self.clock())
        if not ok:
            log.warning("sizing job %s refused: %s", sized.job_id,
                        (result.stderr.strip() or f"exit {result.returncode}")[:300])
        return ok


def _minimum(job: JobView, settings: SizingConfig, nodes: Sequence[NodeView]) -> Sized | None:
    """The range minimum on one node of the job's partition, without partition limits (used
    only after `max_wait_cycles`), never above `[sizing] max_gpus`: the site's cap is all that
    bounds a count set as operator here."""
    it = job.intent
    lo = min(max((it.gpus_min if it else None) or 1, 1), settings.max_gpus)
    members = [n for n in nodes if job.partition in n.partitions]
    cpus = cpus_per_node(lo, settings.cpus_per_gpu, members)
    if cpus is None:
        return None
    return Sized(job_id=job.id, gpus=lo, per_node=lo, nodes=1, cpus_per_node=cpus,
                 why=f"the range minimum: not sized within {settings.max_wait_cycles} cycles")


def unfinished_sizing(session: Session, job_ids: Sequence[JobId]) -> list[JobId]:
    """Of `job_ids`, those whose latest SIZE_RELEASE action did not finish DONE (of the actions
    planned since the job's submit time: an older one was for another job of the same id)."""
    if not job_ids:
        return []
    # Only a job with a SIZE_RELEASE action not DONE can be one: found through the status
    # index (nearly always none), before the query over every job asked about.
    unfinished = [s for s in ActionStatus if s is not ActionStatus.DONE]
    if session.execute(select(_actions.c.id).where(
            _actions.c.status.in_(unfinished),
            _actions.c.kind == ActionKind.SIZE_RELEASE).limit(1)).first() is None:
        return []
    rows = session.execute(
        select(_action_jobs.c.job_id, _actions.c.status)
        .join(_actions, _actions.c.id == _action_jobs.c.action_id)
        .join(_jobs, _jobs.c.job_id == _action_jobs.c.job_id)
        .where(_actions.c.kind == ActionKind.SIZE_RELEASE,
               _actions.c.started_at >= _jobs.c.submit_time,
               _action_jobs.c.job_id.in_(list(job_ids)))
        .order_by(_actions.c.id)
    ).all()
    last: dict[str, ActionStatus] = {}
    for job_id, status in rows:
        last[job_id] = status
    return [JobId(j) for j, st in last.items() if st is not ActionStatus.DONE]


def sized_cpus_per_gpu(session: Session, job_ids: Sequence[JobId]) -> dict[JobId, int]:
    """Of `job_ids`, those the daemon sized (a SIZE_RELEASE action DONE), each with the CPUs per
    GPU it was given (`cpus_per_gpu_of` its latest such action)."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(_action_jobs.c.job_id, _actions.c.argv)
        .join(_actions, _actions.c.id == _action_jobs.c.action_id)
        .where(_actions.c.kind == ActionKind.SIZE_RELEASE,
               _actions.c.status == ActionStatus.DONE,
               _action_jobs.c.job_id.in_(list(job_ids)))
        .order_by(_actions.c.id)
    ).all()
    out: dict[JobId, int] = {}
    for job_id, argv in rows:
        ratio = cpus_per_gpu_of(argv)
        if ratio is not None:
            out[JobId(job_id)] = ratio
    return out


def cpus_per_gpu_of(argv: Sequence[str]) -> int | None:
    """A SIZE_RELEASE action's argv (`Sized.lines`) → MinCPUsNode over the GPUs per node, at
    least 1; None if it does not have both."""
    fields = dict(w.split("=", 1) for w in argv if isinstance(w, str) and "=" in w)
    cpus = re.fullmatch(r"[0-9]{1,9}", fields.get("MinCPUsNode", ""))
    per_node = re.fullmatch(r"gres:gpu:([0-9]{1,9})", fields.get("TresPerNode", ""))
    if cpus is None or per_node is None or int(per_node.group(1)) == 0:
        return None
    return max(1, int(cpus.group(0)) // int(per_node.group(1)))
