"""How later migrations will behave: all or nothing, and table rebuilds that keep the data.

Each test copies the packaged migrations and adds a revision 9999 of its own after the head.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text

from slurm_rl.db import migrate
from slurm_rl.db.engine import foreign_keys_off

HEADER = f'''
from alembic import op
import sqlalchemy as sa
revision = "9999"
down_revision = "{migrate.head_revision()}"
branch_labels = None
depends_on = None
def downgrade():
    pass
'''


def upgrade_with(engine: Engine, tmp_path: Path, body: str) -> None:
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, scripts,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9999_test.py").write_text(HEADER + textwrap.dedent(body))
    cfg = migrate.alembic_config()
    cfg.set_main_option("script_location", str(scripts))
    with engine.connect() as conn, foreign_keys_off(conn):
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def test_a_failing_migration_leaves_the_database_as_it_was(
    engine: Engine, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="half way"):
        upgrade_with(engine, tmp_path, '''
            def upgrade():
                op.create_table("scratch", sa.Column("x", sa.Integer()))
                op.add_column("nodes", sa.Column("rack", sa.String()))
                raise RuntimeError("half way")
        ''')
    assert "scratch" not in inspect(engine).get_table_names()
    assert "rack" not in {c["name"] for c in inspect(engine).get_columns("nodes")}
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_rebuilding_a_referenced_table_keeps_every_row(engine: Engine, tmp_path: Path) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO jobs (job_id, user, name, partition, state, state_changed_at, "
            "submit_time, first_seen_at, gpus, nodes, managed, intent_edited) "
            "VALUES ('7', 'u', 'n', 'p', 'PENDING', 0, 0, 0, 1, 1, 1, 0)"
        ))
        conn.execute(text("INSERT INTO job_events (job_id, at, kind) VALUES ('7', 0, 'state')"))
    # SQLite can not ALTER much; batch mode copies `jobs` to a new table, drops the old one and
    # renames. With foreign keys enforced, dropping `jobs` would delete or refuse its events.
    upgrade_with(engine, tmp_path, '''
        def upgrade():
            with op.batch_alter_table("jobs", recreate="always") as batch:
                batch.add_column(sa.Column("account", sa.String(), nullable=True))
    ''')
    assert migrate.current_revision(engine) == "9999"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM job_events")).scalar() == 1
        assert conn.execute(text("SELECT account FROM jobs")).all() == [(None,)]
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
