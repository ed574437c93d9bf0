"""The daemon's policy, with a fallback: a policy that can not be built (a checkpoint that does
not load), that raises, or that returns a decision the daemon must not act on (a rank that is
not a whole number, a job that is not pending, a GPU count that is not a positive whole number)
costs that cycle one log line, and the fallback policy decides instead. Nothing from the bad
decision is acted on. Resizes and preemptions a policy does not declare, or that name a job its
own `may_resize`/`may_preempt` rejects, are dropped with a note (contract.py), the rest of its
decision stands. `reload()` (SIGHUP) builds the policy afresh, e.g. from a new checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from slurm_rl.core import ClusterSnapshot, Decision, Policy
from slurm_rl.daemon.contract import within_capabilities
from slurm_rl.policies.capabilities import Guarding, GuardStatus

log = logging.getLogger("slurm_rl.daemon")


class DecisionRefused(ValueError):
    """A decision the daemon will not act on; the message is one line."""


def check_decision(decision: Decision, snapshot: ClusterSnapshot) -> None:
    """Raise DecisionRefused unless every entry names a pending job once, with a whole rank
    and a positive whole GPU count (or none)."""
    pending = {j.id for j in snapshot.pending}
    order = decision.order
    ids = [o.job_id for o in order]
    if len(set(ids)) == len(ids) and pending.issuperset(ids) and all(
            type(o.rank) is int and o.rank >= 0
            and (o.gpus is None or (type(o.gpus) is int and o.gpus >= 1)) for o in order):
        return  # nothing to refuse (the loop below finds the first thing that is)
    seen: set[str] = set()
    for o in decision.order:
        if o.job_id not in pending:
            raise DecisionRefused(f"ranks job {o.job_id!r}, which is not pending")
        if o.job_id in seen:
            raise DecisionRefused(f"ranks job {o.job_id!r} twice")
        seen.add(o.job_id)
        if type(o.rank) is not int or o.rank < 0:
            raise DecisionRefused(f"rank {o.rank!r} for job {o.job_id!r} is not a whole number")
        if o.gpus is not None and (type(o.gpus) is not int or o.gpus < 1):
            raise DecisionRefused(f"GPU count {o.gpus!r} for job {o.job_id!r}")


class GuardedPolicy:
    """A Policy: the configured one while it works, the fallback for any cycle it does not."""

    def __init__(self, name: str, factory: Callable[[], Policy], fallback: Policy) -> None:
        self._label = name
        self._factory = factory
        self.fallback = fallback
        self.primary: Policy | None = None
        self.name = fallback.name
        """The policy deciding now (the Policy protocol's name)."""
        self._last_error = ""
        self._guard_switches = 0
        self.reload()

    @property
    def label(self) -> str:
        """What runs, for the start-up line: "rl", or "fifo (fallback for rl)"."""
        if self.primary is not None:
            return self.primary.name
        return f"{self.fallback.name} (fallback for {self._label})"

    def reload(self) -> bool:
        """Build the configured policy afresh; on failure keep deciding with the fallback."""
        try:
            self.primary = self._factory()
            self.name = self.primary.name
        except Exception as exc:
            self.primary = None
            self.name = self.fallback.name
            self._report(f"policy {self._label!r} could not be loaded ({_one_line(exc)}); "
                         f"deciding with {self.fallback.name!r}")
            return False
        if self._last_error:
            log.info("policy %s loaded; deciding with it again", self._label)
        self._last_error = ""
        return True

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if self.primary is not None:
            try:
                decision = within_capabilities(self.primary, self.primary.decide(snapshot),
                                               snapshot)
                check_decision(decision, snapshot)
            except Exception as exc:
                self._report(f"policy {self._label!r} failed this cycle ({_one_line(exc)}); "
                             f"deciding with {self.fallback.name!r}")
            else:
                if self._last_error:
                    log.info("policy %s decides again", self._label)
                    self._last_error = ""
                self._log_guard()
                return decision
        decision = within_capabilities(self.fallback, self.fallback.decide(snapshot), snapshot)
        return Decision(policy=decision.policy, order=decision.order,
                        resizes=decision.resizes, preemptions=decision.preemptions,
                        notes=(*decision.notes, f"fallback for {self._label}: "
                               f"{self._last_error}"))

    def guard_status(self) -> GuardStatus | None:
        """The configured policy's guard (capabilities.Guarding), None if it has none."""
        p = self.primary
        return p.guard_status() if isinstance(p, Guarding) else None

    def _log_guard(self) -> None:
        """One log line per switch of the policy's guard (`rl`'s queue-health guard)."""
        st = self.guard_status()
        if st is None or st.switches == self._guard_switches:
            return
        self._guard_switches = st.switches
        if st.fallback_active:
            log.warning("guard: on for %s because %s", self._label, st.why)
        else:
            log.info("guard: off for %s (no job starves)", self._label)

    def _report(self, line: str) -> None:
        # One line per distinct failure, not one per cycle.
        if line != self._last_error:
            log.error("%s", line)
        self._last_error = line


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
