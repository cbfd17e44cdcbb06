"""Client credentials: the access keys and encrypted secrets the official RocketMQ 5 clients sign
their gRPC calls with, with their role and their topic and group limits (null: any).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "client_credentials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("access_key", sa.String(64), nullable=False, unique=True),
        sa.Column("secret_encrypted", sa.Text(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("topics", sa.Text(), nullable=True),
        sa.Column("groups", sa.Text(), nullable=True),
        sa.Column("description", sa.String(200), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_used_at_ms", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("client_credentials")
