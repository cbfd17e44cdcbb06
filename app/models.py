"""Operator state kept in SQL: delay-level versions and the audit log."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class ConfigVersion(Base):
    """One version of a piece of broker configuration (kind "delay_levels": the table text)."""

    __tablename__ = "config_versions"
    __table_args__ = (UniqueConstraint("kind", "version", name="uq_config_versions_kind_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per kind
    value: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    actor: Mapped[str] = mapped_column(String(255))


class AuditEntry(Base):
    """An operator action: written with its intent before acting, then given its outcome."""

    __tablename__ = "audit_entries"
    __table_args__ = (UniqueConstraint("idempotency_key", name="uq_audit_entries_idempotency_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512))
    detail: Mapped[str] = mapped_column(Text, default="{}")  # JSON text
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), default="pending")  # pending | ok | failed
    outcome_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
