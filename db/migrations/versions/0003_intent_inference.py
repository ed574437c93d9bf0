"""The intent's `inference` field: the model of an inference job (`rlsbatch --rl-inference`,
comment key `i`), a nullable text column on `jobs` like `model`.

Rows written before this revision get NULL (no inference model), which is what their comments
said. `intent_last` (canonical JSON) leaves the key out when it is NULL, so those rows' stored
text still equals what the daemon computes now and no job shows a spurious intent edit.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("inference", sa.String(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column by rebuilding the table (batch mode).
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("inference")
