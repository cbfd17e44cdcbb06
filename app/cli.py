"""The `mqlens` command: store lookups, loading, checking, and the console server."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import app.cli_env  # noqa: F401  (first: it must run before numpy is imported)
from app import ndjson_parse
from app.ndjson_parse import LoadLineError, ReaderError
from app.services.errors import ServiceError
from pipeline import cli as pipeline_cli
from store.errors import StoreError
from store.log.geometry import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    DEFAULT_INDEX_ENTRIES,
    DEFAULT_INDEX_SLOTS,
    StoreGeometry,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from app.config import Settings
    from store.message_store import MessageStore

# The store, numpy with it, is imported by the commands that use it: `store load` starts its
# reader process first, so that the reader parses ahead meanwhile.

EXIT_USAGE = 2

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, help="mqlens: RocketMQ store tools and console.")
store_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Write to and check a store.")
app.add_typer(store_app, name="store")
db_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The operator database (SQLite).")
app.add_typer(db_app, name="db")
app.add_typer(pipeline_cli.app, name="pipeline")
users_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The console's users.")
app.add_typer(users_app, name="users")
credentials_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                              help="Client credentials: the access keys gRPC clients sign their calls with.")
app.add_typer(credentials_app, name="client-credentials")

StoreDir = Annotated[Path, typer.Option("--store", help="Store directory (the folder holding commitlog/).")]
CommitlogSize = Annotated[int, typer.Option("--commitlog-file-size", min=4096, help="Commit log segment bytes.")]
CqSize = Annotated[int, typer.Option("--cq-file-size", min=20, help="Consume queue file bytes.")]
IndexSlots = Annotated[int, typer.Option("--index-slots", min=1, help="Hash slots per index file.")]
IndexEntries = Annotated[int, typer.Option("--index-entries", min=2, help="Entries per index file.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
# The commands that read a store take what `serve` would use when an option is left out: the
# MQLENS_* variables (MQLENS_STORE_DIR, else MQLENS_DATA_DIR/store; the geometry; the delay table).
SettingsStoreDir = Annotated[Path | None, typer.Option(
    "--store", help="Store directory (the folder holding commitlog/) [default: MQLENS_STORE_DIR, else "
    "MQLENS_DATA_DIR/store, else ./data/store].")]
SettingsCommitlogSize = Annotated[int | None, typer.Option(
    "--commitlog-file-size", min=4096, help="Commit log segment bytes [default: MQLENS_COMMITLOG_FILE_SIZE, else "
    "RocketMQ's].")]
SettingsCqSize = Annotated[int | None, typer.Option(
    "--cq-file-size", min=20, help="Consume queue file bytes [default: MQLENS_CQ_FILE_SIZE, else RocketMQ's].")]
SettingsIndexSlots = Annotated[int | None, typer.Option(
    "--index-slots", min=1, help="Hash slots per index file [default: MQLENS_INDEX_SLOTS, else RocketMQ's].")]
SettingsIndexEntries = Annotated[int | None, typer.Option(
    "--index-entries", min=2, help="Entries per index file [default: MQLENS_INDEX_ENTRIES, else RocketMQ's].")]
DelayLevelsOpt = Annotated[str | None, typer.Option(
    "--delay-levels", help="The broker's delay level table ('1s 5s 10s ...', messageDelayLevel in its broker.conf) "
    "for a store without its own [default: inferred from its scheduled messages].")]


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _geometry(commitlog_file_size: int, cq_file_size: int, index_slots: int, index_entries: int) -> StoreGeometry:
    return StoreGeometry(commitlog_file_size, cq_file_size, index_slots, index_entries)


def _check_geometry(store: Path, geometry: StoreGeometry) -> None:
    """Refuse, in words, a geometry the store's files were not written with."""
    from store.log.geometry_check import geometry_mismatch

    found = geometry_mismatch(store, geometry)
    if found is None:
        return
    options = " and ".join(f"--{name.replace('_', '-')} (MQLENS_{name.upper()})" for name in found.settings)
    raise CliError(f"{found.path} is {found.actual} bytes, but the store geometry makes such a file "
                   f"{found.expected} bytes: give the store's own {options}")


def _open_read_only(store: Path, geometry: StoreGeometry, delay_levels: str | None = None) -> MessageStore:
    from store.format.delay_levels import parse_delay_levels
    from store.message_store import MessageStore, StoreConfig

    if not store.is_dir():
        raise CliError(f"store directory {store} does not exist")
    _check_geometry(store, geometry)
    if delay_levels is not None:
        delay_levels = " ".join(delay_levels.split())
        try:
            parse_delay_levels(delay_levels)
        except ValueError as exc:
            raise CliError(f"--delay-levels: {exc}") from None
    return MessageStore.open(store, StoreConfig(geometry=geometry, delay_levels=delay_levels), read_only=True)


def _read_store(store: Path | None, commitlog_file_size: int | None, cq_file_size: int | None,
                index_slots: int | None, index_entries: int | None, delay_levels: str | None = None) -> MessageStore:
    """The store `serve` would open with the same MQLENS_* variables, read-only; the options given win."""
    settings = _settings(store_dir=store, commitlog_file_size=commitlog_file_size, cq_file_size=cq_file_size,
                         index_slots=index_slots, index_entries=index_entries)
    return _open_read_only(settings.store_dir, settings.geometry(),
                           delay_levels if delay_levels is not None else settings.delay_levels)


def _store_value(name: str):
    """A default taken from store.message_store when the command runs without the option."""
    def value():
        from store import message_store

        return getattr(message_store, name)
    return value


def _print_messages(messages, truncated: bool, as_json: bool) -> None:
    from app.masking import show_all
    from app.presenters import message_dict

    if as_json:
        print(json.dumps({"messages": [show_all(message_dict(m)) for m in messages], "truncated": truncated},
                         ensure_ascii=False))
        return
    if not messages:
        print("no message found")
    for m in messages:
        d = show_all(message_dict(m))
        print(f"{d['offset_msg_id']}  topic={d['topic']} queue={d['queue_id']} offset={d['queue_offset']} "
              f"phys={d['phys_offset']} unique_key={d['unique_key']} tags={d['tags']} keys={' '.join(d['keys'])}")
        body = d["body_text"] or f"<{len(base64.b64decode(d['body_base64']))} bytes, binary>"
        print(f"    stored {d['store_timestamp']} born {d['born_timestamp']} from {d['born_host']}: {body[:200]}")
    if truncated:
        print("(results cut short: raise --max or narrow the time window)")


def _oldest_first(messages: list) -> list:
    """In commit log order, as mqadmin prints a lookup's messages (the store answers newest first)."""
    return sorted(messages, key=lambda m: m.phys_offset)


@app.command("query-msg-by-id")
def query_msg_by_id(
    msg_id: Annotated[str, typer.Option("-i", "--msg-id", help="Offset message id (32 or 56 hex chars).")],
    as_json: AsJson = False,
    commitlog_file_size: SettingsCommitlogSize = None,
    cq_file_size: SettingsCqSize = None,
    index_slots: SettingsIndexSlots = None,
    index_entries: SettingsIndexEntries = None,
    store: SettingsStoreDir = None,
) -> None:
    """Look a message up by its offset message id."""
    with _read_store(store, commitlog_file_size, cq_file_size, index_slots, index_entries) as s:
        _print_messages([s.get_by_offset_id(msg_id)], False, as_json)


@app.command("query-msg-by-key")
def query_msg_by_key(
    topic: Annotated[str, typer.Option("-t", "--topic")],
    key: Annotated[str, typer.Option("-k", "--key")],
    end: Annotated[int, typer.Option("--end", help="Latest store time (ms).", default_factory=_store_value(
        "FAR_FUTURE_MS"), show_default="no limit")],
    max_results: Annotated[int, typer.Option("--max", min=1, max=10_000, default_factory=_store_value(
        "DEFAULT_QUERY_MAX"), show_default="32")],
    begin: Annotated[int, typer.Option("--begin", help="Earliest store time (ms).")] = 0,
    as_json: AsJson = False,
    commitlog_file_size: SettingsCommitlogSize = None,
    cq_file_size: SettingsCqSize = None,
    index_slots: SettingsIndexSlots = None,
    index_entries: SettingsIndexEntries = None,
    store: SettingsStoreDir = None,
) -> None:
    """Messages of a topic carrying a business key, oldest first as mqadmin lists them (the newest --max)."""
    with _read_store(store, commitlog_file_size, cq_file_size, index_slots, index_entries) as s:
        result = s.query_by_key(topic, key, begin, end, max_results)
        _print_messages(_oldest_first(result.messages), result.truncated, as_json)


@app.command("query-msg-by-unique-key")
def query_msg_by_unique_key(
    topic: Annotated[str, typer.Option("-t", "--topic")],
    unique_key: Annotated[str, typer.Option("-i", "--unique-key", help="Client message id (UNIQ_KEY).")],
    as_json: AsJson = False,
    commitlog_file_size: SettingsCommitlogSize = None,
    cq_file_size: SettingsCqSize = None,
    index_slots: SettingsIndexSlots = None,
    index_entries: SettingsIndexEntries = None,
    store: SettingsStoreDir = None,
) -> None:
    """Messages of a topic whose unique key (client message id) matches, oldest first as mqadmin lists them."""
    with _read_store(store, commitlog_file_size, cq_file_size, index_slots, index_entries) as s:
        result = s.query_by_unique_key(topic, unique_key)
        _print_messages(_oldest_first(result.messages), result.truncated, as_json)


@app.command("query-msg-by-offset")
def query_msg_by_offset(
    topic: Annotated[str, typer.Option("-t", "--topic")],
    queue_id: Annotated[int, typer.Option("-q", "--queue", min=0)],
    offset: Annotated[int, typer.Option("-o", "--offset", min=0)],
    as_json: AsJson = False,
    commitlog_file_size: SettingsCommitlogSize = None,
    cq_file_size: SettingsCqSize = None,
    index_slots: SettingsIndexSlots = None,
    index_entries: SettingsIndexEntries = None,
    store: SettingsStoreDir = None,
) -> None:
    """The message at a queue offset."""
    with _read_store(store, commitlog_file_size, cq_file_size, index_slots, index_entries) as s:
        _print_messages([s.get_by_queue_offset(topic, queue_id, offset)], False, as_json)


@store_app.command("load")
def store_load(
    store: StoreDir,
    file: Annotated[Path, typer.Argument(help="NDJSON file, one message per line ('-' for stdin).")],
    flush: Annotated[str, typer.Option("--flush", help="sync: a printed line means the message is on disk.")]
    = "async",
    trace: Annotated[bool, typer.Option("--trace", help="Record each message's lifecycle in the trace topic.")]
    = False,
    commitlog_file_size: CommitlogSize = DEFAULT_COMMITLOG_FILE_SIZE,
    cq_file_size: CqSize = DEFAULT_CQ_FILE_SIZE,
    index_slots: IndexSlots = DEFAULT_INDEX_SLOTS,
    index_entries: IndexEntries = DEFAULT_INDEX_ENTRIES,
) -> None:
    """Append messages from NDJSON, printing one JSON result line per message as it is stored."""
    if flush not in ("sync", "async"):
        raise CliError("--flush must be 'sync' or 'async'")
    if str(file) != "-" and not file.is_file():
        raise CliError(f"input file {file} does not exist")
    geometry = _geometry(commitlog_file_size, cq_file_size, index_slots, index_entries)
    out = sys.stdout.fileno()
    sys.stdout.flush()
    ndjson_parse.widen_pipe(out)
    ndjson_parse.keep_freed_memory()
    # A batch's lines go out in one write past Python's buffer, from a thread of their own.
    with ndjson_parse.read_in_process(str(file)) as batches, ndjson_parse.BackgroundWriter(out) as output:
        from app import ndjson_load  # parsing starts while the store is imported
        from store.message_store import MessageStore, StoreConfig

        config = StoreConfig(geometry=geometry, flush=flush, trace=trace, drop_flushed_pages=True)
        with MessageStore.open(store, config) as s:
            try:
                ndjson_load.load(s, batches, output.write)
            except (LoadLineError, ReaderError) as exc:
                raise CliError(str(exc)) from None


@store_app.command("check")
def store_check(
    commitlog_file_size: SettingsCommitlogSize = None,
    cq_file_size: SettingsCqSize = None,
    index_slots: SettingsIndexSlots = None,
    index_entries: SettingsIndexEntries = None,
    store: SettingsStoreDir = None,
    delay_levels: DelayLevelsOpt = None,
    against: Annotated[Path | None, typer.Option(
        "--against", help="For a store too large for this machine's memory: compare the consume queues and "
        "index with their rebuild, the output folder of `mqlens pipeline run projections` over this store "
        "(the check's memory then does not grow with the store).")] = None,
) -> None:
    """Check every record, queue unit and index entry; exit 1 when the store is inconsistent."""
    if against is not None and not against.is_dir():
        raise CliError(f"--against: {against} is not a folder; give the output folder of "
                       "`mqlens pipeline run projections`")
    with _read_store(store, commitlog_file_size, cq_file_size, index_slots, index_entries, delay_levels) as s:
        if against is None:
            report = s.check()
        else:
            try:
                report, compared = s.check_against(against)
            except StoreError as exc:
                raise CliError(f"--against: {exc}") from None
        recovery = s.recovery
        table, source = s.delay_levels.spec, s.delay_levels_source.text
        projected = s.projected_in_memory
    print(f"records: {report.records}, end-of-file fillers: {report.blanks}, queue units: {report.queue_units}, "
          f"index entries: {report.index_entries}")
    print(f"delay levels: {table} ({source})")
    if projected is not None:
        print(f"note: the consume queues and index lag the commit log: {projected.records} records from offset "
              f"{projected.start} were projected in memory to check them (nothing was written)")
    if against is not None:
        print(f"compared with the rebuild in {against}")
        if compared.covered_end < compared.log_end:
            print(f"note: the commit log's last {compared.log_end - compared.covered_end} bytes (from offset "
                  f"{compared.covered_end}) hold no record the rebuild indexes or queues: written after it, or "
                  "records neither indexed nor queued; their units and entries were not compared")
    if recovery is not None and recovery.truncated_bytes:
        report.problem(f"{recovery.truncated_bytes} bytes after the last good record at {recovery.end} "
                       f"({recovery.reason or 'unreadable data'}); opening the store read-write truncates them")
    if report.ok:
        print("store is consistent")
        return
    for problem in report.problems:
        print(f"problem: {problem}")
    raise typer.Exit(1)


DataDir = Annotated[Path | None, typer.Option("--data", help="Data directory: the store and mqlens.db "
                                              "[default: ./data or MQLENS_DATA_DIR].")]


def _settings(**given):
    """Settings from the options given; the others from MQLENS_* variables or the defaults."""
    from pydantic import ValidationError

    from app.config import Settings

    try:
        return Settings(**{name: value for name, value in given.items() if value is not None})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {(e.get('ctx') or {}).get('error') or e['msg']}"
                             for e in exc.errors())
        raise CliError(f"bad settings: {problems}") from None


@db_app.command("upgrade")
def db_upgrade(data: DataDir = None) -> None:
    """Create the operator database or bring its schema up to date."""
    from app.db import current_revision, migrate

    settings = _settings(data_dir=data)
    migrate(settings.database_url)
    print(f"database {settings.database_url} is at revision {current_revision(settings.database_url)}")


@contextlib.contextmanager
def _operator_database(data: Path | None) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """The settings and the sessions of the operator database `serve` would use, migrated."""
    from app.db import make_engine, migrate, session_factory

    settings = _settings(data_dir=data)
    migrate(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        yield settings, session_factory(engine)
    finally:
        engine.dispose()


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The user name they sign in with.")],
    role: Annotated[str, typer.Option("--role", help="viewer, support, operator, admin or client.")],
    data: DataDir = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from standard input "
                                                 "instead of making one.")] = False,
) -> None:
    """Add a user to the operator database; without --password-stdin a password is made and printed once."""
    import secrets

    from app.roles import SYSTEM
    from app.services import accounts
    from store.clock import SystemClock

    password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(15)
    with _operator_database(data) as (_, sessions):
        accounts.add_user(sessions, SystemClock(), name, password, role, actor=SYSTEM)
    print(f"added {name} ({role.strip().lower()})" + ("" if password_stdin else f" with password {password}"))


@credentials_app.command("add")
def credentials_add(
    role: Annotated[str, typer.Option("--role", help="producer, consumer or both.")],
    topics: Annotated[list[str] | None, typer.Option("--topic", help="A topic it may use (repeat; default: any).")]
    = None,
    groups: Annotated[list[str] | None, typer.Option("--group", help="A consumer group it may consume as (repeat; "
                                                     "default: any).")] = None,
    description: Annotated[str | None, typer.Option("--description", help="Whose it is, for the admins.")] = None,
    data: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Make a client credential; its secret is printed this once."""
    from app.roles import SYSTEM
    from app.services import client_credentials
    from app.services.client_secret_key import load_cipher
    from store.clock import SystemClock

    with _operator_database(data) as (settings, sessions):
        key = settings.client_secret_key.get_secret_value() if settings.client_secret_key is not None else None
        cipher = load_cipher(key, settings.data_dir, lambda: client_credentials.any_stored(sessions))
        client_credentials.check_key(sessions, cipher)  # never add a secret the server could not read
        credential, secret = client_credentials.create_credential(
            sessions, SystemClock(), cipher, role, actor=SYSTEM, topics=topics or None, groups=groups or None,
            description=description)
    if as_json:
        print(json.dumps({"credential": asdict(credential), "secret": secret}))
        return
    print(f"access key {credential.access_key}")
    print(f"secret     {secret}")
    print("(the secret is shown this once: the client signs with Credentials(access_key, secret); a running server "
          "knows the credential within seconds)")


@credentials_app.command("list")
def credentials_list(data: DataDir = None, as_json: AsJson = False) -> None:
    """The client credentials, active ones first (never a secret)."""
    from app.render import format_ms
    from app.services import client_credentials

    with _operator_database(data) as (_, sessions):
        credentials = client_credentials.list_credentials(sessions)
    if as_json:
        print(json.dumps({"credentials": [asdict(c) for c in credentials]}))
        return
    if not credentials:
        print("no client credentials")
    for c in credentials:
        limits = " ".join([*(f"topic={t}" for t in c.topics or ()), *(f"group={g}" for g in c.groups or ())])
        state = f"revoked {format_ms(c.revoked_at_ms)}" if c.revoked_at_ms else "active"
        print(f"{c.access_key}  {c.role}  {state}  made {format_ms(c.created_at_ms)} by {c.created_by}  "
              f"{limits or 'any topic and group'}" + (f"  ({c.description})" if c.description else ""))


@credentials_app.command("revoke")
def credentials_revoke(
    access_key: Annotated[str, typer.Argument(help="The access key to refuse from now on.")],
    data: DataDir = None,
) -> None:
    """Revoke a client credential (a running server refuses it within seconds)."""
    from app.roles import SYSTEM
    from app.services import client_credentials
    from store.clock import SystemClock

    with _operator_database(data) as (_, sessions):
        client_credentials.revoke_credential(sessions, SystemClock(), access_key, actor=SYSTEM)
    print(f"revoked {access_key}")


def _check_served_store(store: Path | None, read_only: bool) -> None:
    if read_only and store is None and not os.environ.get("MQLENS_STORE_DIR"):
        raise CliError("--read-only serves a store written elsewhere: give its directory with --store")
    if store is not None and not store.is_dir():
        raise CliError(f"store directory {store} does not exist")
    if store is not None and read_only and not (store / "commitlog").is_dir():
        raise CliError(f"{store} is not a store: it has no commitlog directory")


@app.command("serve")
def serve(
    data: DataDir = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on [default: 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535, help="Port [default: 8080].")] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Also put a few demo messages a second to DemoTopic.")]
    = False,
    store: Annotated[Path | None, typer.Option("--store", help="Serve the store in this directory instead of the "
                                               "data directory's (mqlens.db stays in the data directory).")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Change nothing in the --store directory (a "
                                            "RocketMQ store, say): writes answer 409.")] = False,
    commitlog_file_size: Annotated[int | None, typer.Option("--commitlog-file-size", min=4096,
                                                            help="Commit log segment bytes.")] = None,
    cq_file_size: Annotated[int | None, typer.Option("--cq-file-size", min=20, help="Consume queue file bytes.")]
    = None,
    index_slots: Annotated[int | None, typer.Option("--index-slots", min=1, help="Hash slots per index file.")]
    = None,
    index_entries: Annotated[int | None, typer.Option("--index-entries", min=2, help="Entries per index file.")]
    = None,
    delay_levels: DelayLevelsOpt = None,
    grpc_port: Annotated[int | None, typer.Option("--grpc-port", min=0, max=65535, help="Port of the gRPC front "
                                                  "for RocketMQ 5 clients; 0 turns it off [default: 8081].")] = None,
    grpc_tls_cert: Annotated[Path | None, typer.Option("--grpc-tls-cert", help="PEM certificate (chain): the gRPC "
                                                       "front serves TLS only.")] = None,
    grpc_tls_key: Annotated[Path | None, typer.Option("--grpc-tls-key", help="PEM private key of the certificate.")]
    = None,
    namesrv: Annotated[str | None, typer.Option("--namesrv", help="Attach to a live RocketMQ cluster through its "
                                                "name servers (host:port;host:port) instead of the embedded store.")]
    = None,
    cluster_access_key: Annotated[str | None, typer.Option("--cluster-access-key", help="ACL access key the "
                                                           "console signs its cluster requests with.")] = None,
    cluster_secret_key: Annotated[str | None, typer.Option("--cluster-secret-key", help="Its secret key (better: "
                                                           "MQLENS_CLUSTER_SECRET_KEY, unseen by ps).")] = None,
) -> None:
    """Migrate the database, then serve the console and REST API, and the gRPC front for RocketMQ 5
    clients (one process, one worker). With --namesrv the console shows a live RocketMQ cluster."""
    import logging
    import signal

    import uvicorn

    from app.allocator import limit_malloc_arenas
    from app.main import create_app

    settings = _settings(data_dir=data, host=host, port=port, demo=demo or None, store_dir=store,
                         read_only=read_only or None, commitlog_file_size=commitlog_file_size,
                         cq_file_size=cq_file_size, index_slots=index_slots, index_entries=index_entries,
                         delay_levels=delay_levels, grpc_port=grpc_port, grpc_tls_cert=grpc_tls_cert,
                         grpc_tls_key=grpc_tls_key, namesrv=namesrv, cluster_access_key=cluster_access_key,
                         cluster_secret_key=cluster_secret_key)
    if settings.namesrv is None:
        _check_served_store(store, read_only)
        _check_geometry(settings.store_dir, settings.geometry())
    elif store is not None:
        raise CliError("--store serves a store directory; --namesrv attaches to a live cluster: give one of them")
    if settings.listens_beyond_loopback() and settings.anonymous_viewer:
        raise CliError(f"--host {settings.host} with MQLENS_ANONYMOUS_VIEWER would show message bodies and "
                       "topics to anyone on the network: turn anonymous viewing off, or listen on 127.0.0.1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    if settings.listens_beyond_loopback():
        logging.getLogger("mqlens").warning(
            "listening on %s, beyond this machine: every page and API call needs an account; the server answers "
            "only the host names %s (add yours with MQLENS_ALLOWED_HOSTS)%s", settings.host,
            ", ".join(settings.host_names()),
            "" if settings.secure_cookies else "; serve it behind HTTPS and set MQLENS_SECURE_COOKIES=true")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if settings.namesrv is not None:
        logging.getLogger("mqlens").info("data in %s; attached to the RocketMQ cluster of name servers %s%s",
                                         settings.data_dir, settings.namesrv,
                                         " (requests signed)" if settings.cluster_access_key else "")
    else:
        logging.getLogger("mqlens").info("data in %s, store in %s%s", settings.data_dir, settings.store_dir,
                                         " (read-only)" if settings.read_only else "")
    limit_malloc_arenas()
    server_app = create_app(settings)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: once the
    # store is closed that signal only ends `serve`, with status 0.
    ignored = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # X-Forwarded-For is believed from the configured proxies only (uvicorn's default: from loopback).
        proxies = settings.trusted_proxy_list()
        uvicorn.run(server_app, host=settings.host, port=settings.port, workers=1, log_level="info",
                    proxy_headers=bool(proxies), forwarded_allow_ips=proxies or [])
    finally:
        for sig, handler in ignored.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    try:
        code = app(args=argv, standalone_mode=False)  # click returns an Exit's code instead of raising it
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("mqlens: aborted", file=sys.stderr)
        return 1
    except typer.TyperException as exc:  # usage errors: unknown option, bad number...
        print(f"mqlens: error: {exc.format_message()}", file=sys.stderr)
        return EXIT_USAGE
    except (CliError, StoreError, ServiceError, ValueError, OSError) as exc:
        print(f"mqlens: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return EXIT_USAGE
    return code if isinstance(code, int) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # `python -m app.cli`: how the console starts pipeline jobs
    entry()
