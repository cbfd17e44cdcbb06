"""Operator state: configuration versions and the audit log.

Revision ID: 0001
Revises:
Create Date: 2025-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "config_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.UniqueConstraint("kind", "version", name="uq_config_versions_kind_version"),
    )
    op.create_index("ix_config_versions_kind", "config_versions", ["kind"])
    op.create_table(
        "audit_entries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("outcome_detail", sa.Text(), nullable=True),
        sa.UniqueConstraint("idempotency_key", name="uq_audit_entries_idempotency_key"),
    )
    op.create_index("ix_audit_entries_at_ms", "audit_entries", ["at_ms"])


def downgrade() -> None:
    op.drop_index("ix_audit_entries_at_ms", table_name="audit_entries")
    op.drop_table("audit_entries")
    op.drop_index("ix_config_versions_kind", table_name="config_versions")
    op.drop_table("config_versions")
