"""Delay-level versions against the store's own table: version 0 is the table the store had
before any change (its diff base, and a rollback target), the preview page outside htmx, and a
change a crash cut while the store's file was being written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store.format.delay_levels import DEFAULT_DELAY_LEVELS
from store.log.delay_levels_file import DELAY_LEVELS_FILE
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.app.conftest import assert_error, bearer, make_settings, running

pytestmark = pytest.mark.anyio

URL = "/api/config/delay-levels"
PAGE = "/config/delay-levels"
HTML = {"Accept": "text/html"}
READERS = ["viewer", "support", "operator", "admin"]
PROJECT_DIR = Path(__file__).resolve().parents[2]


async def test_version_1_shows_what_it_changed_from_the_stores_table(api):
    assert (await api.client.put(URL, json={"levels": "1s 5s 9s"})).status_code == 200
    body = (await api.client.get(f"{URL}/versions")).json()
    first, original = body["versions"]
    removed = DEFAULT_DELAY_LEVELS.split()[3:]
    assert first["version"] == 1
    assert first["changes"] == ["level 3: 10s -> 9s", *(f"level {n} removed (was {was})"
                                                       for n, was in enumerate(removed, start=4))]
    assert (original["version"], original["levels"]) == (0, DEFAULT_DELAY_LEVELS)


async def test_rollback_to_version_0_brings_back_the_stores_table(api):
    for levels in ("1s 2s", "3s 4s"):
        assert (await api.client.put(URL, json={"levels": levels})).status_code == 200
    r = await api.client.post(f"{URL}/rollback", json={"version": 0, "expected_version": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "levels": DEFAULT_DELAY_LEVELS, "version": 3}
    assert api.store.delay_levels.spec == DEFAULT_DELAY_LEVELS
    newest = (await api.client.get(f"{URL}/versions")).json()["versions"][0]
    assert newest["version"] == 3 and "level 3 added: 10s" in newest["changes"]


async def test_the_page_offers_and_does_the_rollback_to_version_0(api):
    assert (await api.client.post(PAGE, data={"levels": "2s 4s", "expected_version": "0"},
                                  headers=HTML)).status_code == 303
    page = await api.client.get(PAGE, headers=HTML)
    assert "Roll back to 0" in page.text and "level 1: 1s -&gt; 2s" in page.text
    r = await api.client.post(f"{PAGE}/rollback", data={"version": "0", "expected_version": "1"}, headers=HTML)
    assert r.status_code == 303, r.text
    assert (await api.client.get(URL)).json() == {"ok": True, "levels": DEFAULT_DELAY_LEVELS, "version": 2}
    assert (await api.client.post(f"{PAGE}/rollback", data={"version": " ", "expected_version": "2"},
                                  headers=HTML)).status_code == 400


@pytest.fixture
async def tokens(api):
    made = {}
    for role in READERS:
        r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
        made[role] = r.json()["value"]
    return made


@pytest.mark.parametrize("role", READERS)
async def test_the_preview_outside_htmx_is_a_page_for_every_role(api, tokens, role):
    r = await api.client.get(f"{PAGE}/preview", params={"levels": "1s"}, headers={**HTML, **bearer(tokens[role])})
    assert r.status_code == 200, r.text
    assert "<html" in r.text and 'data-testid="preview-levels"' in r.text


async def test_the_preview_outside_htmx_answers_json_and_refuses_a_bad_table(api):
    twin = await api.client.get(f"{PAGE}/preview.json", params={"levels": "1s 2s"})
    assert twin.status_code == 200 and [row["label"] for row in twin.json()["preview"]["levels"]] == ["1s", "2s"]
    bad = await api.client.get(f"{PAGE}/preview", params={"levels": "1s 2x"}, headers=HTML)
    assert bad.status_code == 422 and 'data-testid="preview-error"' in bad.text
    bad_twin = await api.client.get(f"{PAGE}/preview.json", params={"levels": "1s 2x"})
    assert bad_twin.status_code == 422 and bad_twin.json()["preview"]["valid"] is False
    fragment = await api.client.get(f"{PAGE}/preview", params={"levels": "1s 2x"},
                                    headers={**HTML, "HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text


CRASHING_CHANGE = textwrap.dedent("""
    # The server's first delay-level change, killed once the store's new table file is written
    # in full but before it is renamed into place.
    import asyncio, os, signal, sys
    import httpx
    from app.main import create_app
    from tests.app.conftest import make_settings, TEST_HOST, ADMIN_TOKEN
    from pathlib import Path

    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if str(target).endswith("delayLevels.json"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(source, target, *args, **kwargs)

    async def main():
        app = create_app(make_settings(Path(sys.argv[1])))
        transport = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=transport, base_url=f"http://{TEST_HOST}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
            r = await client.post("/api/topics/Orders/messages", json={"body": "before", "delay_level": 3})
            assert r.status_code == 200, r.text
            os.replace = replace
            await client.put("/api/config/delay-levels", json={"levels": sys.argv[2]})

    asyncio.run(main())
""")


async def test_a_crash_while_the_first_table_file_is_written_is_completed_from_the_file(data_dir):
    new = "2s 4s 8s"
    child = subprocess.run([sys.executable, "-c", CRASHING_CHANGE, str(data_dir), new],
                           env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)}, capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    settings = make_settings(data_dir)
    config_dir = settings.store_dir / "config"
    assert (config_dir / f"{DELAY_LEVELS_FILE}.tmp").exists() and not (config_dir / DELAY_LEVELS_FILE).exists()

    async with running(settings) as api:
        assert (await api.client.get(URL)).json() == {"ok": True, "levels": new, "version": 1}
        assert api.store.delay_levels.spec == new
    assert not (config_dir / f"{DELAY_LEVELS_FILE}.tmp").exists()
    saved = json.loads((config_dir / DELAY_LEVELS_FILE).read_text())
    assert saved["delayLevels"] == new
    assert [t["delayLevels"] for t in saved["tables"]] == [DEFAULT_DELAY_LEVELS, new]

    # The store alone (no database telling it) uses the table recorded, and the message scheduled
    # before the change keeps the delay it was written with (level 3 of the default table: 10 s).
    store_config = StoreConfig(geometry=settings.geometry(), schedule_interval_ms=0)
    with MessageStore.open(settings.store_dir, store_config) as store:
        assert store.delay_levels.spec == new
        unit = store.queues.get("SCHEDULE_TOPIC_XXXX", 2).get(0)
        record = store.read(unit.phys_offset)
        assert unit.tags_code - record.store_timestamp == 10_000
        store.put(NewMessage(topic="Orders", body=b"after", delay_level=3))
    async with running(settings) as api:
        assert (await api.client.get(URL)).json()["version"] == 1
        assert_error(await api.client.post(f"{URL}/rollback", json={"version": 7}), 404)
