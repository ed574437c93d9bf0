"""Which policies the daemon runs: never an oracle (a live cluster has no true durations)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl import policies
from slurm_rl.cli import main
from slurm_rl.daemon.actuator import ScontrolExecutor
from slurm_rl.daemon.cli import EXIT_USAGE
from slurm_rl.daemon.loop import Daemon
from slurm_rl.db.engine import make_engine, make_session_factory
from slurm_rl.policies.capabilities import OracleReading
from slurm_rl.slurm.adapter import SlurmAdapter
from slurm_rl.slurm.runner import SubprocessRunner

ORACLES = sorted(n for n in policies.names() if isinstance(policies.make(n), OracleReading))


def test_there_are_oracles_to_refuse() -> None:
    assert "sjf-oracle" in ORACLES


@pytest.mark.parametrize("name", ORACLES)
def test_the_daemon_command_refuses_an_oracle_in_one_line(name: str, tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    result = CliRunner().invoke(main, ["daemon", "--once", "--policy", name, "--db", str(db)])
    assert result.exit_code == EXIT_USAGE == 2
    assert result.output.splitlines() == [
        f"Error: policy {name!r} reads true job durations, which only the simulator knows: "
        "it can not run on a live cluster"]
    assert not db.exists()  # refused before the database is opened


@pytest.mark.parametrize("name", ORACLES)
def test_a_daemon_can_not_be_built_with_an_oracle(name: str, tmp_path: Path) -> None:
    runner = SubprocessRunner()
    engine = make_engine(tmp_path / "x.db")
    try:
        with pytest.raises(ValueError, match="reads true durations: simulator only"):
            Daemon(adapter=SlurmAdapter(runner), executor=ScontrolExecutor(runner),
                   sessions=make_session_factory(engine), policy=policies.make(name))
    finally:
        engine.dispose()
