"""SQLite (or any SQLAlchemy URL) for operator state: engine, sessions and migrations."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

# The migrations folder sits beside the app package in the project (found from any cwd).
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
SQLITE_CACHE_KIB = 512
PRIVATE_MODE = 0o600  # the owner reads and writes; nobody else


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _on_sqlite_connect(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=5000")
        # Each pooled connection keeps its own page cache, growing with the database up to this;
        # the operating system caches the file as well, so a small one costs a read() at most.
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    finally:
        cursor.close()


def _private_sqlite_file(path: Path) -> None:
    """The database holds password hashes, the cookie signing key and the audit log: it is made
    readable by its owner only before SQLite opens it (SQLite gives its -wal and -shm files the
    database's mode), and one left readable by others is tightened."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # SQLite takes an empty file as an empty database
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if stat.S_IMODE(file.stat().st_mode) & ~PRIVATE_MODE:
                file.chmod(PRIVATE_MODE)
        except FileNotFoundError:
            pass


def make_engine(url: str) -> Engine:
    """An engine; for SQLite with WAL journaling and foreign keys enforced on every connection,
    its file private to its owner."""
    if _is_sqlite(url):
        path = _sqlite_file(url)
        if path is not None:
            _private_sqlite_file(path)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _on_sqlite_connect)
        return engine
    return create_engine(url, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(database_url: str):
    from alembic.config import Config

    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(f"migrations not found at {MIGRATIONS_DIR}: install the project in editable mode")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def migrate(database_url: str, revision: str = "head") -> None:
    """Bring the database schema up to `revision` (creating the SQLite file if needed)."""
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    """The newest revision the migrations know."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def current_revision(database_url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
