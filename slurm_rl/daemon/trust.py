"""What the daemon believes of a job's claimed intent (pure; docs/security.md).

A job's comment is written by its owner, so its intent is a claim. The daemon believes it only
as far as the site granted and Slurm would allow:

- service class: "critical" only for the users, accounts or QOS the site lists in [trust];
  anyone may claim "standard" or the lower "besteffort". An ungranted class becomes "standard";
- deadline: only within `deadline_horizon_s` of the job's submission; further is no deadline;
- GPU range: capped at what the owner could ask for in the job's partition (limits.py); a range
  that does not fit at all is dropped (the job keeps the count it asked sbatch for).

Each correction is a `Finding` the daemon records once per job as an event. The intent the
policy sees is the corrected one; the recorded first intent stays as the user wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_rl.config import TrustConfig
from slurm_rl.core import Intent, JobId, JobView, ServiceClass
from slurm_rl.daemon.limits import AssocLimits, PartitionLimits, job_limits
from slurm_rl.db.kinds import EventKind


@dataclass(frozen=True, kw_only=True)
class Grants:
    critical_users: frozenset[str] = frozenset()
    critical_accounts: frozenset[str] = frozenset()
    critical_qos: frozenset[str] = frozenset()
    deadline_horizon_s: float = TrustConfig().deadline_horizon_s
    accounts_enforced: bool = False
    """slurmctld enforces accounts (AccountingStorageEnforce has associations): only then can
    an account grant mean anything; without it any user names any account."""
    qos_enforced: bool = False
    """Likewise for QOS (AccountingStorageEnforce has qos)."""

    @classmethod
    def from_config(cls, cfg: TrustConfig) -> Grants:
        return cls(critical_users=frozenset(cfg.critical_users),
                   critical_accounts=frozenset(cfg.critical_accounts),
                   critical_qos=frozenset(cfg.critical_qos),
                   deadline_horizon_s=cfg.deadline_horizon_s)

    def allows_critical(self, job: JobView) -> bool:
        return (job.user in self.critical_users
                or (self.accounts_enforced and bool(job.account)
                    and job.account in self.critical_accounts)
                or (self.qos_enforced and bool(job.qos) and job.qos in self.critical_qos))

    def with_enforcement(self, enforce: str) -> Grants:
        """These grants on a cluster whose `AccountingStorageEnforce` is `enforce`."""
        words = {w.strip().lower() for w in enforce.split(",")}
        return replace(self, accounts_enforced=bool(words & {"associations", "limits", "qos",
                                                            "safe", "all"}),
                       qos_enforced=bool(words & {"qos", "all"}))


def accounting_enforce(show_config: str) -> str:
    """`AccountingStorageEnforce` from `scontrol show config` ("none" if absent)."""
    for line in show_config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageEnforce":
            return value.strip()
    return "none"


@dataclass(frozen=True, kw_only=True)
class Finding:
    job_id: JobId
    kind: EventKind
    detail: str


def vet(job: JobView, grants: Grants, limits: Mapping[str, PartitionLimits] | None,
        assoc: AssocLimits | None = None) -> tuple[JobView, tuple[Finding, ...]]:
    """The job as the policy may see it, and what was corrected. Jobs without intent pass."""
    intent = job.intent
    if intent is None:
        return job, ()
    found: list[Finding] = []
    new: Intent = intent
    if intent.service_class is ServiceClass.CRITICAL and not grants.allows_critical(job):
        new = replace(new, service_class=ServiceClass.STANDARD)
        found.append(Finding(
            job_id=job.id, kind=EventKind.CLASS_DENIED,
            detail=f"class critical not granted to user {job.user!r} (account "
                   f"{job.account!r}, qos {job.qos!r}): treated as standard"))
    if intent.deadline is not None and \
            intent.deadline - job.submit_time > grants.deadline_horizon_s:
        new = replace(new, deadline=None, hard=False)
        found.append(Finding(
            job_id=job.id, kind=EventKind.DEADLINE_DROPPED,
            detail=f"deadline {intent.deadline:.0f} is more than {grants.deadline_horizon_s:.0f}"
                   " s after submission: ignored"))
    if intent.gpus_min is not None or intent.gpus_max is not None:
        limit = job_limits(job, limits, assoc)
        top = limit.max_total() if limit is not None else None
        if top is None:
            pass  # limits unknown (not read yet): the actuator checks again before acting
        elif (intent.gpus_min or 1) > top:
            new = replace(new, gpus_min=None, gpus_max=None)
            found.append(Finding(
                job_id=job.id, kind=EventKind.GPU_LIMITED,
                detail=f"GPU range {intent.gpus_min}-{intent.gpus_max} exceeds what partition "
                       f"{job.partition!r} allows this job ({top}): range ignored"))
        elif intent.gpus_max is not None and intent.gpus_max > top:
            new = replace(new, gpus_max=top)
            found.append(Finding(
                job_id=job.id, kind=EventKind.GPU_LIMITED,
                detail=f"GPU range {intent.gpus_min}-{intent.gpus_max} capped at {top}, what "
                       f"partition {job.partition!r} allows this job"))
    if not found:
        return job, ()
    return replace(job, intent=new), tuple(found)
