"""Between the poll and the policy: what the daemon believes of each job, and what it remembers
of what it refused (docs/security.md).

`Gate.admit` takes the cycle's polled jobs and returns the ones the policy may see:
- the intent each job carried when first seen (a later edit or a late tag is not believed);
- the intent as the site allows it (`trust.vet`: class grants, deadline horizon, GPU range
  within the partition's limits read from Slurm);
- records the poll could not parse are stored in `quarantined_records` and logged once.
Findings become job events once per job and kind. One job that fails here is left out of the
cycle (logged, quarantined), never the cycle itself. Vetting is pure, so a job whose polled view
(the poll keeps an unchanged record's view object), first intent, grants and limits are those of
the last cycle is not vetted again: the same view goes to the policy, which keeps its own work
per view object.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from slurm_rl.core import Intent, JobId, JobView, NodeView
from slurm_rl.daemon.limits import (
    AssocLimits,
    PartitionLimits,
    TresLimits,
    build_limits,
    parse_assoc_limits,
    parse_partitions,
    parse_qos_limits,
)
from slurm_rl.daemon.poll import Polled, Quarantined
from slurm_rl.daemon.trust import Finding, Grants, accounting_enforce, vet
from slurm_rl.db.models import JobEvent
from slurm_rl.db.quarantine import record_quarantined
from slurm_rl.slurm.adapter import SlurmAdapter

log = logging.getLogger("slurm_rl.daemon")

LIMITS_REFRESH_S = 300.0
"""How often partition limits are read again (`scontrol show partition`)."""


@dataclass(frozen=True, kw_only=True)
class Admitted:
    jobs: tuple[JobView, ...]
    """Active jobs (pending and running) as the policy may see them."""
    limits: Mapping[str, PartitionLimits] | None
    assoc: AssocLimits
    findings: int
    quarantined: int


_NO_OVERRIDE = object()
"""A job whose first intent is the one it shows (not in the overrides)."""


@dataclass(frozen=True, slots=True)
class _Vetted:
    """One job through the gate: vetting is pure in the polled view, the first intent, the
    grants and the limits, so while those are the same its outcome is."""

    polled: JobView
    first: object
    """The override it was admitted with (an Intent, None, or _NO_OVERRIDE)."""
    view: JobView
    found: tuple[Finding, ...]


class Gate:
    def __init__(self, adapter: SlurmAdapter, grants: Grants) -> None:
        self.adapter = adapter
        self.grants = grants
        self._partitions: dict[str, dict[str, str]] | None = None
        self._qos: dict[str, TresLimits] = {}
        self._limits_at = float("-inf")
        self._reported: set[tuple[JobId, str]] = set()
        self._enforcement_known = False
        self._accounting = False
        self.assoc: dict[tuple[str, str, str], TresLimits] = {}
        """Association GPU and CPU limits (slurmdbd only), read with the partitions."""
        self._vetted: dict[JobId, _Vetted] = {}
        """Each job admitted last cycle: what was made of it, kept while its polled view is the
        same object with the same first intent, under the same grants and limits."""
        self._vetted_under: tuple[Grants, object, object] | None = None

    def _check_enforcement(self) -> None:
        """Account and QOS grants count only where slurmctld enforces them (docs/security.md);
        until `scontrol show config` answers, they do not count."""
        if self._enforcement_known:
            return
        res = self.adapter.runner.run(["scontrol", "show", "config"])
        if not res.ok:
            return
        self._enforcement_known = True
        enforce = accounting_enforce(res.stdout)
        self._accounting = "accounting_storage/none" not in res.stdout
        self.grants = self.grants.with_enforcement(enforce)
        g = self.grants
        ignored = [k for k, names, on in (
            ("critical_accounts", g.critical_accounts, g.accounts_enforced),
            ("critical_qos", g.critical_qos, g.qos_enforced)) if names and not on]
        if ignored:
            log.warning("[trust] %s ignored: slurmctld does not enforce accounts/QOS here "
                        "(AccountingStorageEnforce=%s), so any user could name them; grant by "
                        "critical_users", " and ".join(ignored), enforce)

    def limits(self, nodes: Iterable[NodeView], now: float) -> dict[str, PartitionLimits] | None:
        """Partition limits, read at most every LIMITS_REFRESH_S; None if never readable."""
        if now - self._limits_at >= LIMITS_REFRESH_S or self._partitions is None:
            res = self.adapter.runner.run(["scontrol", "show", "partition", "-o"])
            if res.ok:
                self._partitions = parse_partitions(res.stdout)
                self._limits_at = now
                # The job's own QOS limits it too, so with accounting every QOS is read.
                if self._accounting or any(p.get("QoS", "N/A") not in ("N/A", "")
                                           for p in self._partitions.values()):
                    q = self.adapter.runner.run(
                        ["sacctmgr", "-nP", "show", "qos", "format=Name,MaxTRES,MaxTRESPerNode"])
                    if q.ok:
                        self._qos = parse_qos_limits(q.stdout)
                    else:
                        self._unread("QOS", q.stderr, kept=bool(self._qos))
                if self._accounting:
                    a = self.adapter.runner.run(
                        ["sacctmgr", "-nP", "show", "assoc",
                         "format=User,Account,Partition,MaxTRES,MaxTRESPerNode"])
                    if a.ok:
                        self.assoc = parse_assoc_limits(a.stdout)
                    else:
                        self._unread("association", a.stderr, kept=bool(self.assoc))
            elif self._partitions is None:
                log.warning("can not read partition limits (%s): GPU counts are not changed "
                            "until they can be read", (res.stderr.strip() or "?")[:200])
        if self._partitions is None:
            return None
        return build_limits(nodes, self._partitions, self._qos)

    @staticmethod
    def _unread(what: str, stderr: str, *, kept: bool) -> None:
        # The limits last read stay (none, if never read): a slurmdbd that does not answer
        # for a while must not lift them.
        log.warning("can not read %s limits from slurmdbd (%s): %s", what,
                    (stderr.strip() or "?")[:200],
                    "keeping the ones read before" if kept else "only the partitions' apply")

    def admit(self, session: Session, polled: Polled, overrides: Mapping[JobId, Intent | None],
              now: float) -> Admitted:
        self._check_enforcement()
        n_quarantined = self._quarantine(session, (*polled.quarantined, *polled.bad_nodes), now)
        limits = self.limits(polled.nodes, now)
        under = (self.grants, limits, self.assoc)
        if under != self._vetted_under:
            self._vetted, self._vetted_under = {}, under
        vetted, kept = self._vetted, {}
        records = None
        out: list[JobView] = []
        findings: list[Finding] = []
        for job in polled.jobs:
            if job.state.is_finished:
                continue
            override = overrides.get(job.id, _NO_OVERRIDE)
            hit = vetted.get(job.id)
            if hit is not None and hit.polled is job and hit.first is override:
                kept[job.id] = hit
                out.append(hit.view)
                if hit.found:
                    findings.extend(f for f in hit.found
                                    if (f.job_id, f.kind.value) not in self._reported)
                continue
            polled_view = job
            if job.id in overrides:
                first = overrides[job.id]
                if first is None:
                    # A tag added after the job was first seen: not believed, the job stays
                    # as it was (unmanaged in the default scope).
                    if records is None:
                        records = {e.record.job_id: e.record for e in polled.entries.values()}
                    rec = records.get(job.id)
                    managed = self.adapter.scope(rec, False) if rec is not None else False
                    job = replace(job, intent=None, managed=managed, restartable=False)
                else:
                    job = replace(job, intent=first, restartable=first.elastic)
            try:
                job, found = vet(job, self.grants, limits, self.assoc)
            except Exception as exc:  # a bug here must cost one job, not the cycle
                log.warning("job %s left out of this cycle: %s: %s", job.id,
                            type(exc).__name__, exc)
                self._quarantine(session, [Quarantined(
                    job_id=job.id, reason=f"vetting failed: {type(exc).__name__}: {exc}"[:200],
                    excerpt="", first_time=True)], now)
                continue
            kept[job.id] = _Vetted(polled=polled_view, first=override, view=job, found=found)
            out.append(job)
            findings.extend(f for f in found if (f.job_id, f.kind.value) not in self._reported)
        self._vetted = kept
        self._record(session, findings, now)
        live = {j.id for j in polled.jobs}
        self._reported = {k for k in self._reported if k[0] in live}
        return Admitted(jobs=tuple(out), limits=limits, assoc=self.assoc, findings=len(findings),
                        quarantined=n_quarantined)

    def _record(self, session: Session, findings: Sequence[Finding], now: float) -> None:
        if not findings:
            return
        session.execute(JobEvent.__table__.insert(), [
            {"job_id": f.job_id, "at": now, "kind": f.kind, "old": None, "new": f.detail}
            for f in findings])
        for f in findings:
            self._reported.add((f.job_id, f.kind.value))
            log.info("job %s: %s", f.job_id, f.detail)

    def _quarantine(self, session: Session, items: Sequence[Quarantined], now: float) -> int:
        if not items:
            return 0
        for q in items:
            if q.first_time:
                log.warning("quarantined %s: %s (left alone)",
                            f"job {q.job_id}" if q.job_id else "a record", q.reason)
        record_quarantined(session, [(q.job_id, q.reason, q.excerpt) for q in items], now)
        return len(items)
