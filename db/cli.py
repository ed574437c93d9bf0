"""`slurm-rl db`: create, migrate and inspect the database.

The file is `[database] path` from the config (`--config`, else $SLURM_RL_CONFIG, else
/etc/slurm-rl/slurm-rl.toml, else the built-in default); `--db` overrides it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_rl.config import ConfigError, load_config

_F = TypeVar("_F", bound=Callable[..., Any])


def _db_options(func: _F) -> _F:
    func = click.option(
        "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
        help="Config file (default: $SLURM_RL_CONFIG, else /etc/slurm-rl/slurm-rl.toml).",
    )(func)
    func = click.option(
        "--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
        help="Database file; overrides [database] path from the config.",
    )(func)
    return func


def _resolve(db_path: Path | None, config_file: Path | None) -> Path:
    if db_path is not None:
        return db_path
    try:
        return load_config(config_file).database.path
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _first_line(exc: BaseException) -> str:
    # SQLAlchemy appends "(Background on this error at: ...)" on a line of its own.
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


@click.group("db")
def db() -> None:
    """Create, migrate and inspect slurm-rl's SQLite database."""


@db.command("upgrade")
@_db_options
@click.argument("revision", default="head")
def upgrade_command(db_path: Path | None, config_file: Path | None, revision: str) -> None:
    """Create the database, or migrate it to REVISION (default: the newest)."""
    from .engine import make_engine
    from .migrate import upgrade

    path = _resolve(db_path, config_file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"can not create {path.parent}: {exc.strerror}") from None
    engine = make_engine(path)
    try:
        before, after = upgrade(engine, revision)
    except Exception as exc:  # one line for the admin, whatever went wrong
        raise click.ClickException(f"{path}: upgrade failed: {_first_line(exc)}") from None
    finally:
        engine.dispose()
    if before == after:
        click.echo(f"{path}: already at revision {after}")
    else:
        click.echo(f"{path}: upgraded from {before or 'an empty database'} to revision {after}")


@db.command("current")
@_db_options
def current_command(db_path: Path | None, config_file: Path | None) -> None:
    """Print the database's revision (and whether it is the newest)."""
    from .engine import make_engine
    from .migrate import current_revision, head_revision

    path = _resolve(db_path, config_file)
    if not path.is_file():
        raise click.ClickException(f"no database at {path} (create it: slurm-rl db upgrade)")
    engine = make_engine(path)
    try:
        revision = current_revision(engine)
    except Exception as exc:
        raise click.ClickException(f"{path}: {_first_line(exc)}") from None
    finally:
        engine.dispose()
    head = head_revision()
    if revision == head:
        click.echo(f"{revision} (head)")
    else:
        click.echo(f"{revision or 'none'} (newest is {head}: run slurm-rl db upgrade)")
