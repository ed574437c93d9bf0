"""slurm_rl.config: one TOML file, typed sections, every mistake named."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_rl.config import (
    DEFAULT_DB_PATH,
    Actuation,
    AgentConfig,
    Config,
    ConfigError,
    DaemonConfig,
    DatabaseConfig,
    MetricsConfig,
    Scope,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "slurm-rl.example.toml"


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_RL_CONFIG", raising=False)
    monkeypatch.setattr("slurm_rl.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slurm-rl.toml"
    path.write_text(text)
    return path


def error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_without_any_file() -> None:
    cfg = load_config()
    assert cfg == Config()
    assert cfg.database.path == DEFAULT_DB_PATH
    assert cfg.daemon.scope is Scope.RLSBATCH and cfg.daemon.actuation is Actuation.SITE_FACTOR
    assert cfg.daemon.interval_s > 0 and not cfg.daemon.dry_run and cfg.daemon.partitions == ()


def test_the_example_documents_every_key_with_its_default() -> None:
    cfg = load_config(EXAMPLE)
    assert dataclasses.replace(cfg, source=None) == Config()
    text = EXAMPLE.read_text()
    for section in (DatabaseConfig, DaemonConfig, AgentConfig, MetricsConfig):
        for f in dataclasses.fields(section):
            assert f"\n{f.name} = " in text, f"{f.name} missing from the example"


def test_a_full_file_is_read_with_types_and_enums(tmp_path: Path) -> None:
    path = write(tmp_path, """
        [database]
        path = "state/rl.db"
        [daemon]
        interval_s = 5
        policy = "fifo"
        dry_run = true
        scope = "partitions"
        partitions = ["gpu", "a100"]
        actuation = "priority"
        backoff_initial_s = 0.5
        backoff_max_s = 30
        backoff_factor = 3
        [agent]
        interval_s = 15.5
    """.replace("\n        ", "\n"))
    cfg = load_config(path)
    assert cfg.source == path
    assert cfg.database.path == tmp_path / "state" / "rl.db"  # relative to the file
    assert cfg.daemon == DaemonConfig(
        interval_s=5.0, policy="fifo", dry_run=True, scope=Scope.PARTITIONS,
        partitions=("gpu", "a100"), actuation=Actuation.PRIORITY, backoff_initial_s=0.5,
        backoff_max_s=30.0, backoff_factor=3.0,
    )
    assert isinstance(cfg.daemon.interval_s, float)
    assert cfg.agent.interval_s == 15.5


def test_missing_sections_keep_their_defaults() -> None:
    cfg = parse_config('[daemon]\npolicy = "fifo"\n')
    assert cfg.daemon.policy == "fifo"
    assert cfg.database == DatabaseConfig() and cfg.agent == AgentConfig()


def test_an_unknown_key_is_named_with_the_valid_ones() -> None:
    message = error("[daemon]\nintervl_s = 3\n")
    assert "unknown key 'intervl_s' in [daemon]" in message
    assert ("valid keys: actuation, backoff_factor, backoff_initial_s, backoff_max_s, dry_run, "
            "fallback_policy, interval_s, partitions, policy, policy_options, scope") in message


def test_an_unknown_section_is_named_with_the_valid_ones() -> None:
    message = error("[deamon]\ninterval_s = 3\n")
    assert message == ("unknown section [deamon] (valid sections: agent, claims, daemon, database, "
                       "metrics, resize, sizing, trust)")


def test_a_key_outside_any_section_is_refused() -> None:
    assert "unknown key 'interval_s' outside any section" in error("interval_s = 3\n")


def test_a_section_given_as_a_value_is_refused() -> None:
    assert "daemon: must be a section" in error('daemon = "x"\n')


@pytest.mark.parametrize(("text", "expected"), [
    ('[daemon]\ninterval_s = "ten"', "daemon.interval_s: expected a number, got a string"),
    ("[daemon]\ninterval_s = true", "daemon.interval_s: expected a number, got a boolean"),
    ('[daemon]\ndry_run = "yes"', "daemon.dry_run: expected true or false, got a string"),
    ("[daemon]\ndry_run = 1", "daemon.dry_run: expected true or false, got an integer"),
    ("[daemon]\npolicy = 3", "daemon.policy: expected a string, got an integer"),
    ('[daemon]\npartitions = "gpu"', "daemon.partitions: expected an array of strings"),
    ("[daemon]\npartitions = [1]", "daemon.partitions: expected an array of strings"),
    ('[daemon]\nscope = "everything"',
     "daemon.scope: unknown value 'everything' (valid: 'rlsbatch', 'partitions')"),
    ("[daemon]\nactuation = 2",
     "daemon.actuation: expected one of 'site_factor', 'priority', got an integer"),
    ("[database]\npath = 5", "database.path: expected a path"),
    ('[database]\npath = ""', "database.path: expected a path"),
    ("[agent]\ninterval_s = [1]", "agent.interval_s: expected a number, got an array"),
])
def test_wrong_types_are_named(text: str, expected: str) -> None:
    assert expected in error(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("[daemon]\ninterval_s = 0", "daemon.interval_s: must be > 0"),
    ("[agent]\ninterval_s = -1", "agent.interval_s: must be > 0"),
    ("[daemon]\nbackoff_factor = 0.5", "daemon.backoff_factor: must be 1..100"),
    ("[daemon]\nbackoff_initial_s = 10\nbackoff_max_s = 5", "daemon.backoff_max_s"),
    ('[daemon]\nscope = "partitions"', "daemon.partitions: scope = \"partitions\" needs"),
    ('[daemon]\npartitions = ["gpu"]', "daemon.partitions: only used with scope"),
    ('[daemon]\npolicy = " "', "daemon.policy: must name a policy"),
    ("[daemon]\ninterval_s = 1e300", "daemon.interval_s: must be between 0.1 and 86400"),
    ("[daemon]\ninterval_s = 1e-300", "daemon.interval_s: must be between 0.1 and 86400"),
    ("[database]\nprune_batch = 99999999999999999999", "database.prune_batch"),
    ("[database]\nretention_days = 1e308", "database.retention_days: must be between"),
    ("[agent]\ninterval_s = 1e9", "agent.interval_s: must be between"),
])
def test_bad_values_are_named(text: str, expected: str) -> None:
    assert expected in error(text)


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon]\nnope = 1\n")
    with pytest.raises(ConfigError, match=f"^{path}: unknown key 'nope'"):
        load_config(path)


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon\n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="can not read config file"):
        load_config(tmp_path / "nope.toml")


def test_the_environment_names_the_file_and_an_argument_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "env.toml"
    env_file.write_text('[daemon]\npolicy = "from-env"\n')
    arg_file = tmp_path / "arg.toml"
    arg_file.write_text('[daemon]\npolicy = "from-arg"\n')
    monkeypatch.setenv("SLURM_RL_CONFIG", str(env_file))
    assert load_config().daemon.policy == "from-env"
    assert load_config(arg_file).daemon.policy == "from-arg"


def test_the_system_file_is_used_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = tmp_path / "system.toml"
    system.write_text("[agent]\ninterval_s = 7\n")
    monkeypatch.setattr("slurm_rl.config.DEFAULT_CONFIG_PATH", system)
    assert load_config().agent.interval_s == 7.0


def test_sections_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().daemon.interval_s = 1.0  # type: ignore[misc]


def test_config_and_core_do_not_import_sqlalchemy() -> None:
    code = ("import sys, slurm_rl, slurm_rl.core, slurm_rl.config; "
            "slurm_rl.config.load_config(None); "
            "bad = [m for m in ('sqlalchemy', 'alembic', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"SLURM_RL_CONFIG": str(EXAMPLE), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("address", ["9464", ":9464", "host:port", "h:70000", "h: 1", "a b:1"])
def test_a_bad_metrics_address_names_the_key(address: str) -> None:
    assert error(f'[metrics]\naddress = "{address}"\n').startswith("metrics.address: ")


def test_metrics_addresses_v4_and_v6() -> None:
    assert parse_config('[metrics]\naddress = "[::1]:9464"\n').metrics.address == "[::1]:9464"
    assert parse_config("").metrics.address == ""
