"""What Slurm would let a user ask for: GPU limits per partition, read from Slurm itself.

The daemon acts as operator, and an operator's `scontrol update` skips the checks slurmctld
applies to the job's owner. So before it changes a job's GPU count, the daemon caps the count
at what the owner could have asked for in the job's partition (docs/security.md):

- GPUs per node: the most GPUs any usable node of the partition has (from sinfo's Gres);
- nodes: the partition's `MaxNodes` (`scontrol show partition -o`), and its node count;
- where accounting runs (slurmdbd): the partition QOS's `MaxTRESPerJob` / `MaxTRESPerNode`
  for gres/gpu (`sacctmgr show qos`), and the job's association's `MaxTRES` /
  `MaxTRESPerNode` for gres/gpu (`sacctmgr show assoc`: user+account, and the account).

Parsing is pure and tolerant: a field it does not understand means "no limit from this field",
never an exception; the partition's node shape always applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from slurm_rl.core import JobView, NodeView

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

    def narrowed(self, per_job: int | None, per_node: int | None) -> PartitionLimits:
        """These limits with an association's per-job / per-node GPU limits on top."""
        def tighter(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)
        return replace(self, max_gpus_per_job=tighter(self.max_gpus_per_job, per_job),
                       max_gpus_per_node_qos=tighter(self.max_gpus_per_node_qos, per_node))


AssocLimits = Mapping[tuple[str, str, str], tuple[int | None, int | None]]
"""(user, account, partition — "" for any) → (GPUs per job, GPUs per node), from slurmdbd."""


def parse_assoc_gpu_limits(text: str) -> dict[tuple[str, str, str], tuple[int | None, int | None]]:
    """`sacctmgr -nP show assoc format=User,Account,Partition,MaxTRES,MaxTRESPerNode`: the
    associations that limit GPUs (lines without a user are account-level: user "")."""
    out: dict[tuple[str, str, str], tuple[int | None, int | None]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5:
            continue
        per_job, per_node = _gpu_limit(parts[3]), _gpu_limit(parts[4])
        if per_job is not None or per_node is not None:
            out[(parts[0], parts[1], parts[2])] = (per_job, per_node)
    return out


def job_limits(job: JobView, limits: Mapping[str, PartitionLimits] | None,
               assoc: AssocLimits | None = None) -> PartitionLimits | None:
    """What this job's owner may ask for: the partition's limits, narrowed by the most specific
    association of (user, account) — for this partition, else for any — and then by the
    account's own association. None: the partition's limits are not known."""
    if limits is None or (base := limits.get(job.partition)) is None:
        return None
    if not assoc:
        return base
    for key in ((job.user, job.account, job.partition), (job.user, job.account, ""),
                ("", job.account, job.partition), ("", job.account, "")):
        if key in assoc:
            base = base.narrowed(*assoc[key])
    return base


_FIELD = re.compile(r"(\w+)=(\S*)")
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=([0-9]{1,9})(?:,|$)")


def parse_partitions(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show partition -o` → {name: {key: value}} (one line per partition)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        name = fields.get("PartitionName")
        if name:
            out[name] = fields
    return out


def parse_qos_gpu_limits(text: str) -> dict[str, tuple[int | None, int | None]]:
    """`sacctmgr -nP show qos format=Name,MaxTRES,MaxTRESPerNode` → {qos: (per job, per node)}."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        out[parts[0]] = (_gpu_limit(parts[1]), _gpu_limit(parts[2]))
    return out


def _gpu_limit(tres: str) -> int | None:
    m = _GPU_TRES.search(tres.strip())
    return int(m.group(1)) if m else None


def _count(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"[0-9]{1,9}", text):
        return None  # UNLIMITED, N/A, or anything odd: no limit from this field
    return int(text)


def build_limits(nodes: Iterable[NodeView], partitions: Mapping[str, Mapping[str, str]],
                 qos: Mapping[str, tuple[int | None, int | None]] | None = None,
                 ) -> dict[str, PartitionLimits]:
    """Limits per partition from the node poll, the partitions, and QOS limits if any."""
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
        per_job = per_node = None
        part_qos = fields.get("QoS", "N/A")
        if qos and part_qos in qos:
            per_job, per_node = qos[part_qos]
        out[name] = PartitionLimits(
            name=name, gpus_per_node=max((n.gpus_total for n in members), default=0),
            max_nodes=max_nodes, max_gpus_per_job=per_job, max_gpus_per_node_qos=per_node)
    return out
