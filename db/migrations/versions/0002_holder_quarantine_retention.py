"""The daemon holder row, quarantined Slurm records, and the indexes retention prunes by.

`daemon_holder` names the daemon holding the database (the lock is an flock on `<db>.lock`);
`quarantined_records` keeps records the poll could not parse; the indexes on the time columns
make the daemon's per-cycle pruning an index range scan.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "daemon_holder",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_daemon_holder")),
    )
    op.create_table(
        "quarantined_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=True),
        sa.Column("first_seen", sa.Double(), nullable=False),
        sa.Column("last_seen", sa.Double(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("excerpt", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quarantined_records")),
    )
    op.create_index(op.f("ix_quarantined_records_job_id_reason"), "quarantined_records",
                    ["job_id", "reason"])
    op.create_index(op.f("ix_quarantined_records_last_seen"), "quarantined_records",
                    ["last_seen"])
    op.create_index(op.f("ix_jobs_state_changed_at"), "jobs", ["state_changed_at"])
    op.create_index(op.f("ix_job_events_at"), "job_events", ["at"])
    op.create_index(op.f("ix_actions_finished_at"), "actions", ["finished_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_actions_finished_at"), table_name="actions")
    op.drop_index(op.f("ix_job_events_at"), table_name="job_events")
    op.drop_index(op.f("ix_jobs_state_changed_at"), table_name="jobs")
    op.drop_table("quarantined_records")
    op.drop_table("daemon_holder")
