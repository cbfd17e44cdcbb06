"""GET/PUT /api/config/delay-levels: versions and audit rows in SQL, then the store."""

from __future__ import annotations

import asyncio
import json
import threading

import anyio
import pytest
from sqlalchemy import select

from app.models import AuditEntry, ConfigVersion
from app.services.config import DELAY_LEVELS, SET_DELAY_LEVELS
from store.broker.delay_inference import DEFAULT_TABLE_TEXT
from store.format import topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS
from tests.app.conftest import assert_error, audit_rows, make_settings, put_messages, running

pytestmark = pytest.mark.anyio

URL = "/api/config/delay-levels"
NEW = "2s 4s 8s"
DEFAULT_SOURCE = DEFAULT_TABLE_TEXT


def rows(sessions):
    with sessions() as s:
        versions = list(s.scalars(select(ConfigVersion).order_by(ConfigVersion.id)))
    return versions, audit_rows(sessions)


@pytest.fixture
def applied(api, monkeypatch):
    """The tables handed to the store's set_delay_levels, in order."""
    calls: list[str] = []
    real = api.store.set_delay_levels

    def recording(levels: str) -> None:
        calls.append(levels)
        real(levels)

    monkeypatch.setattr(api.store, "set_delay_levels", recording)
    return calls


async def test_default_table_is_version_0(api):
    r = await api.client.get(URL)
    assert r.status_code == 200
    assert r.json() == {"ok": True, "levels": DEFAULT_DELAY_LEVELS, "version": 0,
                                            "source": DEFAULT_SOURCE}


async def test_put_records_a_version_and_an_audit_entry_then_applies(api, applied, clock):
    r = await api.client.put(URL, json={"levels": NEW})
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "levels": NEW, "version": 1}
    assert applied == [NEW] and api.store.delay_levels.spec == NEW
    assert (await api.client.get(URL)).json() == {"ok": True, "levels": NEW, "version": 1}
    versions, entries = rows(api.sessions)
    assert [(v.kind, v.version, v.value, v.created_at_ms) for v in versions] == [
        (DELAY_LEVELS, 1, NEW, clock.now_ms())]
    [entry] = entries
    assert (entry.action, entry.target, entry.outcome, entry.at_ms) == (SET_DELAY_LEVELS, DELAY_LEVELS, "ok",
                                                                          clock.now_ms())
    assert json.loads(entry.detail) == {"request": {"levels": NEW}, "result": {
        "version": 1, "before": {"version": 0, "levels": DEFAULT_DELAY_LEVELS}, "after": {"version": 1, "levels": NEW}}}
    r = await api.client.put(URL, json={"levels": "1m"})
    assert r.json()["version"] == 2 and applied == [NEW, "1m"]


async def test_setting_the_table_in_use_changes_nothing(api, applied):
    r = await api.client.put(URL, json={"levels": DEFAULT_DELAY_LEVELS})
    assert r.json() == {"ok": True, "levels": DEFAULT_DELAY_LEVELS, "version": 0, "source": DEFAULT_SOURCE}
    assert applied == [] and rows(api.sessions) == ([], [])


@pytest.mark.parametrize("levels", ["", "1s  5s", "1x", "0s", "-1s", "5", "1s 2q"])
async def test_bad_tables_are_400_and_record_nothing(api, applied, levels):
    assert_error(await api.client.put(URL, json={"levels": levels}), 400)
    assert applied == [] and rows(api.sessions) == ([], [])


async def test_wrong_body_is_422(api, applied):
    assert_error(await api.client.put(URL, json={"levels": 5}), 422, "levels")
    assert_error(await api.client.put(URL, json={}), 422, "levels")


async def test_idempotency_key_acts_once(api, applied):
    headers = {"Idempotency-Key": "click-1"}
    first = await api.client.put(URL, json={"levels": NEW}, headers=headers)
    again = await api.client.put(URL, json={"levels": NEW}, headers=headers)
    assert first.json() == again.json() == {"ok": True, "levels": NEW, "version": 1}
    assert applied == [NEW]
    assert len(rows(api.sessions)[1]) == 1
    assert_error(await api.client.put(URL, json={"levels": "9s"}, headers=headers), 409, "different request")
    assert_error(await api.client.put(URL, json={"levels": "9s"}, headers={"Idempotency-Key": "k" * 256}), 422,
                 "idempotency-key")
    assert applied == [NEW]


async def test_a_repeat_after_another_change_gets_the_first_answer_without_acting(api, applied):
    # The table in use changed in between, so only the idempotency key keeps the repeat from acting.
    headers = {"Idempotency-Key": "click-1"}
    first = await api.client.put(URL, json={"levels": NEW}, headers=headers)
    assert (await api.client.put(URL, json={"levels": "1m"})).json()["version"] == 2
    again = await api.client.put(URL, json={"levels": NEW}, headers=headers)
    assert again.json() == first.json() == {"ok": True, "levels": NEW, "version": 1}
    assert applied == [NEW, "1m"] and api.store.delay_levels.spec == "1m"
    assert [v.version for v in rows(api.sessions)[0]] == [1, 2] and len(rows(api.sessions)[1]) == 2


class WatchedLock:
    """A lock that tells when a second holder starts waiting for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._attempts = 0
        self.second_waiting = threading.Event()

    def __enter__(self):
        self._attempts += 1
        if self._attempts == 2:
            self.second_waiting.set()
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()


async def test_a_change_waits_for_the_one_being_applied(api, monkeypatch):
    lock = api.app.state.config_lock = WatchedLock()
    applying, go_on = threading.Event(), threading.Event()
    real = api.store.set_delay_levels

    def slow(levels: str) -> None:
        if levels == "1s":
            applying.set()
            assert go_on.wait(30)
        real(levels)

    monkeypatch.setattr(api.store, "set_delay_levels", slow)
    first = asyncio.create_task(api.client.put(URL, json={"levels": "1s"}))
    assert await anyio.to_thread.run_sync(applying.wait, 30)
    second = asyncio.create_task(api.client.put(URL, json={"levels": "2s"}))
    assert await anyio.to_thread.run_sync(lock.second_waiting.wait, 30)
    assert [v.value for v in rows(api.sessions)[0]] == ["1s"]  # the second has recorded nothing yet
    go_on.set()
    assert (await first).json()["version"] == 1 and (await second).json()["version"] == 2
    assert api.store.delay_levels.spec == "2s"
    assert (await api.client.get(URL)).json() == {"ok": True, "levels": "2s", "version": 2}


async def test_concurrent_changes_leave_the_store_on_the_newest_version(api):
    tables = [f"{i}s {i}m" for i in range(1, 9)]
    answers = [r.json() for r in await asyncio.gather(*(api.client.put(URL, json={"levels": t}) for t in tables))]
    version_of = {a["levels"]: a["version"] for a in answers}
    assert sorted(version_of.values()) == list(range(1, 9))
    newest = max(version_of, key=version_of.__getitem__)
    assert api.store.delay_levels.spec == newest
    assert (await api.client.get(URL)).json() == {"ok": True, "levels": newest, "version": 8}
    assert [e.outcome for e in rows(api.sessions)[1]] == ["ok"] * 8


async def test_a_store_failure_is_audited_and_the_version_withdrawn(api, monkeypatch):
    def refuse(levels):
        raise RuntimeError("store said no")

    monkeypatch.setattr(api.store, "set_delay_levels", refuse, raising=False)
    assert_error(await api.client.put(URL, json={"levels": NEW}), 500)
    versions, [entry] = rows(api.sessions)
    assert versions == []
    assert entry.outcome == "failed" and "store said no" in entry.outcome_detail
    assert (await api.client.get(URL)).json()["version"] == 0


async def test_the_newest_table_survives_a_restart(data_dir):
    settings = make_settings(data_dir)
    async with running(settings) as api:
        assert (await api.client.put(URL, json={"levels": NEW})).status_code == 200
    async with running(settings) as api:
        assert api.store.delay_levels.spec == NEW
        assert (await api.client.get(URL)).json() == {"ok": True, "levels": NEW, "version": 1}


def _pending(version: int | None, levels: str) -> AuditEntry:
    result = {} if version is None else {"result": {"version": version}}
    return AuditEntry(at_ms=1, actor="a", action=SET_DELAY_LEVELS, target=DELAY_LEVELS, outcome="pending",
                      detail=json.dumps({"request": {"levels": levels}, **result}))


async def test_a_change_cut_by_a_crash_is_completed_at_start_up(data_dir):
    settings = make_settings(data_dir)
    async with running(settings) as api:
        with api.sessions.begin() as s:  # what a crash between the record and the act leaves
            s.add_all([ConfigVersion(kind=DELAY_LEVELS, version=v, value=levels, created_at_ms=1, actor="a")
                       for v, levels in ((1, "7s"), (2, NEW))])
            s.add_all([_pending(1, "7s"), _pending(2, NEW), _pending(None, "9s")])
        assert api.store.delay_levels.spec == DEFAULT_DELAY_LEVELS
    async with running(settings) as api:
        assert api.store.delay_levels.spec == NEW
        assert (await api.client.get(URL)).json()["version"] == 2
        _, entries = rows(api.sessions)
        assert [(e.outcome, e.outcome_detail) for e in entries] == [
            ("failed", "interrupted; version 2 replaced it"), ("ok", "completed at start-up"),
            ("failed", "interrupted before it was recorded")]
    async with running(settings) as api:  # nothing left to do
        assert [e.outcome for e in rows(api.sessions)[1]] == ["failed", "ok", "failed"]


async def test_the_store_uses_the_new_table(api, clock):
    r = await api.client.put(URL, json={"levels": NEW})
    assert r.status_code == 200, r.text
    assert api.store.delay_levels.spec == NEW and api.store.delay_levels.delay_ms(2) == 4000
    [result] = await put_messages(api, "Orders", {"body": "x", "delay_level": 2})
    assert result["topic"] == topics.SCHEDULE_TOPIC
    clock.advance(3999)
    assert api.store.deliver_due().delivered == []
    clock.advance(1)
    [delivered] = api.store.deliver_due().delivered
    assert delivered.topic == "Orders"
