"""The daemon's cycle: poll → persist → decide → record → act → restarts → prune, and the
loop around it.

One cycle:
  poll      squeue (-t all, so completions are seen) and sinfo (node Extra carries GPU samples)
  persist   new jobs, state changes, intent edits, node GPU samples, the gate and the claim
            checks; finish actions a crash left PLANNED (reconcile.py); one commit
  decide    policy.decide(snapshot) and the minimal change plan
  record    the decision (entries only for jobs whose value, GPU count or reason changed)
  act       actions written PLANNED and committed, then one scontrol process runs them all,
            then each is finished DONE/FAILED and committed. Dry-run stops before this.
  restarts  the policy's resizes and requeues of running elastic jobs, step by step
            (resize.py, preempt.py), and deadline-only jobs sized and released
  prune     rows past the retention

Slurm unavailable (slurmctld down): the cycle stops where it is; whatever it wrote is
consistent (an interrupted act leaves its actions PLANNED, reconciled when Slurm is back), and
`run` retries with capped exponential back-off, logging one line when Slurm goes away and one
when it is back.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session, sessionmaker

from slurm_rl.core import ClusterSnapshot, Decision, Intent, JobId, JobOrder, JobView, Policy
from slurm_rl.daemon import reconcile
from slurm_rl.daemon.actuator import (
    BatchResult,
    ChangePlan,
    PlanInputs,
    ScontrolExecutor,
    gpu_changes,
    plan_changes,
    update_field,
    without_gpus,
)
from slurm_rl.daemon.claims import ClaimChecker
from slurm_rl.daemon.gate import Admitted, Gate
from slurm_rl.daemon.handle import DaemonHandle, DaemonOptions
from slurm_rl.daemon.poll import Polled, Poller
from slurm_rl.daemon.preempt import Preempter
from slurm_rl.daemon.report import CycleReport, Timing, plan_notes
from slurm_rl.daemon.resize import Resizer
from slurm_rl.daemon.service import LoopHooks
from slurm_rl.daemon.sizing import Sizer, sized_cpus_per_gpu
from slurm_rl.daemon.store import known_site_factors, record_finished, set_notes
from slurm_rl.db.actions import (
    ActionOutcome,
    ActionSpec,
    finish_actions,
    next_cycle_id,
    pending_actions,
    plan_actions,
    record_decision,
)
from slurm_rl.db.kinds import ActionKind, ActionStatus
from slurm_rl.db.repo import UpsertResult, record_node_samples, upsert_jobs
from slurm_rl.db.retention import prune
from slurm_rl.policies.capabilities import OracleReading
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.parse import build_snapshot
from slurm_rl.slurm.runner import SlurmUnavailableError

log = logging.getLogger("slurm_rl.daemon")

FAILPOINT_ENV = "SLURM_RL_FAILPOINT"
"""Test hook: "after_plan" or "after_run" makes the daemon stop dead (sleep) at that point of
the act phase, so that a test can SIGKILL it between an action's PLANNED and DONE records."""
FAILPOINTS = ("after_plan", "after_run")


@dataclass(frozen=True, kw_only=True)
class _Seen:
    """What one cycle's persist step leaves for the rest of it."""

    cycle_id: int
    upserted: UpsertResult
    samples: int
    admitted: Admitted
    snapshot: ClusterSnapshot
    """What the policy is shown: the gated jobs, with the restarts Slurm does not show."""
    reconciled: int


@dataclass(frozen=True, kw_only=True)
class _Decided:
    decision: Decision
    waiting: tuple[JobView, ...]
    """Deadline-only jobs held until sizing.py sizes them."""
    plan: ChangePlan


@dataclass(frozen=True, kw_only=True)
class _Recorded:
    decision_id: int
    entries: int
    """Decision entries stored (only what changed since the last stored ones)."""
    keys: dict[JobId, tuple[int, int | None, str]]
    """Per job stored now: (value, GPUs, reason), remembered once committed."""
    orders: dict[JobId, JobOrder]
    """Every entry of the decision by job: once committed, what is stored for each is its key."""


@dataclass(frozen=True, kw_only=True)
class Backoff:
    initial_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0


class Daemon:
    def __init__(
        self,
        *,
        adapter: SlurmAdapter,
        executor: ScontrolExecutor,
        sessions: sessionmaker[Session],
        policy: Policy,
        options: DaemonOptions | None = None,
        clock: Callable[[], float] = time.time,
        hooks: LoopHooks | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(policy, OracleReading):
            # The daemon never binds an oracle: a live cluster has no true durations.
            raise ValueError(f"policy {policy.name!r} reads true durations: simulator only")
        self.adapter = adapter
        self.executor = executor
        self.sessions = sessions
        self.policy = policy  # rebuilt only on SIGHUP (hooks.reload)
        self.reload_requested = threading.Event()
        """Set by SIGHUP: the policy is rebuilt (a new checkpoint read) before the next cycle."""
        self.options = options or DaemonOptions()
        self.clock = clock
        self.hooks = hooks or LoopHooks()  # systemd notify/watchdog, metrics, SIGHUP reload
        self.guard = guard
        """Asked before every cycle (the database lock's `verify`: the lock file and the
        database are still the ones locked); an exception stops the daemon, exit 1."""
        self.poller = Poller(adapter)
        self._overrides: dict[JobId, Intent | None] = {}
        self.gate = Gate(adapter, self.options.grants)
        self.resizer = Resizer(executor.runner, self.options.resize, clock=clock, top=(
            update_field(self.options.actuation), self.options.scale.top),
            bottom=self.options.scale.floor)  # its commands and recovery serve preemptions too
        self.preempter = Preempter(self.resizer, enabled=self.options.resize.preempt)
        self.sizer = Sizer(executor.runner, self.options.sizing, clock=clock)
        self.claims = ClaimChecker(self.options.claims)
        self._cycle_id: int | None = None
        self._known: dict[JobId, int] | None = None
        # What was last stored per job (value, gpus, reason): unchanged entries are not stored.
        self._stored: dict[JobId, tuple[int, int | None, str]] = {}
        # The last recorded decision's entries: the same JobOrder object again (policies that
        # keep unchanged entries return them) has the key stored for it, unread.
        self._recorded: dict[JobId, JobOrder] = {}

    def reconfigure(self, *, policy: Policy | None, options: DaemonOptions) -> None:
        """handle.DaemonHandle: a new policy (None: keep it) and options from the next cycle;
        new trust grants rebuild the gate."""
        if policy is not None:
            self.policy = policy
        if options.grants != self.options.grants:
            self.gate = Gate(self.adapter, options.grants)
        if options.claims != self.options.claims:
            self.claims = ClaimChecker(options.claims)
        if options.scale != self.options.scale:
            self._recorded = {}
            # a SIGHUP may fit the band under a new fair-share weight: restarts follow it
            self.resizer.top = (update_field(options.actuation), options.scale.top)
            self.resizer.bottom = options.scale.floor
        self.options = options

    # --- one cycle ----------------------------------------------------------------------------
    def cycle(self) -> CycleReport:
        """poll -> persist (and gate) -> decide -> record -> act -> restarts -> prune."""
        t0 = time.perf_counter()
        now = self.clock()
        polled = self.poller.poll(now)
        self.hooks.polled(polled.jobs)
        t1 = time.perf_counter()
        with self.sessions() as session:
            seen = self._persist(session, polled, now)
            t2 = time.perf_counter()
            decided = self._decide(session, polled, seen)
            t3 = time.perf_counter()
            recorded = self._record_decision(session, decided.decision, seen.cycle_id, now)
            session.commit()
            self._stored.update(recorded.keys)
            self._recorded = recorded.orders
            t4 = time.perf_counter()
            batch_failed = 0
            if not self.options.dry_run and decided.plan.changes:
                batch_failed = self._act(session, decided.plan, seen.cycle_id,
                                         recorded.decision_id)
            t5 = time.perf_counter()
            self._forget_finished(seen.snapshot)
            report = self._report(polled, seen, decided, recorded, batch_failed, Timing(
                poll_s=t1 - t0, persist_s=(t2 - t1) + (t4 - t3), decide_s=t3 - t2,
                act_s=t5 - t4))
            notes = self._restart_jobs(session, seen, decided, recorded.decision_id)
            set_notes(session, recorded.decision_id,
                      [*decided.decision.notes, *plan_notes(decided.plan, report), *notes])
            session.commit()
            pruned = prune(session, now=now, retention_days=self.options.retention_days,
                           batch=self.options.prune_batch)  # retention; commits
            if pruned.total:
                log.debug("%s", pruned.line())
        return report

    def _persist(self, session: Session, polled: Polled, now: float) -> _Seen:
        """New jobs, state changes and samples stored; what the policy may believe (first
        intents only, as the site allows: gate.py); PLANNED actions a crash left finished."""
        if self._cycle_id is None:
            self._cycle_id = next_cycle_id(session)
        cycle_id = self._cycle_id
        self._cycle_id += 1
        upserted = upsert_jobs(session, polled.changed, now=now,
                               user_comments=polled.user_comments)
        samples = record_node_samples(session, polled.nodes, now=now)
        session.commit()
        self.poller.commit(polled)
        self._forget_jobs(upserted.new)  # new, or an id reused by another submission
        self._update_overrides(polled, upserted.intent_overrides)
        admitted = self.gate.admit(session, polled, self._overrides, now)
        session.commit()
        snapshot = self.resizer.annotate(  # restarts Slurm does not show (restart.py)
            session, build_snapshot(now, admitted.jobs, polled.nodes))
        snapshot = self.claims.check(  # claims held to what jobs did (claims.py)
            session, snapshot, self._finished(polled))
        reconciled = self._reconcile(session, snapshot, cycle_id)
        if self._known is None or reconciled:
            self._known = known_site_factors(session)
        return _Seen(cycle_id=cycle_id, upserted=upserted, samples=samples, admitted=admitted,
                     snapshot=snapshot, reconciled=reconciled)

    def _decide(self, session: Session, polled: Polled, seen: _Seen) -> _Decided:
        """The policy's decision and the fewest scontrol changes that carry it out."""
        snapshot, admitted = seen.snapshot, seen.admitted
        waiting = self.sizer.awaiting(session, polled, snapshot)  # sizing.py's jobs
        decision = self.policy.decide(self.sizer.unheld(self.resizer.as_submitted(snapshot),
                                                        waiting))
        # GPU counts the actuator leaves alone: jobs sizing.py sizes, jobs a resize just
        # released (restart.py, SETTLE_S); sized jobs' CPUs follow their GPUs.
        acted = without_gpus(decision, [*(j.id for j in waiting),
                                        *self.resizer.settling(session, snapshot)])
        plan = plan_changes(acted, snapshot, PlanInputs(
            mode=self.options.actuation, scale=self.options.scale,
            known_values=self._known or {}, gpus_per_job=polled.gpus_per_job,
            limits=admitted.limits, assoc=admitted.assoc,
            cpus_per_gpu=sized_cpus_per_gpu(session, gpu_changes(acted, snapshot)),
            resizes_applied=not self.options.dry_run,
            preemptions_applied=not self.options.dry_run))
        return _Decided(decision=decision, waiting=tuple(waiting), plan=plan)

    def _report(self, polled: Polled, seen: _Seen, decided: _Decided, recorded: _Recorded,
                batch_failed: int, timing: Timing) -> CycleReport:
        snapshot, plan = seen.snapshot, decided.plan
        return CycleReport(
            cycle_id=seen.cycle_id, at=snapshot.time, jobs=len(polled.jobs),
            pending=len(snapshot.pending),
            managed_pending=sum(1 for j in snapshot.pending if j.managed),
            new_jobs=len(seen.upserted.new), state_changes=len(seen.upserted.state_changes),
            samples=seen.samples, reconciled=seen.reconciled, ranked=len(decided.decision.order),
            entries_stored=recorded.entries, commands=len(plan.changes),
            jobs_updated=plan.jobs_touched, jobs_failed=batch_failed,
            skipped=len(plan.skipped), dry_run=self.options.dry_run, timing=timing,
        )

    def _restart_jobs(self, session: Session, seen: _Seen, decided: _Decided,
                      decision_id: int) -> list[str]:
        """Resizes and preemptions of running elastic jobs, and deadline-only jobs sized and
        released (in a dry run: what would be done); their notes."""
        snapshot, admitted, decision = seen.snapshot, seen.admitted, decided.decision
        dry, cycle_id = self.options.dry_run, seen.cycle_id
        notes = [] if dry else self.resizer.step(
            session, decision.resizes, snapshot, limits=admitted.limits,
            assoc=admitted.assoc, cycle_id=cycle_id, decision_id=decision_id,
            restarting=self.preempter.in_flight).notes()
        notes += [] if dry else self.preempter.step(
            session, decision.preemptions, snapshot, cycle_id=cycle_id,
            decision_id=decision_id).notes()
        sizing = self.sizer.plan(decision, list(decided.waiting), snapshot,
                                 limits=admitted.limits, assoc=admitted.assoc)
        notes += sizing.notes() if dry else self.sizer.apply(
            session, sizing, snapshot.jobs, cycle_id=cycle_id, decision_id=decision_id)
        return notes

    def _finished(self, polled: Polled) -> list[JobView]:
        """Finished jobs in the daemon's scope (the gate shows the policy none), with the
        intent the daemon believed of each: the first one seen; a tag added later is not."""
        out = []
        for j in polled.jobs:
            if j.state.is_finished and j.managed and j.intent is not None:
                if j.id in self._overrides:
                    first = self._overrides[j.id]
                    if first is None:
                        continue
                    j = replace(j, intent=first)
                out.append(j)
        return out

    def _update_overrides(self, polled: Polled,
                          overrides: Mapping[JobId, Intent | None]) -> None:
        for job in polled.changed:
            if job.id in overrides:
                self._overrides[job.id] = overrides[job.id]
            else:
                self._overrides.pop(job.id, None)
        live = {j.id for j in polled.jobs}
        for job_id in [j for j in self._overrides if j not in live]:
            del self._overrides[job_id]

    def _record_decision(self, session: Session, decision: Decision, cycle_id: int, now: float
                         ) -> _Recorded:
        """Store the decision with entries only for jobs whose value, GPUs or reason changed
        (`explain` shows a job's latest entry); returns its id, the entries stored, and the
        keys to remember once committed."""
        changed = []
        keys: dict[JobId, tuple[int, int | None, str]] = {}
        last, stored_keys, value = self._recorded, self._stored, self.options.scale.value
        orders: dict[JobId, JobOrder] = {}
        for o in decision.order:
            job_id = o.job_id
            orders[job_id] = o
            if last.get(job_id) is o:
                continue  # recorded last cycle: its key is the stored one
            key = (value(o.rank), o.gpus, o.reason)
            if stored_keys.get(job_id) != key:
                keys[job_id] = key
                changed.append(o)
        kept = replace(decision, order=tuple(changed))
        decision_id = record_decision(session, kept, cycle_id=cycle_id, at=now,
                                      dry_run=self.options.dry_run)
        stored = len(changed) + len(decision.resizes) + len(decision.preemptions)
        return _Recorded(decision_id=decision_id, entries=stored, keys=keys, orders=orders)

    def _act(self, session: Session, plan: ChangePlan, cycle_id: int, decision_id: int) -> int:
        """Run the plan's changes: PLANNED rows first, one scontrol, then DONE/FAILED rows."""
        changes = plan.changes
        specs = [ActionSpec(kind=c.kind, job_ids=c.job_ids, argv=c.argv, cycle_id=cycle_id,
                            decision_id=decision_id) for c in changes]
        ids = plan_actions(session, specs, at=self.clock())
        self._failpoint("after_plan")
        batch = self.executor.run(changes)
        self._failpoint("after_run")
        if batch.result.controller_unavailable:
            # Unknown which lines reached slurmctld: the rows stay PLANNED and are reconciled
            # against what Slurm shows once it is back.
            raise SlurmUnavailableError(batch.result)
        return self._finish(session, batch, ids, cycle_id, decision_id)

    def _finish(self, session: Session, batch: BatchResult, ids: Sequence[int], cycle_id: int,
                decision_id: int) -> int:
        now = self.clock()
        known = self._known if self._known is not None else {}
        outcomes: list[ActionOutcome] = []
        failed_total = 0
        for action_id, out in zip(ids, batch.outcomes, strict=True):
            change = out.change
            failed_total += len(out.failed)
            if not out.failed:
                outcomes.append(ActionOutcome(action_id=action_id, exit_code=out.exit_code,
                                              output="", status=ActionStatus.DONE))
            elif len(out.failed) == len(change.job_ids):
                outcomes.append(ActionOutcome(action_id=action_id, exit_code=out.exit_code,
                                              output=out.output, status=ActionStatus.FAILED))
            else:
                split = record_finished(
                    session, change.only(out.failed), status=ActionStatus.FAILED,
                    output=out.output, cycle_id=cycle_id, decision_id=decision_id,
                    exit_code=out.exit_code, at=now)
                outcomes.append(ActionOutcome(
                    action_id=action_id, exit_code=out.exit_code, status=ActionStatus.DONE,
                    output=f"refused for {len(out.failed)} of {len(change.job_ids)} jobs "
                           f"(recorded as FAILED action {split}):\n{out.output}"))
            if change.kind is ActionKind.SITE_FACTOR:
                value = int(dict(change.fields)["SiteFactor"])
                for job in change.job_ids:
                    if job in out.failed:
                        known.pop(job, None)
                    else:
                        known[job] = value
        finish_actions(session, outcomes, at=now)
        if failed_total:
            log.warning("scontrol refused %d job updates: %s", failed_total,
                        "; ".join(o.output.splitlines()[0] for o in batch.outcomes
                                  if o.failed)[:400])
        return failed_total

    def _reconcile(self, session: Session, snapshot: ClusterSnapshot, cycle_id: int) -> int:
        records = pending_actions(session)
        if not records:
            return 0
        jobs = {j.id: j for j in snapshot.jobs}
        sf_ids = sorted({j for r in records if r.kind is ActionKind.SITE_FACTOR
                         for j in r.job_ids if j in jobs and jobs[j].state.is_pending})
        site_factors = reconcile.read_site_factors(self.adapter.runner, sf_ids)
        now = self.clock()
        resolutions = reconcile.resolve(records, jobs, site_factors)
        by_id = {r.id: r for r in records}
        for res in resolutions:
            if res.applied is not None and res.applied.job_ids:
                rec = by_id[res.action_id]
                record_finished(session, res.applied, status=ActionStatus.DONE,
                                output=f"applied part of interrupted action {res.action_id}",
                                cycle_id=cycle_id, decision_id=rec.decision_id,
                                exit_code=None, at=now)
        finish_actions(session, [ActionOutcome(action_id=r.action_id, exit_code=None,
                                               output=r.note, status=r.status)
                                 for r in resolutions], at=now)
        for res in resolutions:
            log.info("action %d: %s: %s", res.action_id, res.status.value, res.note)
        return len(resolutions)

    def _forget_jobs(self, job_ids: Sequence[JobId]) -> None:
        """What the daemon remembers of earlier jobs with these ids (their site factors, their
        stored decision entries) is not theirs."""
        for job_id in job_ids:
            if self._known is not None:
                self._known.pop(job_id, None)
            self._stored.pop(job_id, None)
            self._recorded.pop(job_id, None)

    def _forget_finished(self, snapshot: ClusterSnapshot) -> None:
        pending = {j.id for j in snapshot.pending}
        if self._known is not None:
            for job in self._known.keys() - pending:
                del self._known[job]
        for job in self._stored.keys() - pending:
            del self._stored[job]
        for job in self._recorded.keys() - pending:
            del self._recorded[job]

    def _failpoint(self, name: str) -> None:
        if self.options.failpoint == name:
            print(f"failpoint {name}: pausing", file=sys.stderr, flush=True)
            time.sleep(3600)

    # --- the loop -----------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, interval_s: float, once: bool = False,
            backoff: Backoff | None = None) -> int:
        """Cycle until `stop` is set (a signal); returns the exit status."""
        backoff = backoff or Backoff()
        delay = backoff.initial_s
        down_since: float | None = None
        failing = False
        while not stop.is_set():
            started = time.monotonic()
            if self.guard is not None:
                try:
                    self.guard()
                except Exception as exc:  # noqa: BLE001 (one line, whatever it is)
                    log.error("%s", _one_line(exc))
                    self.hooks.stopping()
                    return 1
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self.hooks.reload(self)  # the config and the policy (service.py)
            try:
                report = self.cycle()
            except SlurmUnavailableError as exc:
                self.hooks.cycle_failed(self, exc, unavailable=True)
                if once:
                    log.error("slurmctld unavailable: %s", _last_line(exc))
                    return 1
                if down_since is None:
                    down_since = time.monotonic()
                    log.warning("slurmctld unavailable (%s); retrying with back-off from "
                                "%.0fs up to %.0fs", _last_line(exc), delay, backoff.max_s)
                wait = delay
                delay = min(delay * backoff.factor, backoff.max_s)
            except Exception as exc:
                if stop.is_set():  # Ctrl-C reaches squeue too: its death is no failure
                    log.info("interrupted: %s", _one_line(exc))
                    break
                # One line (the traceback with -v): a full disk or a locked database is an
                # admin's problem, not a programmer's.
                trace = log.isEnabledFor(logging.DEBUG)
                self.hooks.cycle_failed(self, exc, unavailable=False)
                if once:
                    log.error("cycle failed: %s", _one_line(exc), exc_info=trace)
                    return 1
                if not failing:
                    log.error("cycle failed: %s; retrying with back-off", _one_line(exc),
                              exc_info=trace)
                failing = True
                wait = delay
                delay = min(delay * backoff.factor, backoff.max_s)
            else:
                if down_since is not None:
                    log.info("slurmctld is back after %.0fs; resuming",
                             time.monotonic() - down_since)
                elif failing:
                    log.info("cycle succeeded again; resuming")
                down_since, failing, delay = None, False, backoff.initial_s
                log.info("%s", report.line())
                self.hooks.cycle_done(self, report)
                if once:
                    return 0
                wait = max(0.0, interval_s - (time.monotonic() - started))
            if self.hooks.wait(stop, wait):  # pings the watchdog while it waits
                break
        log.info("stopping")
        self.hooks.stopping()
        return 0


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _last_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


_handle: type[DaemonHandle] = Daemon  # what service.py and metrics.py see of it (mypy checks)
