"""Create and migrate the database with Alembic, from the installed package.

The migration scripts and `alembic.ini` ship inside `slurm_rl.db`; their location comes from
this module's own path, never from the current directory.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from .engine import foreign_keys_off

PACKAGE_DIR = Path(__file__).resolve().parent
MIGRATIONS_DIR = PACKAGE_DIR / "migrations"
ALEMBIC_INI = PACKAGE_DIR / "alembic.ini"


def alembic_config() -> Config:
    """Alembic's configuration, pointing at the packaged migrations."""
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations found"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: not created by slurm-rl, or empty)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate the database to `revision`, in one transaction; returns (before, after)."""
    before = current_revision(engine)
    cfg = alembic_config()
    with engine.connect() as conn, foreign_keys_off(conn):
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    return before, current_revision(engine)


def check(engine: Engine) -> None:
    """Raise if the models differ from the migrated schema (alembic's `check`)."""
    cfg = alembic_config()
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.check(cfg)
