"""What Slurm would let a user ask for: GPU and CPU limits per partition, read from Slurm itself.

The daemon acts as operator, and an operator's `scontrol update` skips the checks slurmctld
applies to the job's owner. So before it changes a job's GPU count (or, for a job it sized,
its CPUs: sizing.py), the daemon caps it at what the owner could have asked for in the job's
partition (docs/security.md):

- GPUs per node: the most GPUs any usable node of the partition has (from sinfo's Gres);
- nodes: the partition's `MaxNodes` (`scontrol show partition -o`), and its node count;
- CPUs per node: the partition's `MaxCPUsPerNode`, and the node's own CPUs (`cpus_for`, which
  sizing.py, resize.py and the actuator use for the jobs whose CPUs the daemon chose);
- where accounting runs (slurmdbd): the `MaxTRESPerJob` / `MaxTRESPerNode` for gres/gpu and
  cpu of the partition's QOS and of the job's own QOS (`sacctmgr show qos`), and the job's
  association's `MaxTRES` / `MaxTRESPerNode` for gres/gpu and cpu (`sacctmgr show assoc`:
  user+account, and the account). Slurm holds a job past any of them pending for good
  (reasons AssocMaxGRESPerJob, QOSMaxGRESPerJob), even one an operator widened.

Parsing is pure and tolerant: a field it does not understand means "no limit from this field",
never an exception; the partition's node shape always applies. `parse_qos_limits` and
`parse_assoc_limits` read GPUs and CPUs; `parse_qos_gpu_limits` and `parse_assoc_gpu_limits`
are their GPU-only forms (pairs, which `build_limits` and `job_limits` also take).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_rl.core import JobView, NodeView
from slurm_rl.policies.gpu_counts import gpu_range

_MAX = 1 << 31


@dataclass(frozen=True, kw_only=True)
class PartitionLimits:
    name: str
    gpus_per_node: int
    """Most GPUs on one usable node of the partition (0: no GPUs)."""
    max_nodes: int
    """Most nodes one job may use: MaxNodes, and never more than the partition has."""
    max_gpus_per_job: int | None = None
    """From the partition QOS (accounting only); None: no such limit."""
    max_gpus_per_node_qos: int | None = None
    max_cpus_per_node: int | None = None
    """MaxCPUsPerNode, and the QOS's (narrowed: the association's) cpu per node; None: no
    such limit."""
    max_cpus_per_job: int | None = None
    """The QOS's (narrowed: the association's) cpu per job (accounting only); None: no such
    limit."""
    job_qos: tuple[tuple[str, TresLimits], ...] = ()
    """The limits of each QOS that has any (accounting only): `job_limits` narrows a job's
    limits by its own QOS's."""

    def max_total(self) -> int:
        """The most GPUs one job could ask for in this partition."""
        total = self.per_node_cap() * self.max_nodes
        if self.max_gpus_per_job is not None:
            total = min(total, self.max_gpus_per_job)
        return total

    def per_node_cap(self) -> int:
        cap = self.gpus_per_node
        if self.max_gpus_per_node_qos is not None:
            cap = min(cap, self.max_gpus_per_node_qos)
        return cap

    def cpu_cap(self, nodes: int) -> int | None:
        """The most CPUs per node a job on `nodes` nodes may ask for (None: no limit known
        here; the node's own CPUs still apply)."""
        caps = [c for c in (self.max_cpus_per_node,
                            None if self.max_cpus_per_job is None
                            else self.max_cpus_per_job // max(nodes, 1)) if c is not None]
        return min(caps) if caps else None

    def narrowed(self, limits: TresLimits) -> PartitionLimits:
        """These limits with an association's (or a QOS's) limits on top."""
        return replace(
            self, max_gpus_per_job=_tighter(self.max_gpus_per_job, limits.gpus_per_job),
            max_gpus_per_node_qos=_tighter(self.max_gpus_per_node_qos, limits.gpus_per_node),
            max_cpus_per_job=_tighter(self.max_cpus_per_job, limits.cpus_per_job),
            max_cpus_per_node=_tighter(self.max_cpus_per_node, limits.cpus_per_node))


@dataclass(frozen=True, kw_only=True)
class TresLimits:
    """One QOS's or association's TRES limits on GPUs and CPUs (None: no limit)."""

    gpus_per_job: int | None = None
    gpus_per_node: int | None = None
    cpus_per_job: int | None = None
    cpus_per_node: int | None = None

    @classmethod
    def of(cls, value: TresLimits | tuple[int | None, int | None]) -> TresLimits:
        """A pair (GPUs per job, GPUs per node), as `parse_*_gpu_limits` give: GPUs only."""
        if isinstance(value, TresLimits):
            return value
        return cls(gpus_per_job=value[0], gpus_per_node=value[1])

    def any(self) -> bool:
        return any(v is not None for v in (self.gpus_per_job, self.gpus_per_node,
                                           self.cpus_per_job, self.cpus_per_node))


def _tighter(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


AssocLimits = Mapping[tuple[str, str, str], TresLimits | tuple[int | None, int | None]]
"""(user, account, partition — "" for any) → its limits, from slurmdbd (`parse_assoc_limits`;
a pair from `parse_assoc_gpu_limits` is GPU limits only)."""


def parse_assoc_limits(text: str) -> dict[tuple[str, str, str], TresLimits]:
    """`sacctmgr -nP show assoc format=User,Account,Partition,MaxTRES,MaxTRESPerNode`: the
    associations that limit GPUs or CPUs (lines without a user are account-level: user "")."""
    out: dict[tuple[str, str, str], TresLimits] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5:
            continue
        found = _tres_limits(parts[3], parts[4])
        if found.any():
            out[(parts[0], parts[1], parts[2])] = found
    return out


def parse_assoc_gpu_limits(text: str) -> dict[tuple[str, str, str], tuple[int | None, int | None]]:
    """`parse_assoc_limits`, GPUs only: {key: (GPUs per job, GPUs per node)}."""
    return {k: (v.gpus_per_job, v.gpus_per_node) for k, v in parse_assoc_limits(text).items()
            if v.gpus_per_job is not None or v.gpus_per_node is not None}


def job_limits(job: JobView, limits: Mapping[str, PartitionLimits] | None,
               assoc: AssocLimits | None = None) -> PartitionLimits | None:
    """What this job's owner may ask for: the partition's limits, narrowed by the job's own
    QOS, by the most specific association of (user, account) — for this partition, else for
    any — and then by the account's own association. None: the partition's limits are not
    known."""
    if limits is None or (base := limits.get(job.partition)) is None:
        return None
    for name, qos_limits in base.job_qos:
        if name == job.qos:
            base = base.narrowed(qos_limits)
    if not assoc:
        return base
    for key in ((job.user, job.account, job.partition), (job.user, job.account, ""),
                ("", job.account, job.partition), ("", job.account, "")):
        if key in assoc:
            base = base.narrowed(TresLimits.of(assoc[key]))
    return base


def outside_range(job: JobView, gpus: int) -> str:
    """Why `gpus` is not a count the job's owner allowed ("" if it is): inside the GPU range
    the job's intent declares (`gpu_counts.gpu_range`), or the job's own count without one. A
    policy's count is never trusted to respect it (the daemon acts as operator)."""
    rng = gpu_range(job)
    lo, hi = rng if rng is not None else (job.gpus, job.gpus)
    if lo <= gpus <= hi:
        return ""
    if rng is None:
        return f"{gpus} GPUs for a job without a GPU range (it asked for {job.gpus})"
    return f"{gpus} GPUs are outside the job's range {lo}-{hi}"


def cpus_per_node(per_node: int, cpus_per_gpu: int, nodes: Sequence[NodeView]) -> int | None:
    """CPUs for `per_node` GPUs on each node of `nodes` (the job's partition) that has that
    many: `cpus_per_gpu` each (0: the node's share, its CPUs over its GPUs), never more than the
    smallest such node has; None when no usable node has `per_node` GPUs."""
    fit = [n for n in nodes if n.state.usable and n.gpus_total >= per_node and n.cpus_total > 0]
    if not fit:
        return None
    most = min(n.cpus_total for n in fit)
    each = cpus_per_gpu or min(n.cpus_total // max(n.gpus_total, 1) for n in fit)
    return max(1, min(most, per_node * max(each, 1)))


def cpus_for(per_node: int, nodes: int, cpus_per_gpu: int, members: Sequence[NodeView],
             limit: PartitionLimits | None) -> int | None:
    """`cpus_per_node` for `per_node` GPUs on each of `nodes` nodes, also capped at what the
    owner may ask for (`limit`: the partition's, QOS's and association's cpu limits); at least
    1. None when no usable node of `members` has `per_node` GPUs."""
    cpus = cpus_per_node(per_node, cpus_per_gpu, members)
    cap = limit.cpu_cap(nodes) if limit is not None else None
    if cpus is None or cap is None:
        return cpus
    return max(1, min(cpus, cap))


_FIELD = re.compile(r"(\w+)=(\S*)")
_TRES = {name: re.compile(rf"(?:^|,){name}=([0-9]{{1,9}})(?:,|$)") for name in ("gres/gpu", "cpu")}


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show partition -o` → {name: {key: value}} (one line per partition)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        name = fields.get("PartitionName")
        if name:
            out[name] = fields
    return out


def parse_qos_limits(text: str) -> dict[str, TresLimits]:
    """`sacctmgr -nP show qos format=Name,MaxTRES,MaxTRESPerNode` → {qos: its limits}."""
    out: dict[str, TresLimits] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        out[parts[0]] = _tres_limits(parts[1], parts[2])
    return out


def parse_qos_gpu_limits(text: str) -> dict[str, tuple[int | None, int | None]]:
    """`parse_qos_limits`, GPUs only: {qos: (GPUs per job, GPUs per node)}."""
    return {k: (v.gpus_per_job, v.gpus_per_node) for k, v in parse_qos_limits(text).items()}


def _tres_limits(per_job: str, per_node: str) -> TresLimits:
    return TresLimits(gpus_per_job=_tres(per_job, "gres/gpu"),
                      gpus_per_node=_tres(per_node, "gres/gpu"),
                      cpus_per_job=_tres(per_job, "cpu"), cpus_per_node=_tres(per_node, "cpu"))


def _tres(tres: str, name: str) -> int | None:
    m = _TRES[name].search(tres.strip())
    return int(m.group(1)) if m else None


def _count(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"[0-9]{1,9}", text):
        return None  # UNLIMITED, N/A, or anything odd: no limit from this field
    return int(text)


def build_limits(nodes: Iterable[NodeView], partitions: Mapping[str, Mapping[str, str]],
                 qos: Mapping[str, TresLimits | tuple[int | None, int | None]] | None = None,
                 ) -> dict[str, PartitionLimits]:
    """Limits per partition from the node poll, the partitions, and QOS limits if any (a pair
    from `parse_qos_gpu_limits`: GPU limits only): the partition's QOS narrows its limits,
    and every QOS with limits is kept for the jobs that run under it (`job_limits`)."""
    job_qos = tuple(sorted(((name, lim) for name, value in (qos or {}).items()
                            if (lim := TresLimits.of(value)).any()), key=lambda q: q[0]))
    usable: dict[str, list[NodeView]] = {}
    for node in nodes:
        for part in node.partitions:
            usable.setdefault(part, [])
            if node.state.usable:
                usable[part].append(node)
    out: dict[str, PartitionLimits] = {}
    for name in set(usable) | set(partitions):
        members = usable.get(name, [])
        fields = partitions.get(name, {})
        max_nodes = min(_count(fields.get("MaxNodes")) or _MAX, len(members))
        limits = PartitionLimits(
            name=name, gpus_per_node=max((n.gpus_total for n in members), default=0),
            max_nodes=max_nodes, max_cpus_per_node=_count(fields.get("MaxCPUsPerNode")),
            job_qos=job_qos)
        part_qos = fields.get("QoS", "N/A")
        if qos and part_qos in qos:
            limits = limits.narrowed(TresLimits.of(qos[part_qos]))
        out[name] = limits
    return out
