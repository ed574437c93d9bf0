"""`slurm-rl daemon`: run the scheduling loop (see loop.py). `explain` is in explain.py."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from slurm_rl.cli_common import parse_policy_options, setup_logging
from slurm_rl.config import Actuation, Config, ConfigError, Scope, load_config, seconds_option
from slurm_rl.core import Policy
from slurm_rl.daemon.collector import collect_less
from slurm_rl.daemon.guarded import GuardedPolicy
from slurm_rl.daemon.trust import Grants
from slurm_rl.slurm.adapter import ScopeRule, partitions_scope, rlsbatch_scope
from slurm_rl.slurm.conf import slurm_conf_problem
from slurm_rl.slurm.parse import SqueueRecord

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from slurm_rl.daemon.fairshare import BandFit
    from slurm_rl.daemon.handle import DaemonOptions
    from slurm_rl.db.lock import DatabaseLock
    from slurm_rl.slurm.runner import Runner


log = logging.getLogger("slurm_rl.daemon")


def scope_rule(config: Config, name_prefix: str | None = None) -> ScopeRule:
    """The configured scope, optionally narrowed to jobs whose name starts with a prefix."""
    base = (partitions_scope(frozenset(config.daemon.partitions))
            if config.daemon.scope is Scope.PARTITIONS else rlsbatch_scope)
    if not name_prefix:
        return base
    prefix = name_prefix

    def rule(record: SqueueRecord, has_intent: bool) -> bool:
        return record.name.startswith(prefix) and base(record, has_intent)

    return rule


EXIT_DATABASE = 1
"""The database can not be used (missing folder, not SQLite, not ours, newer, read-only, full)."""
EXIT_LOCKED = 3
"""Another daemon holds the database (a unit may list it in RestartPreventExitStatus)."""


EXIT_USAGE = 2
"""A command line or policy the daemon refuses (click's own usage errors exit 2 as well)."""


class PolicyRefused(click.ClickException):
    """A policy the daemon can not run (an oracle); one line, exit code EXIT_USAGE."""

    exit_code = EXIT_USAGE


class DatabaseUnusable(click.ClickException):
    """One line for the admin; exit code EXIT_DATABASE."""

    exit_code = EXIT_DATABASE


class DatabaseLocked(DatabaseUnusable):
    """Another daemon holds the database; exit code EXIT_LOCKED."""

    exit_code = EXIT_LOCKED


def check_database(path: Path, *, create: bool) -> None:
    """DatabaseUnusable (one line) for a database path `open_database` would refuse, found
    without creating or changing anything: no file where none may be created, a missing
    folder, a folder others may write, a file that is not slurm-rl's."""
    from slurm_rl.db.guard import DatabaseError, inspect_file

    if not create and not path.exists():
        raise DatabaseUnusable(f"no database at {path} (the default): name one with --db FILE "
                               "or [database] path in --config (it is created there)")
    try:
        inspect_file(path, write=True)
    except DatabaseError as exc:
        raise DatabaseUnusable(str(exc)) from None


def open_database(path: Path, *, debug: bool = False, create: bool = True
                  ) -> tuple[Engine, sessionmaker[Session], DatabaseLock]:
    """Lock the database for this daemon, create it if it is empty, and record the holder.

    With `create` false (no --db and no config file named the path) a missing database is an
    error too: nothing is created where nobody asked for it.

    Refuses (DatabaseUnusable, one line; with `debug` the original exception propagates): a
    missing folder (never created), a file that is not SQLite or not slurm-rl's (never
    migrated), a newer schema, an older one (migrating is the admin's `slurm-rl db upgrade`),
    a read-only or full disk, and a database another daemon holds (exit EXIT_LOCKED).
    """
    from slurm_rl.db.guard import DatabaseError, FileKind, describe_error, inspect_file
    from slurm_rl.db.lock import DatabaseLock, LockHeld, record_holder

    check_database(path, create=create)  # before the lock file is created beside it
    try:
        lock = DatabaseLock.acquire(path)
    except LockHeld as exc:
        raise DatabaseLocked(str(exc)) from None
    except DatabaseError as exc:
        raise DatabaseUnusable(str(exc)) from None
    try:
        from slurm_rl.db.engine import make_engine, make_session_factory
        from slurm_rl.db.migrate import head_revision, upgrade

        status = inspect_file(path, write=True)  # again: another process may have made it
        engine = make_engine(path)
        try:
            if status.kind in (FileKind.MISSING, FileKind.EMPTY):
                upgrade(engine)
                log.info("created database %s", path)
            elif status.revision != head_revision():
                raise DatabaseError(f"{path} is at revision {status.revision}, not "
                                    f"{head_revision()}: run slurm-rl db upgrade")
            sessions = make_session_factory(engine)
            with sessions() as session:
                record_holder(session, lock.holder)
        except BaseException:
            engine.dispose()
            raise
    except DatabaseError as exc:
        lock.release()
        raise DatabaseUnusable(str(exc)) from None
    except Exception as exc:  # SQLite or the OS: full disk, read-only file, I/O error
        lock.release()
        if debug:
            raise
        raise DatabaseUnusable(describe_error(path, exc)) from None
    except BaseException:
        lock.release()
        raise
    return engine, sessions, lock


def close_database(engine: Engine, sessions: sessionmaker[Session], lock: DatabaseLock
                   ) -> None:
    """Remove this daemon's holder row (best effort) and release the lock."""
    from slurm_rl.db.lock import clear_holder

    try:
        with sessions() as session:
            clear_holder(session, lock.holder)
    except Exception as exc:  # a full or read-only disk at exit: the lock still goes
        log.warning("could not clear the holder row: %s", str(exc).splitlines()[0])
    finally:
        engine.dispose()
        lock.release()


def _live_policy(name: str, options: dict[str, Any]) -> Policy:
    from slurm_rl import policies
    from slurm_rl.policies.capabilities import OracleReading

    made = policies.make(name, **options)
    if isinstance(made, OracleReading):
        raise PolicyRefused(f"policy {name!r} reads true job durations: not on a live cluster")
    return made


@dataclass(frozen=True, kw_only=True)
class PolicySpec:
    """The policy a config and the command line ask for; equal specs build equal policies."""

    name: str
    options: tuple[tuple[str, Any], ...]
    fallback: str

    def build(self) -> GuardedPolicy:
        from slurm_rl import policies

        try:
            fallback = policies.make(self.fallback)
        except (ValueError, TypeError) as exc:
            raise click.ClickException(f"fallback policy {self.fallback!r}: {exc}") from None
        opts = dict(self.options)
        return GuardedPolicy(self.name, lambda: _live_policy(self.name, opts), fallback)


def policy_spec(config: Config, name: str | None, options: Sequence[str]) -> PolicySpec:
    """The policy to run: --policy/--policy-option over [daemon]; names checked, oracles
    refused (PolicyRefused), bad options a usage error."""
    from slurm_rl import policies

    dc = config.daemon
    chosen = name or dc.policy
    try:
        opts = parse_policy_options(options or dc.policy_options)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--policy-option'") from None
    for which, pname in (("policy", chosen), ("fallback policy", dc.fallback_policy)):
        if pname not in policies.names():  # a usage error, exit 2, as in `slurm-rl simulate`
            hint = ("'--policy'" if which == "policy" and name else
                    f"[daemon] {which.replace(' ', '_')}")
            raise click.BadParameter(f"unknown {which} {pname!r} (valid: "
                                     f"{', '.join(policies.names())})", param_hint=hint)
        if pname in policies.ORACLES:
            raise PolicyRefused(f"policy {pname!r} reads true job durations, which only the "
                                "simulator knows: it can not run on a live cluster")
    try:  # options the policy refuses are a usage error now, not a fallback for ever
        policies.make(chosen, **opts)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(f"policy {chosen!r}: {' '.join(str(exc).split())[:300]}",
                                 param_hint="'--policy-option' / [daemon] policy_options"
                                 ) from None
    except Exception:  # noqa: BLE001 (a checkpoint that does not load: the fallback decides)
        pass
    return PolicySpec(name=chosen, options=tuple(sorted(opts.items())),
                      fallback=dc.fallback_policy)


def live_band(runner: Runner, options: DaemonOptions) -> BandFit:
    """OPTIONS' SiteFactor band fitted under the fair-share weight slurmctld runs with
    (`scontrol show config`; unreadable: the smallest band that keeps the order)."""
    from slurm_rl.daemon.fairshare import fit_band
    from slurm_rl.slurm.priority import ShowConfigError, parse_priority_settings

    res = runner.run(["scontrol", "show", "config"], timeout_s=60)
    if not res.ok:
        last = res.stderr.strip().splitlines()[-1:] or [f"exit {res.returncode}"]
        return fit_band(options.scale, None, options.actuation, f"scontrol: {last[0][:200]}")
    try:
        settings = parse_priority_settings(res.stdout)
    except ShowConfigError as exc:
        return fit_band(options.scale, None, options.actuation, str(exc))
    return fit_band(options.scale, settings, options.actuation)


@click.command("daemon")
@click.option("--once", is_flag=True, help="Run one cycle and exit (exit 1 if Slurm is down).")
@click.option("--interval", "interval_s", type=float, callback=seconds_option,
              help="Seconds between cycle starts, 0.1 to 86400 (default: [daemon] interval_s).")
@click.option("--policy", help="Policy name (default: [daemon] policy; see slurm-rl policies).")
@click.option("--policy-option", "policy_option", multiple=True, metavar="KEY=VALUE",
              help="An option for the policy, e.g. checkpoint=PATH (repeatable; default: "
                   "[daemon] policy_options).")
@click.option("--dry-run", is_flag=True, default=None,
              help="Shadow mode: decide and record, never change anything in Slurm.")
@click.option("--actuation", type=click.Choice([a.value for a in Actuation]),
              help="site_factor (default) or priority (strict).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Config file (default: $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="SLURM_RL_DB",
              help="Database file (default: $SLURM_RL_DB, else [database] path).")
@click.option("--only-name-prefix", metavar="PREFIX",
              help="Narrow the scope further to jobs whose name starts with PREFIX (pilots, "
                   "tests on a shared cluster).")
@click.option("-v", "--verbose", is_flag=True)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors at start.")
def daemon(once: bool, interval_s: float | None, policy: str | None,
           policy_option: tuple[str, ...], dry_run: bool | None,
           actuation: str | None, config_file: Path | None, db_path: Path | None,
           only_name_prefix: str | None, verbose: bool, debug: bool) -> None:
    """Watch Slurm, decide the order and GPU counts of pending jobs, apply them."""
    from slurm_rl.daemon.actuator import ScontrolExecutor
    from slurm_rl.daemon.loop import FAILPOINT_ENV, FAILPOINTS, Backoff, Daemon, DaemonOptions
    from slurm_rl.daemon.notify import Notifier
    from slurm_rl.daemon.service import ConfigReloader, LoopHooks
    from slurm_rl.slurm.adapter import SlurmAdapter
    from slurm_rl.slurm.runner import SubprocessRunner

    setup_logging(verbose)
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    dc = config.daemon
    failpoint = os.environ.get(FAILPOINT_ENV) or None
    if failpoint is not None and failpoint not in FAILPOINTS:
        raise click.ClickException(f"{FAILPOINT_ENV}={failpoint!r} (valid: {FAILPOINTS})")

    def spec(cfg: Config) -> PolicySpec:
        return policy_spec(cfg, policy, policy_option)

    def options_of(cfg: Config) -> DaemonOptions:
        return DaemonOptions(
            dry_run=cfg.daemon.dry_run if dry_run is None else dry_run,
            actuation=Actuation(actuation) if actuation else cfg.daemon.actuation,
            failpoint=failpoint, retention_days=cfg.database.retention_days,
            prune_batch=cfg.database.prune_batch, grants=Grants.from_config(cfg.trust),
            resize=cfg.resize, sizing=cfg.sizing, claims=cfg.claims)

    chosen = spec(config).build()  # usage errors first, then what this host lacks
    path = db_path or config.database.path
    create = db_path is not None or config.source is not None
    check_database(path, create=create)  # what the command line and config name, then the host
    conf_problem = slurm_conf_problem()  # before the first squeue, which would retry for ~60 s
    if conf_problem is not None:
        raise click.ClickException(conf_problem)
    runner = SubprocessRunner()
    running_actuation = options_of(config).actuation  # kept until restart (RESTART_KEYS)

    def options_with_band(cfg: Config, *, starting: bool) -> DaemonOptions:
        """The options, with the SiteFactor band fitted under slurmctld's live fair-share
        weight (read again on every SIGHUP: `scontrol reconfigure` may have changed it)."""
        opts = replace(options_of(cfg), actuation=running_actuation)
        fit = live_band(runner, opts)
        if fit.refusal is not None:
            if starting:
                raise click.ClickException(fit.refusal)
            log.error("SIGHUP: %s; SiteFactor band %d meanwhile, fair share first",
                      fit.refusal, fit.scale.top)
        elif fit.warning is not None:
            log.warning("%s%s", "" if starting else "SIGHUP: ", fit.warning)
        return replace(opts, scale=fit.scale)

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: finishing the cycle, then exiting", signal.Signals(signum).name)
        stop.set()

    # From here on a Ctrl-C or SIGTERM is a clean stop, also while `scontrol show config`
    # waits for a controller that is down (the signal ends that scontrol too).
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = options_with_band(config, starting=True)
    metrics = None
    if config.metrics.address:
        from slurm_rl.daemon.metrics import DaemonMetrics, MetricsError

        metrics = DaemonMetrics()
        try:
            host, port = metrics.serve(config.metrics.address)
        except MetricsError as exc:
            raise click.ClickException(str(exc)) from None
        log.info("metrics at http://%s:%d/metrics", host, port)
    hooks = LoopHooks(notifier=Notifier(), metrics=metrics, reloader=ConfigReloader(
        load=lambda: load_config(config_file), running=config, policy_key=spec,
        build_policy=lambda cfg: spec(cfg).build(),
        build_options=lambda cfg: options_with_band(cfg, starting=False)))
    engine, sessions, lock = open_database(path, debug=debug, create=create)
    the_daemon = Daemon(
        adapter=SlurmAdapter(runner, scope=scope_rule(config, only_name_prefix)),
        executor=ScontrolExecutor(runner), sessions=sessions, policy=chosen, options=options,
        hooks=hooks, guard=lock.verify,
    )
    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        log.info("SIGHUP: reloading the policy and the configuration before the next cycle")
        the_daemon.reload_requested.set()

    signal.signal(signal.SIGHUP, on_hup)
    interval = interval_s if interval_s is not None else dc.interval_s
    scope = dc.scope.value + (f" ({', '.join(dc.partitions)})" if dc.partitions else "")
    log.info("slurm-rl daemon: policy %s, %s%s, scope %s%s, every %.3gs, database %s",
             chosen.label, options.actuation.value, " DRY RUN" if options.dry_run else "",
             scope, f" and name {only_name_prefix}*" if only_name_prefix else "",
             interval, path)
    collect_less()  # collector.py: no full collection in the middle of most cycles
    try:
        code = the_daemon.run(stop, interval_s=interval, once=once,
                              backoff=Backoff(initial_s=dc.backoff_initial_s,
                                              max_s=dc.backoff_max_s,
                                              factor=dc.backoff_factor))
    finally:
        close_database(engine, sessions, lock)
        if metrics is not None:
            metrics.close()
    sys.exit(code)
