"""Resend items: each dead letter of a resend action, its destination and its copy.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "resend_items",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("action_id", sa.Integer(), sa.ForeignKey("audit_entries.id", ondelete="CASCADE"), nullable=False),
        sa.Column("dead_letter_id", sa.String(64), nullable=False),
        sa.Column("group", sa.String(255), nullable=False),
        sa.Column("destination", sa.String(255), nullable=False),
        sa.Column("lookup_key", sa.String(255), nullable=False),
        sa.Column("claim", sa.String(64), nullable=True, unique=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("new_offset_msg_id", sa.String(64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.UniqueConstraint("action_id", "dead_letter_id", name="uq_resend_items_action_dead_letter"),
    )
    op.create_index("ix_resend_items_action_id", "resend_items", ["action_id"])
    op.create_index("ix_resend_items_dead_letter_id", "resend_items", ["dead_letter_id"])


def downgrade() -> None:
    op.drop_index("ix_resend_items_dead_letter_id", table_name="resend_items")
    op.drop_index("ix_resend_items_action_id", table_name="resend_items")
    op.drop_table("resend_items")
