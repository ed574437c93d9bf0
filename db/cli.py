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
        envvar="SLURM_RL_DB",
        help="Database file (default: $SLURM_RL_DB, else [database] path from the config).",
    )(func)
    return func


def _resolve(db_path: Path | None, config_file: Path | None) -> Path:
    if db_path is not None:
        return db_path
    try:
        return load_config(config_file).database.path
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


EXIT_LOCKED = 3
"""A daemon (or another `db upgrade`) holds the database."""


class _Locked(click.ClickException):
    exit_code = EXIT_LOCKED


@click.group("db")
def db() -> None:
    """Create, migrate and inspect slurm-rl's SQLite database."""


@db.command("upgrade")
@_db_options
@click.option("--debug", is_flag=True, help="Show the traceback if the upgrade fails.")
@click.argument("revision", default="head")
def upgrade_command(db_path: Path | None, config_file: Path | None, revision: str,
                    debug: bool) -> None:
    """Create the database, or migrate it to REVISION (default: the newest).

    The folder must exist (it is never created). A file that is not slurm-rl's, or whose schema
    is newer than this slurm-rl, is refused untouched; so is a database a daemon holds.
    """
    from .engine import make_engine
    from .guard import DatabaseError, describe_error, inspect_file
    from .lock import DatabaseLock, LockHeld
    from .migrate import upgrade

    path = _resolve(db_path, config_file)
    try:
        inspect_file(path, write=True)
        lock = DatabaseLock.acquire(path, purpose="db upgrade")
    except LockHeld as exc:
        raise _Locked(f"{exc}: stop it before migrating") from None
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from None
    with lock:
        try:
            inspect_file(path, write=True)
        except DatabaseError as exc:
            raise click.ClickException(str(exc)) from None
        engine = make_engine(path)
        try:
            before, after = upgrade(engine, revision)
        except Exception as exc:  # one line for the admin, whatever went wrong
            if debug:
                raise
            raise click.ClickException(
                f"upgrade failed: {describe_error(path, exc)}") from None
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
    from .guard import DatabaseError, FileKind, inspect_file
    from .migrate import head_revision

    path = _resolve(db_path, config_file)
    try:
        status = inspect_file(path, write=False)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from None
    if status.kind is FileKind.MISSING:
        raise click.ClickException(f"no database at {path} (create it: slurm-rl db upgrade)")
    revision = status.revision
    head = head_revision()
    if revision == head:
        click.echo(f"{revision} (head)")
    else:
        click.echo(f"{revision or 'none'} (newest is {head}: run slurm-rl db upgrade)")
