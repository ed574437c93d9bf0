"""Alembic environment for slurm-rl.

Run through `slurm_rl.db.migrate` (the `slurm-rl db` commands), which hands over an open
connection in `config.attributes["connection"]`; or through the alembic command line with
`-x db=PATH` (or `sqlalchemy.url`), for development.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from slurm_rl.db.engine import foreign_keys_off, make_engine
from slurm_rl.db.models import Base

config = context.config
target_metadata = Base.metadata


def _db_path() -> str:
    path = context.get_x_argument(as_dictionary=True).get("db")
    if path:
        return path
    url = config.get_main_option("sqlalchemy.url") or ""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):]
    raise SystemExit("name the database: alembic -x db=PATH ... (or set sqlalchemy.url)")


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite can not ALTER most things; batch mode rebuilds tables
        transactional_ddl=True,  # the engine emits real BEGINs: all of a migration or none
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=f"sqlite:///{_db_path()}",
        target_metadata=target_metadata,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    engine = make_engine(_db_path())
    try:
        with engine.connect() as connection, foreign_keys_off(connection):
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
