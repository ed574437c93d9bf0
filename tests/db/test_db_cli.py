"""`slurm-rl db upgrade` / `current`, in-process (CliRunner) and as the installed command."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli import main
from slurm_rl.db.migrate import head_revision

SLURM_RL = Path(sys.executable).parent / "slurm-rl"


def tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


@pytest.fixture(autouse=True)
def _no_ambient_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLURM_RL_CONFIG", raising=False)
    monkeypatch.setattr("slurm_rl.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")


def test_upgrade_creates_then_reports_current(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "dir" / "x.db"
    db.parent.mkdir(parents=True)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "upgrade", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert f"to revision {head_revision()}" in result.output
    assert {"jobs", "actions", "alembic_version"} <= tables(db)
    result = runner.invoke(main, ["db", "upgrade", "--db", str(db)])
    assert result.exit_code == 0 and "already at revision" in result.output
    result = runner.invoke(main, ["db", "current", "--db", str(db)])
    assert result.exit_code == 0 and result.output.strip() == f"{head_revision()} (head)"


def test_the_path_comes_from_the_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "etc" / "slurm-rl.toml"
    cfg.parent.mkdir()
    (tmp_path / "state").mkdir()
    cfg.write_text('[database]\npath = "../state/rl.db"\n')
    result = CliRunner().invoke(main, ["db", "upgrade", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    assert "jobs" in tables(tmp_path / "state" / "rl.db")


def test_the_path_comes_from_the_environment(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[database]\npath = "{tmp_path / "env.db"}"\n')
    monkeypatch.setenv("SLURM_RL_CONFIG", str(cfg))
    assert CliRunner().invoke(main, ["db", "upgrade"]).exit_code == 0
    assert (tmp_path / "env.db").is_file()
    # --db overrides the config.
    result = CliRunner().invoke(main, ["db", "upgrade", "--db", str(tmp_path / "o.db")])
    assert result.exit_code == 0
    assert (tmp_path / "o.db").is_file()


def test_a_bad_config_is_one_line_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[database]\npth = "x.db"\n')
    result = CliRunner().invoke(main, ["db", "upgrade", "--config", str(cfg)])
    assert result.exit_code == 1
    assert ("unknown key 'pth' in [database] (valid keys: path, prune_batch, retention_days)"
            in result.output)
    assert len(result.output.strip().splitlines()) == 1


def test_current_on_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    result = CliRunner().invoke(main, ["db", "current", "--db", str(db)])
    assert result.exit_code == 1 and "no database at" in result.output
    assert not db.exists()


def test_current_on_an_old_or_foreign_file(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    sqlite3.connect(db).close()
    result = CliRunner().invoke(main, ["db", "current", "--db", str(db)])
    assert result.exit_code == 0 and result.output.startswith("none (newest is")


def test_installed_command_works_from_any_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    db = tmp_path / "state" / "x.db"
    db.parent.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SLURM_RL_CONFIG"}
    proc = subprocess.run([str(SLURM_RL), "db", "upgrade", "--db", str(db)], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([str(SLURM_RL), "db", "current", "--db", str(db)], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{head_revision()} (head)"
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        con.close()


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("this is not SQLite\n" * 100)
    for command in ("upgrade", "current"):
        result = CliRunner().invoke(main, ["db", command, "--db", str(bogus)])
        assert result.exit_code == 1
        assert result.output.strip() == f"Error: {bogus}: not an SQLite database"
        assert len(result.output.strip().splitlines()) == 1
