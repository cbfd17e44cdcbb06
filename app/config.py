"""Settings of the console server: one class, read from MQLENS_* environment variables.

No instance is made at import time; `create_app(settings)` gets one from its caller."""

from __future__ import annotations

import ipaddress
import shlex
from pathlib import Path
from typing import Literal

from cryptography.fernet import Fernet
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from store.format.delay_levels import parse_delay_levels
from store.log.geometry import StoreGeometry

DB_FILE_NAME = "mqlens.db"
STORE_DIR_NAME = "store"
# The key that encrypts the gRPC client credentials' secrets, made on first start when
# MQLENS_CLIENT_SECRET_KEY is not set (app/services/client_secret_key.py).
CLIENT_SECRET_KEY_FILE_NAME = "client-secret.key"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MQLENS_", extra="ignore")

    data_dir: Path = Path("./data")
    # The store; default: store/ in data_dir. read_only: serve it without changing a byte (a store
    # RocketMQ or another process wrote); every write request is refused with 409.
    store_dir: Path | None = None
    read_only: bool = False
    # Operator state (audit log, delay-level versions...); default: sqlite file mqlens.db in data_dir.
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    flush: Literal["sync", "async"] = "async"
    # Store geometry: unset fields keep RocketMQ's defaults.
    commitlog_file_size: int | None = Field(None, ge=4096)
    cq_file_size: int | None = Field(None, ge=20)
    index_slots: int | None = Field(None, ge=1)
    index_entries: int | None = Field(None, ge=2)
    schedule_interval_ms: int = Field(50, ge=0)  # 0: delayed messages are delivered only on demand
    # The delay level table of a store without its own (config/delayLevels.json), '1s 5s 10s ...':
    # a broker keeps it in broker.conf (messageDelayLevel). Unset: inferred from the store's
    # scheduled messages, else RocketMQ's default.
    delay_levels: str | None = Field(None, max_length=20_000)
    demo: bool = False
    max_pending_puts: int = Field(256, ge=0)  # puts in progress at once; beyond it: 429
    # Receives in progress at once, each on a worker thread of its own (long polls wait there); beyond it: 429.
    max_receives: int = Field(64, ge=1)
    # The RocketMQ 5 clients on the Clients page: one silent this long (they send a heartbeat every
    # 10 s) is shown as gone, and forgotten client_forget_s later; at most max_client_sessions are
    # kept (the gone ones dropped first).
    client_silent_s: int = Field(120, ge=10, le=86_400)
    client_forget_s: int = Field(3600, ge=0, le=7 * 86_400)
    max_client_sessions: int = Field(10_000, ge=1, le=1_000_000)
    # Worker threads for the other requests that block (the store, the database, page rendering).
    # The interpreter runs one at a time, so more only raise the memory held at the busiest moment.
    request_threads: int = Field(16, ge=1, le=1024)
    # Accounts and access. Anonymous visitors get no role unless anonymous_viewer grants them viewer.
    anonymous_viewer: bool = False
    # Host names (and addresses) the server answers to besides loopback's, comma-separated.
    allowed_hosts: str = ""
    bootstrap_admin_token: SecretStr | None = None  # an admin token with this value exists at start
    admin_password: SecretStr | None = None  # the first admin's password on a fresh database
    session_ttl_s: int = Field(8 * 3600, ge=60, le=30 * 24 * 3600)
    secure_cookies: bool = False  # mark the session cookie Secure (serve behind HTTPS)
    # Failed sign-ins of one name from one address before each further try waits (1 s, doubling up
    # to 15 min); ten times as many a minute from one address, and past five times as many for one
    # name in 15 min every address gets one (app/services/login_limit.py).
    failed_logins_per_minute: int = Field(5, ge=1)
    # Passwords checked at once (Argon2id: 64 MiB and a core each), and sign-ins that may wait for
    # a check; beyond them: 429.
    password_checks: int = Field(2, ge=1, le=64)
    password_checks_waiting: int = Field(8, ge=0)
    # Proxies in front of the server whose X-Forwarded-For / X-Forwarded-Proto are believed:
    # addresses or networks, comma-separated. Empty: no one's (the peer address is the client's).
    trusted_proxies: str = ""
    resend_limit: int = Field(100, ge=1)  # dead letters one support action may resend
    # Request bodies: a larger one is refused (413) before it is read. Routes that carry message
    # bodies (produce, resend with an edit) take up to max_request_bytes, the others max_small_request_bytes.
    max_request_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_small_request_bytes: int = Field(1024 * 1024, ge=1024)
    # What the large bodies in progress at once may take together; beyond it: 429.
    max_large_bodies_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    max_batch_bytes: int = Field(4 * 1024 * 1024, ge=1)  # the bodies of one produce request together (413)
    # Pipeline runs started from the console: the Spark master they use unless an operator picks
    # local[1], local[2] or local[*] instead.
    pipeline_master: str = Field("local[*]", min_length=1, max_length=255, pattern=r"^\S+$")
    # The command that runs a job, split like a shell line; default: this interpreter with
    # `-m app.cli`. The tests point it at a stand-in that keeps the status file's contract.
    pipeline_command: str | None = None
    # The warm Spark (docs/pipeline.md): a kept driver process that runs the jobs started on
    # pipeline_master, when that is a local one, so they skip Spark's start-up. It costs the JVM's
    # heap (pipeline_warm_memory) plus about 0.6 GB (the JVM's own, its Python and Spark's Python
    # workers) while it runs; it stops after pipeline_warm_idle_s without a job and the next job
    # starts it again. at_start: started and warmed up with the console, else by the first job.
    pipeline_warm: bool = True
    pipeline_warm_at_start: bool = True
    pipeline_warm_memory: str = Field("1g", pattern=r"^[1-9][0-9]{0,5}[mMgG]$")
    pipeline_warm_idle_s: int = Field(900, ge=10, le=7 * 86_400)
    # The gRPC front for the official RocketMQ 5 clients, on `host`; 0 turns it off. With a
    # certificate and its key (PEM files) it serves TLS only.
    grpc_port: int = Field(8081, ge=0, le=65535)
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    # Transactions left open: looked at this often, and a producer of the topic asked about one
    # open this long (RocketMQ's transactionCheckInterval and transactionTimeOut), at most this many times.
    transaction_check_interval_ms: int = Field(60_000, ge=100)
    transaction_timeout_ms: int = Field(6_000, ge=100)
    transaction_check_max: int = Field(15, ge=1, le=1000)
    # gRPC clients (the official RocketMQ 5 clients) sign their calls with a client credential.
    # The key that encrypts the credentials' secrets in the database: a Fernet key (32 random
    # bytes, URL-safe base64). Unset: the file client-secret.key in data_dir, made on first start.
    client_secret_key: SecretStr | None = None
    # Calls without credentials: true accepts them, false refuses them; unset: accepted while the
    # server listens on loopback only (grpc_allows_anonymous).
    grpc_anonymous: bool | None = None
    # How far a signed call's x-mq-date-time may be from the server's clock, beyond a whole
    # quarter-hour time-zone offset of up to 14 h (the clients sign their local time marked Z).
    grpc_max_skew_ms: int = Field(5 * 60_000, ge=1_000, le=3_600_000)
    # A live RocketMQ cluster instead of the embedded store: its name servers, 'host:port;host:port'
    # (RocketMQ's namesrvAddr). No store is opened then; the operator database stays. With ACL on
    # the brokers, the account the console signs its requests with.
    namesrv: str | None = Field(None, max_length=2000)
    cluster_access_key: str | None = Field(None, max_length=256)
    cluster_secret_key: SecretStr | None = None
    # How long one request to a name server or broker may take, and one console request for all
    # the brokers together: a broker slower than that is named as not answering.
    cluster_request_timeout_ms: int = Field(3_000, ge=100, le=60_000)
    cluster_deadline_ms: int = Field(5_000, ge=100, le=120_000)

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str | None) -> str | None:
        if url:
            try:
                make_url(url).get_dialect()
            except ArgumentError as exc:  # a malformed URL or a database SQLAlchemy cannot load
                raise ValueError(f"unusable database URL: {exc}") from None
        return url

    @field_validator("delay_levels")
    @classmethod
    def _delay_table(cls, spec: str | None) -> str | None:
        if spec is None or not spec.strip():
            return None
        spec = " ".join(spec.split())
        parse_delay_levels(spec)  # its ValueError names the bad level
        return spec

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, spec: str) -> str:
        for entry in (e.strip() for e in spec.split(",")):
            if entry:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    raise ValueError(f"a trusted proxy is an IP address or network (10.0.0.0/8), not {entry!r}") \
                        from None
        return spec

    @field_validator("namesrv")
    @classmethod
    def _name_servers(cls, spec: str | None) -> str | None:
        if spec is None or not spec.strip():
            return None
        addresses = [part.strip() for part in spec.split(";") if part.strip()]
        for address in addresses:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
                raise ValueError(f"a name server address is host:port, not {address!r}")
        return ";".join(addresses)

    @field_validator("client_secret_key")
    @classmethod
    def _fernet_key(cls, key: SecretStr | None) -> SecretStr | None:
        if key is None or not key.get_secret_value().strip():
            return None
        try:
            Fernet(key.get_secret_value().strip())
        except ValueError:
            raise ValueError("a client secret key is 32 random bytes in URL-safe base64 (44 characters), as "
                             "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key()"
                             ".decode())'` prints") from None
        return SecretStr(key.get_secret_value().strip())

    @field_validator("pipeline_command")
    @classmethod
    def _command_line(cls, command: str | None) -> str | None:
        if command is not None:
            try:
                words = shlex.split(command)
            except ValueError as exc:
                raise ValueError(f"unusable pipeline command: {exc}") from None
            if not words:
                return None
        return command

    @model_validator(mode="after")
    def _default_database_url(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.data_dir / DB_FILE_NAME).as_posix()}"
        return self

    @model_validator(mode="after")
    def _default_store_dir(self) -> Settings:
        if self.store_dir is None:
            self.store_dir = self.data_dir / STORE_DIR_NAME
        if self.read_only and self.demo:
            raise ValueError("the demo workload writes to the store: it cannot run read-only")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ValueError("TLS for the gRPC front needs a certificate (grpc_tls_cert) and its key (grpc_tls_key)")
        for path in (self.grpc_tls_cert, self.grpc_tls_key):
            if path is not None and not path.is_file():
                raise ValueError(f"TLS file {path} does not exist")
        return self

    @model_validator(mode="after")
    def _room_for_one_large_body(self) -> Settings:
        if self.max_large_bodies_bytes < self.max_request_bytes:
            raise ValueError("max_large_bodies_bytes must be at least max_request_bytes, or no large request fits")
        return self

    @model_validator(mode="after")
    def _cluster_or_store(self) -> Settings:
        if self.namesrv is None:
            return self
        if self.read_only or self.demo:
            raise ValueError("read_only and demo are about the embedded store; a live cluster (namesrv) has none")
        if bool(self.cluster_access_key) != (self.cluster_secret_key is not None):
            raise ValueError("a cluster with ACL needs both cluster_access_key and cluster_secret_key")
        return self

    def name_servers(self) -> list[str]:
        return self.namesrv.split(";") if self.namesrv else []

    def host_names(self) -> list[str]:
        """The Host header values (without port) the server answers to."""
        names = ["127.0.0.1", "localhost", "::1", "[::1]"]
        if self.host not in ("0.0.0.0", "::", ""):
            names.append(self.host)
        names += [name.strip() for name in self.allowed_hosts.split(",") if name.strip()]
        return list(dict.fromkeys(names))

    def listens_beyond_loopback(self) -> bool:
        return self.host not in ("127.0.0.1", "localhost", "::1") and not self.host.startswith("127.")

    def grpc_allows_anonymous(self) -> bool:
        """gRPC calls without credentials are accepted: as set, else while only this machine can connect."""
        if self.grpc_anonymous is not None:
            return self.grpc_anonymous
        return not self.listens_beyond_loopback()

    def trusted_proxy_list(self) -> list[str]:
        return [entry.strip() for entry in self.trusted_proxies.split(",") if entry.strip()]

    def warm_spark_master(self) -> str | None:
        """The master whose jobs the warm Spark runs; None when there is no warm Spark."""
        return self.pipeline_master if self.pipeline_warm and self.pipeline_master.startswith("local") else None

    def geometry(self) -> StoreGeometry:
        given = {name: getattr(self, name) for name in
                 ("commitlog_file_size", "cq_file_size", "index_slots", "index_entries")
                 if getattr(self, name) is not None}
        return StoreGeometry(**given)
