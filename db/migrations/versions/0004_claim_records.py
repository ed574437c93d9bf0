"""`claim_records`: each finished job's claimed run time against its observed one, the owner's
record that stretches or disbelieves their next claims (slurm_rl/daemon/claims.py).

A new table: databases from before this revision start with no records, so every user starts
neutral, as a new user does.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "claim_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("claimed_s", sa.Double(), nullable=False),
        sa.Column("observed_s", sa.Double(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_claim_records")),
        sa.UniqueConstraint("job_id", "submit_time",
                            name=op.f("uq_claim_records_job_id_submit_time")),
    )
    op.create_index(op.f("ix_claim_records_user_id"), "claim_records", ["user", "id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_claim_records_user_id"), table_name="claim_records")
    op.drop_table("claim_records")
