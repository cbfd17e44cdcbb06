"""Scopes of client tokens: the topics and the consumer groups a token may use (null: any).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("topics", sa.Text(), nullable=True))
        batch.add_column(sa.Column("groups", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("groups")
        batch.drop_column("topics")
