"""What the loop tells the outside world: systemd (notify.py), Prometheus (metrics.py), and how
it reloads on SIGHUP. The loop calls these hooks at a handful of points; they never raise.

READY=1 goes out when the first cycle has ended, whether it succeeded or found slurmctld
unavailable: by then the configuration is read, the database is open (an error there exits
before READY, so `systemctl start` fails at once and says why), the policy is built and the loop
runs. Waiting for a *successful* cycle instead would make a Slurm outage at boot fail the unit
after TimeoutStartSec and restart it in a loop, when the daemon's own back-off already waits for
Slurm; STATUS= says which of the two it is.

WATCHDOG=1 is sent at the end of every cycle and, while the loop waits for the next one, after
every slice of half the watchdog period. A cycle that hangs (a Slurm command that never returns,
a database lock) sends nothing, so systemd kills the daemon after WatchdogSec.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from slurm_rl.config import Config
from slurm_rl.core import JobView, Policy
from slurm_rl.daemon.guarded import GuardedPolicy
from slurm_rl.daemon.handle import DaemonHandle, DaemonOptions
from slurm_rl.daemon.notify import Notifier

if TYPE_CHECKING:
    from slurm_rl.daemon.metrics import DaemonMetrics
    from slurm_rl.daemon.report import CycleReport

log = logging.getLogger("slurm_rl.daemon")

Reloader = Callable[[DaemonHandle], None]
"""Re-reads what SIGHUP reloads and installs it in the daemon; logs, never raises."""


def reload_policy(daemon: DaemonHandle) -> None:
    """The default reload: build the same policy afresh (a new checkpoint)."""
    if isinstance(daemon.policy, GuardedPolicy):
        daemon.policy.reload()


class LoopHooks:
    def __init__(self, *, notifier: Notifier | None = None,
                 metrics: DaemonMetrics | None = None,
                 reloader: Reloader = reload_policy) -> None:
        self.notifier = notifier or Notifier({})
        self.metrics = metrics
        self.reloader = reloader
        self._ready = False
        self._down_since: float | None = None

    # --- called by Daemon.cycle / Daemon.run -------------------------------------------------
    def polled(self, jobs: Sequence[JobView]) -> None:
        metrics = self.metrics
        if metrics is not None:
            self._guard(lambda: metrics.observe_jobs(jobs), "metrics")

    def cycle_done(self, daemon: DaemonHandle, report: CycleReport) -> None:
        self._down_since = None
        at = time.strftime("%H:%M:%S", time.localtime(report.at))
        mode = ", dry run" if report.dry_run else ""
        status = (f"cycle {report.cycle_id} at {at}: {report.jobs} jobs seen, {report.pending} "
                  f"pending ({report.managed_pending} managed), {report.jobs_updated} updated, "
                  f"{report.timing.total_s:.2f}s; policy {daemon.policy.name}{mode}")
        self._tell(status)
        metrics = self.metrics
        if metrics is not None:
            self._guard(lambda: metrics.observe_cycle(daemon, report), "metrics")

    def cycle_failed(self, daemon: DaemonHandle, exc: Exception, *, unavailable: bool) -> None:
        if unavailable and self._down_since is None:
            self._down_since = time.time()
        if unavailable and self._down_since is not None:
            since = time.strftime("%H:%M:%S", time.localtime(self._down_since))
            status = f"slurmctld unavailable since {since}; retrying with back-off"
        else:
            status = f"cycle failed ({type(exc).__name__}); retrying with back-off"
        self._tell(status)
        metrics = self.metrics
        if metrics is not None:
            self._guard(lambda: metrics.observe_failure(daemon, unavailable=unavailable),
                        "metrics")

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait up to `seconds` for `stop`, pinging the watchdog as the wait goes on; True if
        stopped."""
        every = self.notifier.ping_every_s
        if every is None:
            return stop.wait(seconds)
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return stop.is_set()
            if stop.wait(min(left, every)):
                return True
            self.notifier.watchdog()

    def reload(self, daemon: DaemonHandle) -> None:
        self.notifier.reloading()
        self._guard(lambda: self.reloader(daemon), "reload")
        self.notifier.ready(f"reloaded; policy {daemon.policy.name}")

    def stopping(self) -> None:
        self.notifier.stopping()
        self.notifier.close()

    # -----------------------------------------------------------------------------------------
    def _tell(self, status: str) -> None:
        if not self._ready:
            self._ready = True
            self.notifier.ready(status)
        else:
            self.notifier.status(status)
        self.notifier.watchdog(force=True)

    @staticmethod
    def _guard(call: Callable[[], None], what: str) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - telemetry must never stop the loop
            log.error("%s failed: %s: %s", what, type(exc).__name__, str(exc)[:300])


RESTART_KEYS = (("database", "path"), ("daemon", "interval_s"), ("daemon", "scope"),
                ("daemon", "partitions"), ("daemon", "actuation"), ("daemon", "backoff_initial_s"),
                ("daemon", "backoff_max_s"), ("daemon", "backoff_factor"), ("metrics", "address"),
                ("resize", None))
"""Settings a running daemon keeps until it restarts (SIGHUP logs that they changed); None: the
whole section (the Resizer is built once, with the daemon)."""


class ConfigReloader:
    """SIGHUP: read the config file again; a file that does not load changes nothing (one error
    line). Otherwise the policy (name, options, fallback: rebuilt, or reloaded from its
    checkpoint when unchanged), dry_run, retention and the trust grants take effect from the
    next cycle; command-line flags keep overriding the file."""

    def __init__(self, *, load: Callable[[], Config], running: Config,
                 policy_key: Callable[[Config], object],
                 build_policy: Callable[[Config], Policy],
                 build_options: Callable[[Config], DaemonOptions]) -> None:
        self.load = load
        self.running = running
        self.policy_key = policy_key
        self.build_policy = build_policy
        self.build_options = build_options

    def __call__(self, daemon: DaemonHandle) -> None:
        try:
            new = self.load()
            options = self.build_options(new)
            same_policy = self.policy_key(new) == self.policy_key(self.running)
            policy = None if same_policy else self.build_policy(new)
        except Exception as exc:  # noqa: BLE001 - ConfigError, a refused policy, ...
            log.error("SIGHUP: configuration not reloaded, the running one stays: %s",
                      " ".join(str(exc).split())[:300])
            reload_policy(daemon)
            return
        for section, key in RESTART_KEYS:
            before, after = getattr(self.running, section), getattr(new, section)
            if key is not None:
                before, after = getattr(before, key), getattr(after, key)
            if before != after:
                log.warning("SIGHUP: [%s]%s changed: takes effect when the daemon restarts",
                            section, f" {key}" if key else "")
        if policy is None:
            reload_policy(daemon)
        options = replace(options, actuation=daemon.options.actuation,
                          failpoint=daemon.options.failpoint, resize=daemon.options.resize)
        daemon.reconfigure(policy=policy, options=options)
        self.running = new
        log.info("SIGHUP: configuration reloaded from %s: policy %s%s", new.source or "defaults",
                 daemon.policy.name, ", dry run" if options.dry_run else "")
