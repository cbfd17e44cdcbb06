"""An index of resend items by group and status: the dead-letter inbox asks, per request, which of
a group's dead letters were resent, and that should not read every resend ever made.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_resend_items_group_status", "resend_items", ["group", "status", "dead_letter_id"])


def downgrade() -> None:
    op.drop_index("ix_resend_items_group_status", table_name="resend_items")
