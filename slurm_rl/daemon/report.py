"""What one daemon cycle reports: the counts and the time split it logs and stores."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_rl.daemon.actuator import ChangePlan


@dataclass(frozen=True, kw_only=True)
class Timing:
    poll_s: float = 0.0
    persist_s: float = 0.0
    decide_s: float = 0.0
    act_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.poll_s + self.persist_s + self.decide_s + self.act_s

    def line(self) -> str:
        return (f"poll {self.poll_s:.3f}s persist {self.persist_s:.3f}s "
                f"decide {self.decide_s:.3f}s act {self.act_s:.3f}s total {self.total_s:.3f}s")


@dataclass(frozen=True, kw_only=True)
class CycleReport:
    cycle_id: int
    at: float
    jobs: int
    pending: int
    managed_pending: int
    new_jobs: int = 0
    state_changes: int = 0
    samples: int = 0
    reconciled: int = 0
    ranked: int = 0
    entries_stored: int = 0
    commands: int = 0
    jobs_updated: int = 0
    jobs_failed: int = 0
    skipped: int = 0
    dry_run: bool = False
    timing: Timing = field(default_factory=Timing)

    def line(self) -> str:
        act = (f"would make {self.jobs_updated} job updates in {self.commands} commands "
               "(dry run)" if self.dry_run else
               f"made {self.jobs_updated} job updates in {self.commands} commands"
               + (f", {self.jobs_failed} refused" if self.jobs_failed else ""))
        return (f"cycle {self.cycle_id}: {self.jobs} jobs ({self.pending} pending, "
                f"{self.managed_pending} managed), {self.new_jobs} new, "
                f"{self.state_changes} state changes; ranked {self.ranked}; {act}"
                + (f"; reconciled {self.reconciled} interrupted actions"
                   if self.reconciled else "")
                + f" | {self.timing.line()}")


def plan_notes(plan: ChangePlan, report: CycleReport) -> list[str]:
    verb = "would make" if report.dry_run else "made"
    not_applied = plan.not_applied_note()
    return [f"plan: {verb} {plan.jobs_touched} job updates in {len(plan.changes)} commands; "
            f"{plan.unchanged} already right; {len(plan.skipped)} skipped",
            *([not_applied] if not_applied else []), f"timing: {report.timing.line()}"]
