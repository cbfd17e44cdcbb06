"""Credentials that outlive nothing they should not: a disabled user's tokens stop at once, the
operator database is readable by its owner only, and a token's value is never cached."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from app.cli import main
from tests.app.conftest import ADMIN_TOKEN, TEST_HOST, bearer, make_settings, running
from tests.app.test_access import ORIGIN, login

pytestmark = pytest.mark.anyio


def file_mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    """A umask that would leave new files readable by everyone: what the server must not rely on."""
    before = os.umask(0o022)
    yield
    os.umask(before)


async def test_the_tokens_of_a_disabled_user_stop_working_at_once(api):
    r = await api.client.post("/api/users", json={"name": "ada", "password": "ada-password-1", "role": "admin"})
    assert r.status_code == 201
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        assert (await login(browser, "ada", "ada-password-1")).status_code == 303
        r = await browser.post("/api/tokens", json={"name": "ada-script", "role": "operator"},
                               headers={"Origin": ORIGIN})
        assert r.status_code == 201, r.text
        value = r.json()["value"]
    assert (await api.client.get("/api/me", headers=bearer(value))).json()["name"] == "ada-script"
    assert (await api.client.patch("/api/users/ada", json={"disabled": True})).status_code == 200
    r = await api.client.get("/api/topics", headers=bearer(value))
    assert r.status_code == 401 and "disabled" in r.json()["error"]
    assert (await api.client.patch("/api/users/ada", json={"disabled": False})).status_code == 200
    assert (await api.client.get("/api/topics", headers=bearer(value))).status_code == 200


def test_db_upgrade_makes_a_database_only_its_owner_reads(tmp_path, open_umask):
    assert main(["db", "upgrade", "--data", str(tmp_path / "d")]) == 0
    made = sorted(p for p in (tmp_path / "d").iterdir() if p.name.startswith("mqlens.db"))
    assert made and made[0].name == "mqlens.db"
    assert {p.name: file_mode(p) for p in made} == {p.name: 0o600 for p in made}


async def test_the_server_makes_its_database_private_and_tightens_an_old_one(data_dir, clock, open_umask):
    async with running(make_settings(data_dir), clock) as api:
        assert (await api.client.get("/api/me")).status_code == 200
        files = [p for p in data_dir.iterdir() if p.name.startswith("mqlens.db")]
        assert {p.name for p in files} >= {"mqlens.db", "mqlens.db-wal", "mqlens.db-shm"}
        assert {p.name: file_mode(p) for p in files} == {p.name: 0o600 for p in files}
    os.chmod(data_dir / "mqlens.db", 0o644)  # a database an older version made
    async with running(make_settings(data_dir), clock):
        assert file_mode(data_dir / "mqlens.db") == 0o600


async def test_a_new_tokens_value_is_never_stored_by_a_cache(api):
    r = await api.client.post("/api/tokens", json={"name": "fresh", "role": "viewer"})
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    form = {"name": "from-page", "role": "viewer"}
    headers = {"Origin": f"http://{TEST_HOST}", **bearer(ADMIN_TOKEN)}
    page = await api.client.post("/admin/tokens", data=form, headers={**headers, "Accept": "text/html"})
    assert page.status_code == 200 and "mql_" in page.text and page.headers["cache-control"] == "no-store"
    twin = await api.client.post("/admin/tokens", data={**form, "name": "from-twin"},
                                 headers={**headers, "Accept": "application/json"})
    assert twin.status_code == 200 and twin.json()["new_token"]["value"].startswith("mql_")
    assert twin.headers["cache-control"] == "no-store"
