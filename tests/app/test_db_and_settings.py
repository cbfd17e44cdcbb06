"""Settings from MQLENS_* variables, the SQLite database and its migrations, `mqlens db upgrade`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pydantic import ValidationError
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from app.cli import main
from app.config import Settings
from app.db import (
    MIGRATIONS_DIR,
    SQLITE_CACHE_KIB,
    alembic_config,
    current_revision,
    head_revision,
    make_engine,
    migrate,
    session_factory,
)
from app.models import AuditEntry, Base, ConfigVersion
from store.log.geometry import DEFAULT_COMMITLOG_FILE_SIZE


def test_settings_defaults(monkeypatch):
    for name in list(os.environ):
        if name.startswith("MQLENS_"):
            monkeypatch.delenv(name)
    s = Settings()
    assert (s.data_dir, s.host, s.port, s.flush) == (Path("data"), "127.0.0.1", 8080, "async")
    assert (s.schedule_interval_ms, s.demo, s.max_pending_puts) == (50, False, 256)
    assert s.database_url == "sqlite:///data/mqlens.db"
    assert s.store_dir == Path("data/store")
    assert s.geometry().commitlog_file_size == DEFAULT_COMMITLOG_FILE_SIZE


def test_settings_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MQLENS_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MQLENS_PORT", "9090")
    monkeypatch.setenv("MQLENS_DEMO", "true")
    monkeypatch.setenv("MQLENS_COMMITLOG_FILE_SIZE", "65536")
    s = Settings()
    assert s.port == 9090 and s.demo is True and s.geometry().commitlog_file_size == 65536
    assert s.database_url == f"sqlite:///{(tmp_path / 'mqlens.db').as_posix()}"
    monkeypatch.setenv("MQLENS_DATABASE_URL", "sqlite:///elsewhere.db")
    assert Settings().database_url == "sqlite:///elsewhere.db"


@pytest.mark.parametrize("env", [{"MQLENS_PORT": "70000"}, {"MQLENS_FLUSH": "sometimes"},
                                 {"MQLENS_MAX_PENDING_PUTS": "-1"}, {"MQLENS_COMMITLOG_FILE_SIZE": "10"}])
def test_bad_settings_are_refused(monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


def test_migrations_build_the_models_schema(tmp_path):
    url = f"sqlite:///{tmp_path / 'sub' / 'op.db'}"
    migrate(url)
    migrate(url)  # again: nothing to do
    assert current_revision(url) == head_revision()
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA cache_size")).scalar() == -SQLITE_CACHE_KIB  # bounded per connection
    finally:
        engine.dispose()


def test_migrations_go_down_and_up_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'op.db'}"
    migrate(url)
    command.downgrade(alembic_config(url), "base")
    engine = make_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
    migrate(url)
    assert current_revision(url) == head_revision()


def test_migrations_are_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (MIGRATIONS_DIR / "versions").is_dir()
    migrate("sqlite:///relative.db")
    assert (tmp_path / "relative.db").is_file()


def test_unique_constraints_hold(tmp_path):
    url = f"sqlite:///{tmp_path / 'op.db'}"
    migrate(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    try:
        with sessions.begin() as s:
            s.add(ConfigVersion(kind="delay_levels", version=1, value="1s", created_at_ms=1, actor="a"))
            s.add(AuditEntry(at_ms=1, actor="a", action="x", target="t", detail="{}", idempotency_key="k",
                             outcome="ok"))
        for row in (ConfigVersion(kind="delay_levels", version=1, value="2s", created_at_ms=2, actor="a"),
                    AuditEntry(at_ms=2, actor="a", action="x", target="t", detail="{}", idempotency_key="k",
                               outcome="ok")):
            with pytest.raises(IntegrityError), sessions.begin() as s:
                s.add(row)
        with sessions.begin() as s:  # keys are optional: many rows without one
            s.add_all([AuditEntry(at_ms=3, actor="a", action="x", target="t", detail="{}", outcome="ok")
                       for _ in range(2)])
    finally:
        engine.dispose()


def test_db_upgrade_command(tmp_path, capsys):
    assert main(["db", "upgrade", "--data", str(tmp_path / "d")]) == 0
    assert f"revision {head_revision()}" in capsys.readouterr().out
    assert (tmp_path / "d" / "mqlens.db").is_file()
    assert main(["db", "upgrade", "--data", str(tmp_path / "d")]) == 0


def test_db_upgrade_refuses_bad_settings(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MQLENS_DATABASE_URL", "nonsense://")
    assert main(["db", "upgrade", "--data", str(tmp_path)]) == 2
    assert "mqlens: error:" in capsys.readouterr().err
