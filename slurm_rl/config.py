"""slurm-rl's configuration: one TOML file, one frozen dataclass per section.

The file is named by `--config`, else by $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml if
it exists; with none of these every default applies. Unknown sections and keys are errors that
name the key and list the valid ones, and so are values of the wrong type: a typo must never
silently leave a default in force. docs/slurm-rl.example.toml documents every key.

A section is a frozen dataclass whose fields are the keys; the loader reads the field types
(bool, int, float, str, Path, an Enum, tuple[str, ...]), so adding a section is adding a
dataclass and a field of `Config`. Standard library only: no SQLAlchemy, no torch.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_VAR = "SLURM_RL_CONFIG"
DEFAULT_CONFIG_PATH = Path("/etc/slurm-rl/slurm-rl.toml")
DEFAULT_DB_PATH = Path("/var/lib/slurm-rl/slurm-rl.db")


class ConfigError(ValueError):
    """A configuration that can not be used; the message is one line naming the key."""


class Scope(enum.Enum):
    """Which jobs the daemon manages."""

    RLSBATCH = "rlsbatch"
    """Only jobs submitted through rlsbatch (their comment carries an intent)."""
    PARTITIONS = "partitions"
    """Every job in the listed partitions, as a priority plugin would."""


class Actuation(enum.Enum):
    """How the daemon imposes its order on pending jobs."""

    SITE_FACTOR = "site_factor"
    """`scontrol update SiteFactor=`: adds to the multifactor priority (fair-share stays)."""
    PRIORITY = "priority"
    """`scontrol update Priority=`: the daemon's order, strictly."""


@dataclass(frozen=True, kw_only=True)
class DatabaseConfig:
    path: Path = DEFAULT_DB_PATH
    """The SQLite file. A relative path is relative to the config file's folder."""
    retention_days: float = 14.0
    """Decisions, GPU samples, events and finished actions older than this are pruned by the
    daemon (in small batches, a few per cycle), so the file stays bounded under churn."""
    prune_batch: int = 2000
    """The most rows the daemon deletes per table per cycle."""

    def __post_init__(self) -> None:
        _positive("database.retention_days", self.retention_days, high=36500.0)
        if not 1 <= self.prune_batch <= 1_000_000:
            raise ConfigError(f"database.prune_batch: must be 1..1000000 (got {self.prune_batch})")


@dataclass(frozen=True, kw_only=True)
class DaemonConfig:
    interval_s: float = 10.0
    """Seconds between the starts of two cycles."""
    policy: str = "deadline"
    """Name of a registered policy (`slurm-rl policies` lists them)."""
    policy_options: tuple[str, ...] = ()
    """KEY=VALUE options for the policy, e.g. ["checkpoint=/var/lib/slurm-rl/rl.pt"]."""
    fallback_policy: str = "fifo"
    """Decides for any cycle in which the policy can not be loaded, fails, or returns a decision
    the daemon will not act on (one log line each time it changes)."""
    dry_run: bool = False
    """Shadow mode: decide and record, never act."""
    scope: Scope = Scope.RLSBATCH
    partitions: tuple[str, ...] = ()
    """With scope = "partitions": the partitions whose jobs are managed."""
    actuation: Actuation = Actuation.SITE_FACTOR
    backoff_initial_s: float = 1.0
    """First wait after a failed Slurm call; doubled (backoff_factor) up to backoff_max_s."""
    backoff_max_s: float = 60.0
    backoff_factor: float = 2.0

    def __post_init__(self) -> None:
        _seconds("daemon.interval_s", self.interval_s)
        _seconds("daemon.backoff_initial_s", self.backoff_initial_s)
        _seconds("daemon.backoff_max_s", self.backoff_max_s)
        if not self.policy.strip():
            raise ConfigError("daemon.policy: must name a policy")
        if not self.fallback_policy.strip():
            raise ConfigError("daemon.fallback_policy: must name a policy")
        for item in self.policy_options:
            key, eq, _ = item.partition("=")
            if not eq or not key.strip().isidentifier():
                raise ConfigError(f"daemon.policy_options: {item!r} is not KEY=VALUE")
        if not 1 <= self.backoff_factor <= 100:
            raise ConfigError(f"daemon.backoff_factor: must be 1..100 (got {self.backoff_factor})")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ConfigError(
                f"daemon.backoff_max_s: must be >= backoff_initial_s ({self.backoff_max_s} < "
                f"{self.backoff_initial_s})"
            )
        if self.scope is Scope.PARTITIONS and not self.partitions:
            raise ConfigError('daemon.partitions: scope = "partitions" needs at least one')
        if self.scope is Scope.RLSBATCH and self.partitions:
            raise ConfigError(
                'daemon.partitions: only used with scope = "partitions" (scope is "rlsbatch")'
            )


@dataclass(frozen=True, kw_only=True)
class TrustConfig:
    """What the site grants; everything else a job's comment claims is believed only up to the
    default. See docs/security.md."""

    critical_users: tuple[str, ...] = ()
    """Users (Slurm's UserName) whose jobs may claim the "critical" class."""
    critical_accounts: tuple[str, ...] = ()
    """Slurm accounts whose jobs may claim "critical" (only enforced by slurmctld when
    AccountingStorageEnforce covers associations; otherwise a user picks any account)."""
    critical_qos: tuple[str, ...] = ()
    """Slurm QOS whose jobs may claim "critical" (same caveat as accounts)."""
    deadline_horizon_s: float = 90 * 86400.0
    """A deadline further than this after submission is not believed (treated as none)."""

    def __post_init__(self) -> None:
        _positive("trust.deadline_horizon_s", self.deadline_horizon_s)
        if self.deadline_horizon_s > 10 * 365 * 86400:
            raise ConfigError("trust.deadline_horizon_s: at most ten years "
                              f"(got {self.deadline_horizon_s})")


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    interval_s: float = 30.0
    """Seconds between two NVML samples written to the node's Extra field."""

    def __post_init__(self) -> None:
        _seconds("agent.interval_s", self.interval_s)


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    address: str = ""
    """HOST:PORT on which the daemon serves Prometheus metrics at /metrics ("" : off, the
    default). e.g. "127.0.0.1:9464"; "[::1]:9464" for IPv6."""

    def __post_init__(self) -> None:
        if self.address:
            try:
                split_address(self.address)
            except ValueError as exc:
                raise ConfigError(f"metrics.address: {exc}") from None


def split_address(address: str) -> tuple[str, int]:
    """"HOST:PORT" or "[V6]:PORT" → (host, port); ValueError saying what is wrong."""
    host, sep, port_text = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or any(c.isspace() for c in host):
        raise ValueError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    if not (port_text.isascii() and port_text.isdigit() and 0 <= int(port_text) <= 65535):
        raise ValueError(f"{address!r}: the port must be a number 0..65535")
    return host, int(port_text)


@dataclass(frozen=True, kw_only=True)
class ResizeConfig:
    """Live resizes and preemptions of running elastic jobs (daemon/resize.py, preempt.py,
    docs/daemon.md)."""

    enabled: bool = True
    """Apply a policy's resizes of running `--rl-elastic` jobs (false: record them only)."""
    preempt: bool = True
    """Apply a policy's preemptions of running `--rl-elastic` jobs: requeue, without a GPU
    change (daemon/preempt.py; false: record them only). Other jobs are never preempted."""
    max_per_hour: int = 2
    """The most restarts one job gets in an hour, by resize and preemption together (0..60;
    0: never restart a running job)."""
    grace_s: float = 60.0
    """Seconds between the checkpoint signal and the requeue (0..3600; 0: no signal)."""
    signal: str = "USR1"
    """The checkpoint signal, sent to the batch shell and every step: "USR1" or "USR2"."""
    restart_cost_s: float = 30.0
    """What a restart costs a job, in seconds of run time: a grow must save more than this,
    a job that finishes sooner is not shrunk (0..86400). The simulator's restart delay: Slurm's
    part measured ~1.1 s on the test cluster, the rest is the job's reload (docs/simulator.md)."""
    wait_pending_s: float = 15.0
    """How long one cycle waits for a requeued job to be PENDING (1..120); a job still not
    requeued then is released by a later cycle."""

    def __post_init__(self) -> None:
        if not 0 <= self.max_per_hour <= 60:
            raise ConfigError(f"resize.max_per_hour: must be 0..60 (got {self.max_per_hour})")
        for key, value, low, high in (("grace_s", self.grace_s, 0.0, 3600.0),
                                      ("restart_cost_s", self.restart_cost_s, 0.0, 86400.0),
                                      ("wait_pending_s", self.wait_pending_s, 1.0, 120.0)):
            if not (math.isfinite(value) and low <= value <= high):
                raise ConfigError(f"resize.{key}: must be between {low:g} and {high:g} "
                                  f"(got {value:g})")
        if self.signal not in ("USR1", "USR2"):
            raise ConfigError(f"resize.signal: unknown value {self.signal!r} (valid: 'USR1', "
                              "'USR2')")


@dataclass(frozen=True, kw_only=True)
class SizingConfig:
    """Deadline-only jobs, held until the daemon sizes them (daemon/sizing.py)."""

    max_gpus: int = 8
    """The most GPUs such a job is given (1..4096); never more than its partition allows."""
    cpus_per_gpu: int = 0
    """CPUs given with each GPU (0..1024; 0: a node's CPUs shared evenly over its GPUs)."""
    cpus_from_history: bool = False
    """CPUs per GPU of the owner's last completed run of the model, if sacct knows it."""
    max_wait_cycles: int = 3
    """Cycles the daemon tries to size such a job before releasing it at 1 GPU (1..1000)."""

    def __post_init__(self) -> None:
        for key, value, low, high in (("max_gpus", self.max_gpus, 1, 4096),
                                      ("cpus_per_gpu", self.cpus_per_gpu, 0, 1024),
                                      ("max_wait_cycles", self.max_wait_cycles, 1, 1000)):
            if not low <= value <= high:
                raise ConfigError(f"sizing.{key}: must be {low}..{high} (got {value})")


@dataclass(frozen=True, kw_only=True)
class ClaimsConfig:
    """How the daemon holds jobs to the sizes they claim (steps, model, progress), and keeps
    each user's record of how right those claims were (daemon/claims.py, docs/security.md)."""

    tolerance: float = 2.0
    """A run may take up to this many times what its claims stated (1..100) before the claim
    counts as wrong: a wrong claim makes its owner's next claims not believed at all; within
    the tolerance they are stretched by how much longer than claimed the owner's jobs ran."""
    allowance_s: float = 120.0
    """Seconds a run may take beyond its claim for starting up (containers, loading data),
    0..86400."""
    remember: int = 20
    """Judged claims kept per user (1..10000): a wrong one weighs until this many newer ones."""

    def __post_init__(self) -> None:
        if not 1.0 <= self.tolerance <= 100.0:
            raise ConfigError(f"claims.tolerance: must be 1..100 (got {self.tolerance})")
        if not 0.0 <= self.allowance_s <= 86400.0:
            raise ConfigError(f"claims.allowance_s: must be 0..86400 (got {self.allowance_s})")
        if not 1 <= self.remember <= 10_000:
            raise ConfigError(f"claims.remember: must be 1..10000 (got {self.remember})")


@dataclass(frozen=True, kw_only=True)
class Config:
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    trust: TrustConfig = field(default_factory=TrustConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    resize: ResizeConfig = field(default_factory=ResizeConfig)
    sizing: SizingConfig = field(default_factory=SizingConfig)
    claims: ClaimsConfig = field(default_factory=ClaimsConfig)
    source: Path | None = None
    """The file this was read from (None: defaults only). Not a section."""


def _positive(key: str, value: float, *, low: float = 0.0, high: float = 1e9) -> None:
    """`value` in (0, high], and at least `low` when a low bound is given."""
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{key}: must be > 0 (got {value})")
    if value < low or value > high:
        raise ConfigError(f"{key}: must be between {low:g} and {high:g} (got {value:g})")


SECONDS_RANGE = (0.1, 86400.0)
"""What a daemon or agent interval and a back-off may be: a tenth of a second to a day."""


def _seconds(key: str, value: float) -> None:
    _positive(key, value, low=SECONDS_RANGE[0], high=SECONDS_RANGE[1])


def seconds_option(_ctx: object, param: object, value: float | None) -> float | None:
    """A click option callback: an interval given on the command line obeys the same rule as
    in the config file (SECONDS_RANGE), else a usage error (exit 2)."""
    import click  # (lazily: the config module itself does not need click)

    low, high = SECONDS_RANGE
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise click.BadParameter(f"must be between {low:g} and {high:g} seconds (got {value})",
                                 param=param if isinstance(param, click.Parameter) else None)
    return value


def config_path(path: str | Path | None = None) -> Path | None:
    """The config file to read: `path`, else $SLURM_RL_CONFIG, else the default if present."""
    if path is not None:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else None


def load_config(path: str | Path | None = None) -> Config:
    """Read the configuration (see `config_path`); raises ConfigError on any problem."""
    chosen = config_path(path)
    if chosen is None:
        return Config()
    try:
        text = chosen.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{chosen}: can not read config file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{chosen}: not UTF-8 text (byte {exc.start})") from None
    return parse_config(text, source=chosen)


def parse_config(text: str, *, source: Path | None = None) -> Config:
    """Parse TOML text; relative paths are resolved against `source`'s folder (else CWD)."""
    prefix = f"{source}: " if source is not None else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{prefix}invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{prefix}invalid TOML: nested too deeply") from None
    base = source.parent if source is not None else Path.cwd()
    try:
        return _build_config(data, base=base, source=source)
    except ConfigError as exc:
        raise ConfigError(f"{prefix}{exc}") from None


def _sections() -> dict[str, type[Any]]:
    hints = typing.get_type_hints(Config)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(Config)
        if dataclasses.is_dataclass(hints[f.name])
    }


def _build_config(data: dict[str, Any], *, base: Path, source: Path | None) -> Config:
    sections = _sections()
    valid = ", ".join(sorted(sections))
    built: dict[str, Any] = {}
    for name, table in data.items():
        if name not in sections:
            if isinstance(table, dict):
                raise ConfigError(f"unknown section [{name}] (valid sections: {valid})")
            raise ConfigError(f"unknown key {name!r} outside any section (valid sections: "
                              f"{valid})")
        if not isinstance(table, dict):
            raise ConfigError(f"{name}: must be a section ([{name}]), not a value")
        built[name] = _build_section(name, sections[name], table, base=base)
    return Config(**built, source=source)


def _build_section(name: str, cls: type[Any], table: dict[str, Any], *, base: Path) -> Any:
    hints = typing.get_type_hints(cls)
    keys = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, Any] = {}
    for key, raw in table.items():
        if key not in hints:
            raise ConfigError(
                f"unknown key {key!r} in [{name}] (valid keys: {', '.join(sorted(keys))})"
            )
        values[key] = _convert(f"{name}.{key}", hints[key], raw, base=base)
    try:
        return cls(**values)
    except TypeError as exc:  # only on a programming error in a section class
        raise ConfigError(f"[{name}]: {exc}") from None


def _describe(raw: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(raw), type(raw).__name__)
    text = repr(raw)
    return f"{kind} ({text if len(text) <= 40 else text[:37] + '...'})"


def _convert(key: str, hint: Any, raw: Any, *, base: Path) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(options) != 1:
            raise ConfigError(f"{key}: unsupported type {hint}")
        hint, origin = options[0], typing.get_origin(options[0])
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"{key}: expected true or false, got {_describe(raw)}")
    if hint is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        raise ConfigError(f"{key}: expected an integer, got {_describe(raw)}")
    if hint is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        raise ConfigError(f"{key}: expected a number, got {_describe(raw)}")
    if hint is str:
        if isinstance(raw, str):
            return raw
        raise ConfigError(f"{key}: expected a string, got {_describe(raw)}")
    if hint is Path:
        if isinstance(raw, str) and raw:
            path = Path(raw).expanduser()
            return path if path.is_absolute() else base / path
        raise ConfigError(f"{key}: expected a path (a non-empty string), got {_describe(raw)}")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = ", ".join(repr(m.value) for m in hint)
        if isinstance(raw, str):
            for member in hint:
                if member.value == raw:
                    return member
            raise ConfigError(f"{key}: unknown value {raw!r} (valid: {choices})")
        raise ConfigError(f"{key}: expected one of {choices}, got {_describe(raw)}")
    if origin is tuple and typing.get_args(hint) == (str, ...):
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise ConfigError(f"{key}: expected an array of strings, got {_describe(raw)}")
    raise ConfigError(f"{key}: unsupported type {hint}")
