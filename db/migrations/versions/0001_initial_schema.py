"""Initial schema: jobs (with QoS intent), job events and progress, nodes, GPU samples,
decisions with per-job entries, and actions with the jobs they cover.

Generated with `alembic revision --autogenerate`, then tidied by hand: enum columns are written
as the plain VARCHAR(32) they are in SQLite (no CHECK constraint, so new enum members need no
migration), tables are grouped by topic, indices are created with op.create_index.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _enum() -> sa.String:
    # models.py stores enums as their values with native_enum=False, create_constraint=False.
    return sa.String(length=32)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("partition", sa.String(), nullable=False),
        sa.Column("state", _enum(), nullable=False),
        sa.Column("state_changed_at", sa.Double(), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("first_seen_at", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("time_limit_s", sa.Double(), nullable=True),
        sa.Column("managed", sa.Boolean(), nullable=False),
        sa.Column("user_comment", sa.String(), nullable=True),
        sa.Column("intent_seen_at", sa.Double(), nullable=True),
        sa.Column("deadline", sa.Double(), nullable=True),
        sa.Column("hard", sa.Boolean(), nullable=True),
        sa.Column("service_class", _enum(), nullable=True),
        sa.Column("gpus_min", sa.Integer(), nullable=True),
        sa.Column("gpus_max", sa.Integer(), nullable=True),
        sa.Column("elastic", sa.Boolean(), nullable=True),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("batch_size", sa.Integer(), nullable=True),
        sa.Column("intent_last", sa.String(), nullable=True),
        sa.Column("intent_edited", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_state"), "jobs", ["state"])
    op.create_index(op.f("ix_jobs_user_submit_time"), "jobs", ["user", "submit_time"])

    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("kind", _enum(), nullable=False),
        sa.Column("old", sa.String(), nullable=True),
        sa.Column("new", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_job_events_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index(op.f("ix_job_events_job_id_at"), "job_events", ["job_id", "at"])

    op.create_table(
        "job_progress",
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("steps_done", sa.Integer(), nullable=False),
        sa.Column("steps_total", sa.Integer(), nullable=True),
        sa.Column("rate", sa.Double(), nullable=True),
        sa.Column("reported_at", sa.Double(), nullable=True),
        sa.Column("recorded_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_job_progress_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_progress")),
    )

    op.create_table(
        "nodes",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("state", _enum(), nullable=False),
        sa.Column("gpus_total", sa.Integer(), nullable=False),
        sa.Column("gpus_alloc", sa.Integer(), nullable=False),
        sa.Column("first_seen_at", sa.Double(), nullable=False),
        sa.Column("last_seen_at", sa.Double(), nullable=False),
        sa.Column("last_sample_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )

    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("util_pct", sa.Double(), nullable=True),
        sa.Column("mem_used_mib", sa.Double(), nullable=True),
        sa.Column("mem_total_mib", sa.Double(), nullable=True),
        sa.Column("power_w", sa.Double(), nullable=True),
        sa.Column("temp_c", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node"], ["nodes.name"], name=op.f("fk_gpu_samples_node_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_samples")),
        sa.UniqueConstraint(
            "node", "at", "gpu_index", name=op.f("uq_gpu_samples_node_at_gpu_index")
        ),
    )
    op.create_index(op.f("ix_gpu_samples_at"), "gpu_samples", ["at"])

    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cycle_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(op.f("ix_decisions_cycle_id"), "decisions", ["cycle_id"])
    op.create_index(op.f("ix_decisions_at"), "decisions", ["at"])

    op.create_table(
        "decision_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("kind", _enum(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"],
            name=op.f("fk_decision_entries_decision_id_decisions"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_decision_entries_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_entries")),
    )
    op.create_index(
        op.f("ix_decision_entries_decision_id"), "decision_entries", ["decision_id"]
    )
    op.create_index(
        op.f("ix_decision_entries_job_id_decision_id"), "decision_entries",
        ["job_id", "decision_id"],
    )

    op.create_table(
        "actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cycle_id", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Integer(), nullable=True),
        sa.Column("kind", _enum(), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("status", _enum(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("output", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["decision_id"], ["decisions.id"], name=op.f("fk_actions_decision_id_decisions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_actions")),
    )
    op.create_index(op.f("ix_actions_status"), "actions", ["status"])
    op.create_index(op.f("ix_actions_cycle_id"), "actions", ["cycle_id"])
    op.create_index(op.f("ix_actions_decision_id"), "actions", ["decision_id"])

    op.create_table(
        "action_jobs",
        sa.Column("action_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["action_id"], ["actions.id"], name=op.f("fk_action_jobs_action_id_actions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_action_jobs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("action_id", "job_id", name=op.f("pk_action_jobs")),
    )
    op.create_index(op.f("ix_action_jobs_job_id"), "action_jobs", ["job_id"])


def downgrade() -> None:
    for table in (
        "action_jobs", "actions", "decision_entries", "decisions", "gpu_samples", "nodes",
        "job_progress", "job_events", "jobs",
    ):
        op.drop_table(table)  # drops its indices too
