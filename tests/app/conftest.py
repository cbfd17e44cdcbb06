"""App fixtures: a fresh data directory (store + migrated SQLite) per test, the app driven
through httpx's ASGI transport with its lifespan run, and the store checked at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.main import create_app
from app.models import AuditEntry
from app.services.accounts import ADD_USER, CREATE_TOKEN, REVOKE_TOKEN, UPDATE_USER
from store.clock import FakeClock
from store.message_store import MessageStore, StoreConfig

ADMIN_TOKEN = "test-admin-token-0123456789"
TEST_HOST = "mqlens.test"
SMALL_GEOMETRY = {"commitlog_file_size": 256 * 1024, "cq_file_size": 20 * 512, "index_slots": 64,
                  "index_entries": 1024}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_settings(data_dir: Path, **overrides) -> Settings:
    values = {"data_dir": data_dir, "flush": "sync", "schedule_interval_ms": 0, "allowed_hosts": TEST_HOST,
              "bootstrap_admin_token": ADMIN_TOKEN, "admin_password": "first-admin-password", "grpc_port": 0,
              "pipeline_warm": False, **SMALL_GEOMETRY}  # a warm Spark (a JVM) only where a test asks
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Running:
    app: FastAPI
    client: httpx.AsyncClient
    settings: Settings

    @property
    def store(self) -> MessageStore:
        return self.app.state.store

    @property
    def sessions(self) -> sessionmaker[Session]:
        return self.app.state.sessions


def check_store(settings: Settings) -> None:
    """The store the app left behind reopens cleanly and is consistent."""
    with MessageStore.open(settings.store_dir, StoreConfig(geometry=settings.geometry()), read_only=True) as s:
        assert not s.abnormal_shutdown
        report = s.check()
        assert report.ok, report.problems


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def running(settings: Settings, clock: FakeClock | None = None, *, as_admin: bool = True
                  ) -> AsyncIterator[Running]:
    """The app with its lifespan run; the client sends the bootstrap admin token unless `as_admin` is false."""
    app = create_app(settings, clock)
    transport = httpx.ASGITransport(app=app)
    headers = bearer(ADMIN_TOKEN) if as_admin else {}
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url=f"http://{TEST_HOST}",
                                                                   headers=headers) as client:
        yield Running(app, client, settings)
    check_store(settings)


@pytest.fixture
async def api(data_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(make_settings(data_dir), clock) as r:
        yield r


def assert_error(response: httpx.Response, status: int, *fragments: str) -> str:
    """The one error shape: {"ok": false, "error": message, "status": N}; returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"ok", "error", "status"}
    assert body["ok"] is False and body["status"] == status
    assert isinstance(body["error"], str) and body["error"]
    for fragment in fragments:
        assert fragment in body["error"], body["error"]
    return body["error"]


async def put_messages(api: Running, topic: str, messages: dict | list[dict]) -> list[dict]:
    """POST one message (an object) or many (a list) to the topic; the put results, 200 asserted."""
    r = await api.client.post(f"/api/topics/{topic}/messages", json=messages)
    assert r.status_code == 200, r.text
    return r.json()["results"]


ACCOUNT_ACTIONS = (ADD_USER, UPDATE_USER, CREATE_TOKEN, REVOKE_TOKEN)


def audit_rows(sessions: sessionmaker[Session], *, accounts: bool = False, action: str | None = None
               ) -> list[AuditEntry]:
    """Every audit entry (of `action`), oldest first; without the account changes (the bootstrap
    token and the first admin every test server makes at start) unless `accounts`."""
    query = select(AuditEntry).order_by(AuditEntry.id)
    if action is not None:
        query = query.where(AuditEntry.action == action)
    elif not accounts:
        query = query.where(AuditEntry.action.not_in(ACCOUNT_ACTIONS))
    with sessions() as s:
        return list(s.scalars(query))
