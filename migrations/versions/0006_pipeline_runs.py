"""Pipeline runs: Spark jobs the console started, their progress and outcome.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipeline_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("action_id", sa.Integer(), sa.ForeignKey("audit_entries.id"), nullable=False),
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("store", sa.Text(), nullable=False),
        sa.Column("master", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.String(255), nullable=False),
        sa.Column("requested_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("output_path", sa.Text(), nullable=False),
        sa.Column("stage", sa.Text(), nullable=True),
        sa.Column("tasks_done", sa.Integer(), nullable=False),
        sa.Column("tasks_total", sa.Integer(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("skipped_ranges", sa.Integer(), nullable=False),
        sa.Column("counts", sa.Text(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("cancelled_by", sa.String(255), nullable=True),
    )
    op.create_index("ix_pipeline_runs_state", "pipeline_runs", ["state"])


def downgrade() -> None:
    op.drop_index("ix_pipeline_runs_state", table_name="pipeline_runs")
    op.drop_table("pipeline_runs")
