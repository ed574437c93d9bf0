"""From a Decision to the fewest `scontrol update` commands, and running them in one process.

Planning is pure (`plan_changes`: decision + snapshot + what Slurm already has → changes);
running is one `scontrol` process fed all commands on stdin (`ScontrolExecutor`), because on
Slurm 22.05 a process per command costs more than the updates themselves (~0.7 ms a job).

Order becomes a number per job (`RankScale`): `SiteFactor` by default, which multifactor adds to
the job's priority so fair-share, QOS and age stay in play, or `Priority` in strict mode, which
replaces it. Jobs that share a value share one command (`JobId=a,b,c SiteFactor=v`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_rl.config import Actuation
from slurm_rl.core import ClusterSnapshot, Decision, JobId, JobView, id_key
from slurm_rl.daemon.limits import (
    AssocLimits,
    PartitionLimits,
    cpus_for,
    job_limits,
    outside_range,
)
from slurm_rl.db.kinds import ActionKind, EntryKind
from slurm_rl.slurm.runner import CommandResult, InputRunner

SAFE_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?")
"""The only job ids that go into an scontrol line (fed on stdin: one line per command)."""

MAX_IDS_PER_COMMAND = 1000
"""Job ids per `update` line (a line of 1000 ids is ~8 kB; scontrol took 3000 in a test)."""

NOT_APPLIED: Mapping[EntryKind, str] = {
    EntryKind.RESIZE: "not applied: a dry run resizes no running job",
    EntryKind.PREEMPT: "not applied: a dry run preempts no running job",
}
"""Why a Decision's resizes and preemptions stay on paper here: the actuator applies the order
of pending jobs and their GPU counts; resizes and preemptions of running jobs that opted in
(`--rl-elastic`) go through daemon/resize.py and daemon/preempt.py, which say why they skip
one — never in a dry run (docs/daemon.md). Shown as skip reasons and in the cycle's notes."""


def action_kind(mode: Actuation) -> ActionKind:
    return ActionKind.SITE_FACTOR if mode is Actuation.SITE_FACTOR else ActionKind.PRIORITY


def update_field(mode: Actuation) -> str:
    """`SiteFactor` (added to the multifactor priority) or `Priority` (strict: replaces it;
    Slurm then stops recalculating the job's priority, and refuses it on held jobs)."""
    return "SiteFactor" if mode is Actuation.SITE_FACTOR else "Priority"


@dataclass(frozen=True, kw_only=True)
class RankScale:
    """Rank → value, chosen so that few jobs change value when the order changes at the top.

    Ranks 0 … distinct-1 get their own values (top, top-1, …). Deeper ranks share a value per
    bucket, buckets doubling in size: [d, 2d), [2d, 4d), [4d, 8d) … get top-d, top-d-1, ….
    Inserting or removing one job near the top changes the `distinct` top values plus one job
    at each bucket edge (~log2(n/d)): about 40 updates for 10,000 pending jobs with d=32.
    Within a bucket Slurm breaks ties by job id, i.e. submit order. The value depends on the
    rank alone, so it is the same whichever cycle computes it.
    """

    top: int = 10_000
    """Value of rank 0. With SiteFactor, pick it relative to your PriorityWeight* settings:
    unmanaged jobs have SiteFactor 0."""
    distinct: int = 32
    floor: int = 1
    """Lowest value given (Priority=0 would hold a job)."""

    def __post_init__(self) -> None:
        if self.distinct < 1 or self.floor < 1 or self.top < self.floor:
            raise ValueError(f"bad rank scale {self}")

    def value(self, rank: int) -> int:
        if rank < 0:
            raise ValueError(f"negative rank {rank}")
        d = self.distinct
        if rank < d:
            v = self.top - rank
        else:
            bucket = (rank // d).bit_length() - 1
            v = self.top - d - bucket
        return max(self.floor, v)


@dataclass(frozen=True, kw_only=True)
class Change:
    """One `scontrol update` for jobs that get the same fields."""

    kind: ActionKind
    job_ids: tuple[JobId, ...]
    fields: tuple[tuple[str, str], ...]
    """(key, value) pairs, e.g. (("SiteFactor", "9999"),) or (("TresPerNode", "gres:gpu:4"),
    ("NumNodes", "2"))."""

    @property
    def command(self) -> str:
        """The line fed to scontrol's stdin."""
        return " ".join(["update", "JobId=" + ",".join(self.job_ids),
                         *(f"{k}={v}" for k, v in self.fields)])

    @property
    def argv(self) -> tuple[str, ...]:
        """The same change as a stand-alone command (what the action log stores)."""
        return ("scontrol", *self.command.split(" "))

    def only(self, job_ids: Iterable[JobId]) -> Change:
        keep = set(job_ids)
        return Change(kind=self.kind, job_ids=tuple(j for j in self.job_ids if j in keep),
                      fields=self.fields)


def parse_change(kind: ActionKind, argv: Sequence[str]) -> Change:
    """The Change an action's stored argv describes (for reconciliation)."""
    ids: tuple[JobId, ...] = ()
    fields: list[tuple[str, str]] = []
    for word in argv[2:] if argv[:2] == ("scontrol", "update") else argv:
        key, _, value = word.partition("=")
        if key == "JobId":
            ids = tuple(JobId(i) for i in value.split(",") if i)
        elif value:
            fields.append((key, value))
    return Change(kind=kind, job_ids=ids, fields=tuple(fields))


@dataclass(frozen=True, kw_only=True)
class Skip:
    job_id: JobId
    why: str
    entry: EntryKind = EntryKind.ORDER
    """The part of the decision skipped: a job's order (or GPU count), a resize, a preemption."""


@dataclass(frozen=True, kw_only=True)
class ChangePlan:
    changes: tuple[Change, ...]
    skipped: tuple[Skip, ...] = ()
    unchanged: int = 0
    """Jobs whose rank (or GPU count) Slurm already reflects."""

    @property
    def jobs_touched(self) -> int:
        return sum(len(c.job_ids) for c in self.changes)

    def not_applied_note(self) -> str | None:
        """One line on the decision's resizes and preemptions, None when it had none."""
        resizes = sum(1 for s in self.skipped if s.entry is EntryKind.RESIZE)
        preempts = sum(1 for s in self.skipped if s.entry is EntryKind.PREEMPT)
        if not (resizes or preempts):
            return None
        return (f"not applied: {resizes} resize(s) and {preempts} preemption(s) of running "
                "jobs (a dry run applies none)")


def gpu_request(total: int, node_cap: int) -> tuple[int, int] | None:
    """(GPUs per node, nodes) for `total` GPUs: one node if it fits, else whole nodes evenly;
    None if `total` can not be split evenly over ceil(total/node_cap) nodes."""
    if total < 1 or node_cap < 1:
        return None
    if total <= node_cap:
        return total, 1
    nodes = -(-total // node_cap)
    if total % nodes:
        return None
    return total // nodes, nodes


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """What `plan_changes` needs besides the decision and the snapshot: how order becomes
    values, and what Slurm and the site already say of the jobs."""

    mode: Actuation = Actuation.SITE_FACTOR
    scale: RankScale = field(default_factory=RankScale)
    max_ids: int = MAX_IDS_PER_COMMAND
    known_values: Mapping[JobId, int] = field(default_factory=dict)
    """The SiteFactor each job has in Slurm as far as we know (the last action that finished
    DONE; 22.05 shows SiteFactor nowhere for held or not-yet-eligible jobs). In strict mode the
    job's priority comes from the snapshot."""
    gpus_per_job: frozenset[JobId] = frozenset()
    """Jobs that asked for GPUs per job (--gpus): their GPU count is left alone, since
    TresPerNode would add a second, conflicting request."""
    limits: Mapping[str, PartitionLimits] | None = None
    """What each partition lets a user ask for (limits.py). A GPU count is applied only within
    what the job's owner could ask for in its partition — the daemon acts as operator, which
    skips the checks slurmctld makes for the owner — else skipped with the reason. None (not
    read, as when `scontrol show partition` fails): no GPU count is changed, since nothing says
    what the owner may ask for."""
    assoc: AssocLimits | None = None
    """Association limits (limits.py), with `limits`."""
    cpus_per_gpu: Mapping[JobId, int] = field(default_factory=dict)
    """Jobs whose CPUs the daemon chose (sizing.py: `sized_cpus_per_gpu`), with the CPUs per
    GPU they were sized with: a new GPU count carries `MinCPUsNode` at that ratio, under the
    node's CPUs and the owner's CPU limits (`cpus_for`), so CPUs follow GPUs. Other jobs keep
    the CPUs their owner asked for."""
    resizes_applied: bool = False
    """daemon/resize.py applies the decision's resizes (not a dry run): else each is listed in
    `skipped` with `NOT_APPLIED`."""
    preemptions_applied: bool = False
    """daemon/preempt.py applies the decision's preemptions (not a dry run): else as above."""


def plan_changes(decision: Decision, snapshot: ClusterSnapshot,
                 inputs: PlanInputs | None = None) -> ChangePlan:
    """The fewest changes that make Slurm reflect `decision`.

    Only managed pending jobs are touched; everything else in the decision is listed in
    `skipped` with the reason (resizes and preemptions: `NOT_APPLIED`, unless applied by
    daemon/resize.py and daemon/preempt.py, which give their own reasons).
    """
    inputs = inputs or PlanInputs()
    jobs = {j.id: j for j in snapshot.jobs}
    node_cap = max((n.gpus_total for n in snapshot.nodes if n.state.usable), default=0)
    by_value: dict[int, list[JobId]] = defaultdict(list)
    by_gpus: dict[tuple[tuple[str, str], ...], list[JobId]] = defaultdict(list)
    skipped: list[Skip] = []
    unchanged = 0
    for order in decision.order:
        job = jobs.get(order.job_id)
        why = _not_actionable(job)
        if why or job is None:
            skipped.append(Skip(job_id=order.job_id, why=why or "not in the snapshot"))
            continue
        value = inputs.scale.value(order.rank)
        if inputs.mode is Actuation.SITE_FACTOR:
            current: int | None = inputs.known_values.get(job.id)
        elif job.held:
            skipped.append(Skip(job_id=job.id, why="held: Slurm refuses Priority= on held jobs"))
            current = value
        else:
            current = job.priority
        if current != value:
            by_value[value].append(job.id)
        else:
            unchanged += 1
        if order.gpus is not None and order.gpus != job.gpus:
            gpus = _gpu_change(job, order.gpus, snapshot, node_cap, inputs)
            if isinstance(gpus, Skip):
                skipped.append(gpus)
            else:
                by_gpus[gpus].append(job.id)
    skipped += _not_applied(decision, inputs)
    changes = (*_value_changes(by_value, inputs), *_gpu_changes(by_gpus, inputs.max_ids))
    return ChangePlan(changes=changes, skipped=tuple(skipped), unchanged=unchanged)


def _gpu_change(job: JobView, gpus: int, snapshot: ClusterSnapshot, node_cap: int,
                inputs: PlanInputs) -> tuple[tuple[str, str], ...] | Skip:
    """The fields that give `job` `gpus` GPUs (its CPUs following them when sized), or why
    not."""
    cap, over, limit = node_cap, outside_range(job, gpus), None
    if not over and inputs.limits is None:
        over = "partition limits not read: GPU counts are not changed"
    elif not over:
        limit = job_limits(job, inputs.limits, inputs.assoc)
        if limit is None:
            over = f"partition {job.partition!r} has no known GPU limits"
        else:
            cap = limit.per_node_cap()
            if gpus > limit.max_total():
                over = (f"{gpus} GPUs exceed what partition {job.partition!r} "
                        f"allows this job ({limit.max_total()})")
    fields = None if over else _gpu_fields(job, gpus, cap)
    ratio = inputs.cpus_per_gpu.get(job.id)
    if fields is not None and ratio is not None:
        cpus = _cpu_field(job, gpus, cap, ratio, snapshot, limit)
        if cpus is None:
            over = (f"{gpus} GPUs: no usable node of partition "
                    f"{job.partition!r} has the GPUs per node they need")
        fields = None if cpus is None else (*fields, cpus)
    if over:
        return Skip(job_id=job.id, why=over)
    if job.id in inputs.gpus_per_job:
        return Skip(job_id=job.id, why="GPUs asked per job (--gpus): not resized")
    if fields is None:
        return Skip(job_id=job.id, why=f"{gpus} GPUs can not be split evenly over nodes of "
                    f"{cap} GPUs")
    return fields


def _not_applied(decision: Decision, inputs: PlanInputs) -> list[Skip]:
    """The decision's resizes and preemptions this plan leaves on paper (a dry run)."""
    out: list[Skip] = []
    if not inputs.resizes_applied:
        out += [Skip(job_id=r.job_id, why=NOT_APPLIED[EntryKind.RESIZE],
                     entry=EntryKind.RESIZE) for r in decision.resizes]
    if not inputs.preemptions_applied:
        out += [Skip(job_id=p.job_id, why=NOT_APPLIED[EntryKind.PREEMPT],
                     entry=EntryKind.PREEMPT) for p in decision.preemptions]
    return out


def _value_changes(by_value: Mapping[int, list[JobId]], inputs: PlanInputs) -> list[Change]:
    # Highest value first: if a cycle is cut short, the jobs that run next are already right.
    kind, name = action_kind(inputs.mode), update_field(inputs.mode)
    return [Change(kind=kind, job_ids=ids, fields=((name, str(value)),))
            for value in sorted(by_value, reverse=True)
            for ids in _chunks(sorted(by_value[value], key=id_key), inputs.max_ids)]


def _gpu_changes(by_gpus: Mapping[tuple[tuple[str, str], ...], list[JobId]], max_ids: int
                 ) -> list[Change]:
    return [Change(kind=ActionKind.TRES_PER_NODE, job_ids=ids, fields=fields)
            for fields in sorted(by_gpus)
            for ids in _chunks(sorted(by_gpus[fields], key=id_key), max_ids)]


def _not_actionable(job: JobView | None) -> str:
    if job is None:
        return "not in the snapshot"
    if not job.managed:
        return "outside the daemon's scope"
    if not job.state.is_pending:
        return f"{job.state.value.lower()}, not pending"
    if "_[" in job.id:
        return "pending array remainder: Slurm updates it as a whole"
    if not SAFE_ID.fullmatch(job.id):
        return "job id is not a plain Slurm job id: never put on an scontrol line"
    return ""


def _gpu_fields(job: JobView, total: int, node_cap: int) -> tuple[tuple[str, str], ...] | None:
    req = gpu_request(total, node_cap)
    if req is None:
        return None
    per_node, nodes = req
    fields: tuple[tuple[str, str], ...] = (("TresPerNode", f"gres:gpu:{per_node}"),)
    if nodes != job.nodes:
        fields += (("NumNodes", str(nodes)),)
    return fields


def _cpu_field(job: JobView, total: int, cap: int, ratio: int, snapshot: ClusterSnapshot,
               limit: PartitionLimits | None) -> tuple[str, str] | None:
    """("MinCPUsNode", C) for a sized job given `total` GPUs at `ratio` CPUs per GPU."""
    req = gpu_request(total, cap)
    if req is None:
        return None
    members = [n for n in snapshot.nodes if job.partition in n.partitions]
    cpus = cpus_for(req[0], req[1], ratio, members, limit)
    return None if cpus is None else ("MinCPUsNode", str(cpus))


def without_gpus(decision: Decision, job_ids: Iterable[JobId]) -> Decision:
    """`decision` with no GPU count for `job_ids` (their order stays): jobs whose GPUs another
    part of the daemon sets this cycle (sizing.py) or has just set (resize.py's settling jobs)."""
    ids = set(job_ids)
    if not ids or not any(o.job_id in ids and o.gpus is not None for o in decision.order):
        return decision
    return replace(decision, order=tuple(replace(o, gpus=None) if o.job_id in ids else o
                                         for o in decision.order))


def gpu_changes(decision: Decision, snapshot: ClusterSnapshot) -> list[JobId]:
    """Pending managed jobs whose GPU count `decision` changes (usually none)."""
    jobs = {j.id: j for j in snapshot.pending if j.managed}
    return [o.job_id for o in decision.order if o.gpus is not None and o.job_id in jobs
            and jobs[o.job_id].gpus != o.gpus]


def _chunks(ids: list[JobId], size: int) -> Iterable[tuple[JobId, ...]]:
    for i in range(0, len(ids), size):
        yield tuple(ids[i:i + size])


# --- running ----------------------------------------------------------------------------------

_FOR_JOB = re.compile(r"^(?P<msg>.*?)\s+for job (?P<id>[0-9_\[\]]+)\s*$")


@dataclass(frozen=True, kw_only=True)
class ChangeOutcome:
    change: Change
    failed: Mapping[JobId, str]
    """Jobs Slurm refused, with its message. Empty: the change took for every job."""
    exit_code: int
    output: str

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    outcomes: tuple[ChangeOutcome, ...]
    result: CommandResult
    unattributed: tuple[str, ...] = ()
    """Error lines that name no job: every change of the batch counts as failed."""


def parse_errors(stderr: str) -> tuple[dict[JobId, str], list[str]]:
    """scontrol's error lines: per-job messages ("... for job 42") and the rest."""
    per_job: dict[JobId, str] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _FOR_JOB.match(line)
        if m:
            per_job[JobId(m.group("id"))] = m.group("msg")
        else:
            other.append(line)
    return per_job, other


def attribute(changes: Sequence[Change], result: CommandResult) -> BatchResult:
    """Split one scontrol run's result over the changes it carried (pure)."""
    per_job, other = parse_errors(result.stderr)
    outcomes = []
    for change in changes:
        if other or (result.returncode != 0 and not per_job):
            msg = "; ".join(other) or f"scontrol exited {result.returncode}"
            failed = dict.fromkeys(change.job_ids, msg)
        else:
            failed = {j: per_job[j] for j in change.job_ids if j in per_job}
        text = "\n".join(f"job {j}: {m}" for j, m in failed.items())
        outcomes.append(ChangeOutcome(change=change, failed=failed,
                                      exit_code=result.returncode, output=text))
    return BatchResult(outcomes=tuple(outcomes), result=result, unattributed=tuple(other))


class ScontrolExecutor:
    """Runs changes as one `scontrol` process reading one `update` line per change."""

    def __init__(self, runner: InputRunner, *, timeout_s: float = 120.0) -> None:
        self.runner = runner
        self.timeout_s = timeout_s

    def run(self, changes: Sequence[Change]) -> BatchResult:
        script = "".join(c.command + "\n" for c in changes)
        result = self.runner.run(["scontrol"], input=script, timeout_s=self.timeout_s)
        return attribute(changes, result)
