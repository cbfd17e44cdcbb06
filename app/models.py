"""Operator state kept in SQL: delay-level versions, the audit log, users, API tokens, gRPC
client credentials and browser sessions."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
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
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class AuditEntry(Base):
    """An operator action: written with its intent before acting, then given its outcome."""

    __tablename__ = "audit_entries"
    __table_args__ = (UniqueConstraint("idempotency_key", name="uq_audit_entries_idempotency_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, index=True)
    actor: Mapped[str] = mapped_column(String(255), index=True)
    role: Mapped[str | None] = mapped_column(String(32), nullable=True)  # the actor's role when it acted
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512), index=True)
    detail: Mapped[str] = mapped_column(Text, default="{}")  # JSON text
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), default="pending")  # pending | ok | failed
    outcome_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # the operator's why, or a ticket


class User(Base):
    """A person who signs in to the console."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(32))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


class ApiToken(Base):
    """A token for scripts, sent as `Authorization: Bearer`; only its SHA-256 is kept."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(32))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(255))
    expires_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # A client token's scopes, JSON lists of names: the topics and groups it may use (null: any).
    topics: Mapped[str | None] = mapped_column(Text, nullable=True)
    groups: Mapped[str | None] = mapped_column(Text, nullable=True)


class ClientCredential(Base):
    """An access key and secret that an official RocketMQ 5 client signs its gRPC calls with. The
    secret must be known to check a signature, so it is kept encrypted (Fernet), not hashed."""

    __tablename__ = "client_credentials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    access_key: Mapped[str] = mapped_column(String(64), unique=True)
    secret_encrypted: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(16))  # producer | consumer | both
    # JSON lists of names: the topics and the consumer groups it may use (null: any).
    topics: Mapped[str | None] = mapped_column(Text, nullable=True)
    groups: Mapped[str | None] = mapped_column(Text, nullable=True)
    description: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(255))
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_used_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # to the minute


class LoginSession(Base):
    """A signed-in browser: the session cookie names it; signing out or an expiry ends it."""

    __tablename__ = "login_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)


class ServerSecret(Base):
    """Secrets the server made for itself once (the session cookie signing key)."""

    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class ResendItem(Base):
    """One dead letter of one resend action (a click, a bulk resend, a redrive job's message):
    where it goes, how its copy is found again, and what became of it."""

    __tablename__ = "resend_items"
    __table_args__ = (UniqueConstraint("action_id", "dead_letter_id", name="uq_resend_items_action_dead_letter"),
                      Index("ix_resend_items_group_status", "group", "status", "dead_letter_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("audit_entries.id", ondelete="CASCADE"), index=True)
    dead_letter_id: Mapped[str] = mapped_column(String(64), index=True)  # its offset message id
    group: Mapped[str] = mapped_column(String(255))
    destination: Mapped[str] = mapped_column(String(255))  # the topic the copy goes to
    lookup_key: Mapped[str] = mapped_column(String(255))  # the copy's unique key: how settling finds it
    # The dead letter's id while this item resends it (pending or ok) unforced: two concurrent
    # resends of one dead letter cannot both hold it. Released (null) when the item fails.
    claim: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True)
    status: Mapped[str] = mapped_column(String(16))  # queued (a job's, not yet sent) | pending | ok | failed | skipped
    job_id: Mapped[int | None] = mapped_column(ForeignKey("redrive_jobs.id", ondelete="CASCADE"), nullable=True,
                                               index=True)
    new_offset_msg_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    actor: Mapped[str] = mapped_column(String(255))


class RedriveJob(Base):
    """A long resend of the dead letters a filter matched, at a set rate, with its progress;
    its items are resend items (job_id), listed when the job is made."""

    __tablename__ = "redrive_jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("audit_entries.id"))  # the audit row that made it
    group: Mapped[str] = mapped_column(String(255))
    filter: Mapped[str] = mapped_column(Text)  # JSON
    destination: Mapped[str] = mapped_column(String(300))  # JSON
    rate_per_s: Mapped[int] = mapped_column(Integer)
    max_dead_share: Mapped[float] = mapped_column(Float)  # pause itself when more than this share comes back dead
    state: Mapped[str] = mapped_column(String(16), index=True)  # planned|running|paused|cancelled|done
    state_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    started_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    finished_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    total: Mapped[int] = mapped_column(Integer)


class PipelineRun(Base):
    """A pipeline job the console started as a process of its own over its store: who asked,
    with which Spark master, its progress (from the job's status file) and how it ended."""

    __tablename__ = "pipeline_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("audit_entries.id"))  # the audit row that started it
    job: Mapped[str] = mapped_column(String(64))
    store: Mapped[str] = mapped_column(Text)  # the store directory it reads
    master: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), index=True)  # queued|running|succeeded|failed|cancelled
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    requested_by: Mapped[str] = mapped_column(String(255))
    requested_at_ms: Mapped[int] = mapped_column(BigInteger)
    started_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    finished_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    output_path: Mapped[str] = mapped_column(Text)
    stage: Mapped[str | None] = mapped_column(Text, nullable=True)  # what the job is doing, in words
    tasks_done: Mapped[int] = mapped_column(Integer, default=0)
    tasks_total: Mapped[int] = mapped_column(Integer, default=0)
    records: Mapped[int] = mapped_column(BigInteger, default=0)  # commit log records read so far
    skipped_ranges: Mapped[int] = mapped_column(Integer, default=0)  # corrupt ranges skipped
    counts: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON: what the job made, on success
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it failed, in words
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)  # also its process group
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cancelled_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
