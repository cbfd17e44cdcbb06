"""Redrive jobs: long resends at a set rate; their items are resend items.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "redrive_jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("action_id", sa.Integer(), sa.ForeignKey("audit_entries.id"), nullable=False),
        sa.Column("group", sa.String(255), nullable=False),
        sa.Column("filter", sa.Text(), nullable=False),
        sa.Column("destination", sa.String(300), nullable=False),
        sa.Column("rate_per_s", sa.Integer(), nullable=False),
        sa.Column("max_dead_share", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("state_reason", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False),
    )
    op.create_index("ix_redrive_jobs_state", "redrive_jobs", ["state"])
    with op.batch_alter_table("resend_items") as batch:
        batch.add_column(sa.Column("job_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_resend_items_job_id", "redrive_jobs", ["job_id"], ["id"], ondelete="CASCADE")
        batch.create_index("ix_resend_items_job_id", ["job_id"])


def downgrade() -> None:
    with op.batch_alter_table("resend_items") as batch:
        batch.drop_index("ix_resend_items_job_id")
        batch.drop_constraint("fk_resend_items_job_id", type_="foreignkey")
        batch.drop_column("job_id")
    op.drop_index("ix_redrive_jobs_state", table_name="redrive_jobs")
    op.drop_table("redrive_jobs")
