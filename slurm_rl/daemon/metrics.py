"""Prometheus metrics of the daemon (prometheus-client), served over HTTP when `[metrics]
address` is set; off by default.

Counters count from this process's start (Prometheus' rate() handles restarts). Actions and
deadlines are read from the database the cycle has just written (rows finished since the last
look), so actions finished by reconciliation after a crash are counted too. The registry is the
daemon's own, not the library's global one: nothing else in the process leaks into the scrape.
docs/daemon.md lists the metrics; docs/grafana-dashboard.json draws them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from slurm_rl.config import split_address
from slurm_rl.core import JobState, JobView
from slurm_rl.daemon.guarded import GuardedPolicy
from slurm_rl.db.models import Action, Job

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from slurm_rl.daemon.handle import DaemonHandle
    from slurm_rl.daemon.report import CycleReport

log = logging.getLogger("slurm_rl.daemon")

PHASES = ("poll", "persist", "decide", "act", "total")
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_STATES = tuple(s.value for s in JobState)


class MetricsError(RuntimeError):
    """The metrics endpoint can not be served (address in use, not permitted); one line."""


class DaemonMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.cycle_seconds = Histogram(
            "slurm_rl_cycle_seconds", "Time of one daemon cycle, per phase", ["phase"],
            buckets=CYCLE_BUCKETS, registry=r)
        self.cycles = Counter("slurm_rl_cycles", "Daemon cycles by result (ok, "
                              "slurm_unavailable, error)", ["result"], registry=r)
        self.jobs = Gauge("slurm_rl_jobs", "Jobs squeue showed in the last cycle, by state",
                          ["state"], registry=r)
        self.managed_pending = Gauge("slurm_rl_managed_pending_jobs",
                                     "Pending jobs in the daemon's scope, last cycle", registry=r)
        self.decisions = Counter("slurm_rl_decisions", "Decisions made, by policy and mode",
                                 ["policy", "mode"], registry=r)
        self.ranked = Gauge("slurm_rl_ranked_jobs", "Jobs ranked by the last decision",
                            registry=r)
        self.actions = Counter("slurm_rl_actions", "scontrol actions finished, by kind and "
                               "outcome (done, failed, abandoned)", ["kind", "outcome"],
                               registry=r)
        self.job_updates = Counter("slurm_rl_job_updates", "Job updates the daemon made, by "
                                   "result (applied, refused)", ["result"], registry=r)
        self.deadlines = Counter("slurm_rl_deadlines", "Jobs with a deadline that finished: "
                                 "met (completed by it), missed (completed late), "
                                 "not_completed (failed, cancelled, timed out)", ["outcome"],
                                 registry=r)
        self.policy = Gauge("slurm_rl_policy_info", "1 for the policy deciding now",
                            ["policy"], registry=r)
        self.guard_fallback = Gauge("slurm_rl_guard_fallback", "1 while the policy's guard "
                                    "has its fallback decide (rl: jobs starve)", registry=r)
        self.guard_switches = Counter("slurm_rl_guard_switches", "Switches of the policy's "
                                      "guard to its fallback or back", registry=r)
        self.slurm_unavailable = Gauge("slurm_rl_slurm_unavailable",
                                       "1 while slurmctld does not answer", registry=r)
        self.last_cycle = Gauge("slurm_rl_last_cycle_timestamp_seconds",
                                "When the last successful cycle started (epoch)", registry=r)
        for phase in PHASES:
            self.cycle_seconds.labels(phase=phase)
        for outcome in ("met", "missed", "not_completed"):
            self.deadlines.labels(outcome=outcome)
        for result in ("ok", "slurm_unavailable", "error"):
            self.cycles.labels(result=result)
        # Rows finished from now on are counted (the daemon's clock is time.time).
        started = time.time()
        self._actions_mark: tuple[float, int] = (started, 0)
        self._jobs_mark: tuple[float, str] = (started, "")
        self._guard_mark = 0
        self._server: WSGIServer | None = None

    # --- serving -----------------------------------------------------------------------------
    def serve(self, address: str) -> tuple[str, int]:
        """Serve /metrics at "host:port" (port 0: any free one); returns the bound address."""
        host, port = split_address(address)
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise MetricsError(f"metrics.address {address!r}: can not listen ({reason})"
                               ) from None
        self._server = server
        bound = server.server_address
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- observations (LoopHooks calls these) -------------------------------------------------
    def observe_jobs(self, jobs: Sequence[JobView]) -> None:
        counts = Tally(j.state.value for j in jobs)
        for state in _STATES:
            self.jobs.labels(state=state).set(counts.get(state, 0))

    def observe_cycle(self, daemon: DaemonHandle, report: CycleReport) -> None:
        t = report.timing
        for phase, seconds in zip(PHASES, (t.poll_s, t.persist_s, t.decide_s, t.act_s,
                                           t.total_s), strict=True):
            self.cycle_seconds.labels(phase=phase).observe(seconds)
        self.cycles.labels(result="ok").inc()
        self.managed_pending.set(report.managed_pending)
        self.ranked.set(report.ranked)
        self.decisions.labels(policy=daemon.policy.name,
                              mode="dry_run" if report.dry_run else "live").inc()
        self._set_policy(daemon.policy.name)
        self._observe_guard(daemon)
        refused = report.jobs_failed
        self.job_updates.labels(result="applied").inc(max(0, report.jobs_updated - refused))
        self.job_updates.labels(result="refused").inc(refused)
        self.slurm_unavailable.set(0)
        self.last_cycle.set(report.at)
        with daemon.sessions() as session:
            self._count_actions(session)
            self._count_deadlines(session)

    def observe_failure(self, daemon: DaemonHandle, *, unavailable: bool) -> None:
        self.cycles.labels(result="slurm_unavailable" if unavailable else "error").inc()
        if unavailable:
            self.slurm_unavailable.set(1)
        self._set_policy(daemon.policy.name)

    def _observe_guard(self, daemon: DaemonHandle) -> None:
        policy = daemon.policy
        st = policy.guard_status() if isinstance(policy, GuardedPolicy) else None
        if st is None:
            return
        self.guard_fallback.set(1 if st.fallback_active else 0)
        if st.switches > self._guard_mark:
            self.guard_switches.inc(st.switches - self._guard_mark)
        self._guard_mark = st.switches

    def _set_policy(self, name: str) -> None:
        self.policy.clear()
        self.policy.labels(policy=name).set(1)

    def _count_actions(self, session: Session) -> None:
        a = Action.__table__.c
        at, last_id = self._actions_mark
        rows = session.execute(
            select(a.id, a.kind, a.status, a.finished_at)
            .where(a.finished_at.is_not(None),
                   or_(a.finished_at > at, and_(a.finished_at == at, a.id > last_id)))
        ).all()
        for action_id, kind, status, finished in rows:
            self.actions.labels(kind=kind.value, outcome=status.value).inc()
            if (finished, action_id) > self._actions_mark:
                self._actions_mark = (float(finished), int(action_id))

    def _count_deadlines(self, session: Session) -> None:
        j = Job.__table__.c
        finished = [s for s in JobState if s.is_finished]
        at, last_id = self._jobs_mark
        rows = session.execute(
            select(j.job_id, j.state, j.end_time, j.deadline, j.state_changed_at)
            .where(j.deadline.is_not(None), j.state.in_(finished),
                   or_(j.state_changed_at > at,
                       and_(j.state_changed_at == at, j.job_id > last_id)))
        ).all()
        for job_id, state, end, deadline, changed in rows:
            self.deadlines.labels(outcome=deadline_outcome(state, end, deadline)).inc()
            if (changed, job_id) > self._jobs_mark:
                self._jobs_mark = (float(changed), str(job_id))


def deadline_outcome(state: JobState, end: float | None, deadline: float) -> str:
    """met / missed for a completed job, not_completed for any other end (pure)."""
    if state is not JobState.COMPLETED or end is None:
        return "not_completed"
    return "met" if end <= deadline else "missed"

