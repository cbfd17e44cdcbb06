"""A full disk under the store and the operator database (issue #14): every write endpoint
answers with what it did (2xx) or a 507 with Retry-After, never a 500; a refused change is not
shown as applied and an answered one survives a restart; no temporary file is left; reads and
lookups go on; nothing acknowledged is lost and the store reopens clean.

Each test runs on a real tmpfs filled to the last byte where the machine lets the test mount one,
and on a fault-injecting layer (tests/reliability/small_disk.py) everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from store.broker.metadata import TopicConfig
from store.clock import FakeClock
from store.errors import DiskFullError
from store.format import topics
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.app.conftest import assert_error, make_settings, running
from tests.reliability.small_disk import InjectedDisk, TmpfsDisk, small_disk
from tests.store.helpers import small_config

TOPIC = "Orders"
DEAD = "GID_dead"  # dead-letters at once; its %DLQ% topic exists before the disk fills
FRESH = "GID_fresh"  # dead-letters at once; its first dead letter needs a new %DLQ% topic
WRITTEN = (200, 201)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["tmpfs", "injected"])
def disk(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TmpfsDisk | InjectedDisk]:
    with small_disk(request.param, tmp_path, monkeypatch) as d:
        yield d


def refused_or_done(r: httpx.Response, *done: int) -> bool:
    """True when the request did its work; otherwise it must be the one disk-full answer."""
    if r.status_code in (done or WRITTEN):
        return True
    assert_error(r, 507)
    assert int(r.headers["Retry-After"]) > 0
    assert any(word in r.json()["error"] for word in ("disk", "space")), r.text
    return False


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


async def produce(client: httpx.AsyncClient, bodies: list[str]) -> httpx.Response:
    return await client.post(f"/api/topics/{TOPIC}/messages", json=[{"body": b, "keys": [b]} for b in bodies])


async def handles(client: httpx.AsyncClient, group: str, count: int) -> list[str]:
    r = await client.post(f"/api/groups/{group}/receive", json={"topic": TOPIC, "max": count})
    assert r.status_code == 200, r.text
    return [m["receipt_handle"] for m in r.json()["messages"]]


@pytest.mark.anyio
async def test_every_write_answers_done_or_507_and_nothing_is_lost(disk, clock):
    settings = make_settings(disk.root / "data")
    acknowledged: dict[str, str] = {}  # offset id -> body
    applied: dict[str, bool] = {}
    async with running(settings, clock) as api:
        c = api.client
        disk.watch_database(api.sessions.kw["bind"])
        for group in (DEAD, FRESH):
            assert (await c.put(f"/api/groups/{group}", json={"max_reconsume_times": 0})).status_code == 200
        r = await produce(c, [f"before-{n}" for n in range(20)])
        assert r.status_code == 200
        acknowledged.update({p["offset_msg_id"]: f"before-{n}" for n, p in enumerate(r.json()["results"])})
        for handle in await handles(c, DEAD, 2):
            assert (await c.post(f"/api/groups/{DEAD}/nack", json={"receipt_handle": handle})).status_code == 200
        dlq = topics.dlq_topic(DEAD)
        dead = [api.store.get_by_queue_offset(dlq, 0, n).offset_msg_id for n in range(2)]
        [fresh_handle] = await handles(c, FRESH, 1)

        disk.fill()

        r = await produce(c, ["during-0"])
        if refused_or_done(r):
            acknowledged[r.json()["results"][0]["offset_msg_id"]] = "during-0"
        r = await produce(c, ["during-1", "during-2", "during-3"])
        if refused_or_done(r):
            acknowledged.update({p["offset_msg_id"]: f"during-{n + 1}" for n, p in enumerate(r.json()["results"])})
        applied["nack"] = refused_or_done(await c.post(f"/api/groups/{FRESH}/nack",
                                                       json={"receipt_handle": fresh_handle}))
        applied["group"] = refused_or_done(await c.put("/api/groups/GID_new", json={"max_reconsume_times": 7}))
        applied["topic"] = refused_or_done(await c.put("/api/topics/NewTopic", json={"queues": 2}))
        applied["delays"] = refused_or_done(await c.put("/api/config/delay-levels", json={"levels": "1s 2s 3s"}))
        applied["resend"] = refused_or_done(await c.post(f"/api/messages/{dead[0]}/resend", json={}))
        applied["dlq_resend"] = refused_or_done(await c.post(f"/api/dlq/{DEAD}/resend",
                                                             json={"message_ids": [dead[1]]}))
        applied["reset"] = refused_or_done(await c.post(f"/api/groups/{DEAD}/offsets/reset",
                                                        json={"topic": TOPIC, "to": "earliest"}))
        applied["user"] = refused_or_done(await c.post("/api/users", json={
            "name": "carol", "password": "a-long-password-1", "role": "operator"}))
        applied["token"] = refused_or_done(await c.post("/api/tokens", json={"name": "script", "role": "viewer"}))
        applied["redrive"] = refused_or_done(await c.post("/api/redrive-jobs", json={"group": DEAD, "dry_run": True}))

        # What a refused change would have shown is not there; reads and lookups go on.
        group = (await c.get("/api/groups/GID_new")).json()["group"]
        assert group["configured"] is applied["group"]
        assert ("NewTopic" in {t["name"] for t in (await c.get("/api/topics")).json()["topics"]}) is applied["topic"]
        levels = (await c.get("/api/config/delay-levels")).json()["levels"]
        assert (levels == "1s 2s 3s") is applied["delays"]
        for offset_id, body in acknowledged.items():
            r = await c.get(f"/api/messages/by-id/{offset_id}")
            assert r.status_code == 200 and r.json()["message"]["body_text"] == body
        for page in ("/", "/groups", "/dead-letters", f"/messages/{dead[0]}"):
            assert (await c.get(page, headers={"Accept": "text/html"})).status_code == 200, page
        assert leftovers(disk.root) == []

        disk.free()
        assert refused_or_done(await produce(c, ["after"]))
        assert (await c.put("/api/groups/GID_after", json={"max_reconsume_times": 3})).status_code == 200
        assert leftovers(disk.root) == []

    async with running(settings, clock) as again:  # check_store ran between: the store reopened clean
        c = again.client
        for offset_id, body in acknowledged.items():
            r = await c.get(f"/api/messages/by-id/{offset_id}")
            assert r.status_code == 200 and r.json()["message"]["body_text"] == body
        assert (await c.get("/api/groups/GID_new")).json()["group"]["configured"] is applied["group"]
        assert (await c.get("/api/groups/GID_after")).json()["group"]["max_reconsume_times"] == 3
        names = {t["name"] for t in (await c.get("/api/topics")).json()["topics"]}
        assert ("NewTopic" in names) is applied["topic"]
        assert ((await c.get("/api/config/delay-levels")).json()["levels"] == "1s 2s 3s") is applied["delays"]
        users = {u["name"] for u in (await c.get("/api/users")).json()["users"]}
        assert ("carol" in users) is applied["user"]
        fresh_dlq = again.store.queues.get(topics.dlq_topic(FRESH), 0)
        assert (fresh_dlq is not None and fresh_dlq.max_offset == 1) is applied["nack"]


def test_a_store_closed_on_a_full_disk_says_so_and_reopens_with_everything(disk):
    root = disk.root / "store"
    with MessageStore.open(root, small_config()) as store:
        kept = [store.put(NewMessage(TOPIC, f"m{n}".encode())) for n in range(10)]
    store = MessageStore.open(root, small_config())
    kept += [store.put(NewMessage(TOPIC, f"m{n}".encode())) for n in range(10, 20)]
    store.commit_offset("GID_c", TOPIC, kept[0].queue_id, 1)  # the offsets file is written at close
    disk.fill()
    try:
        with pytest.raises(DiskFullError, match="recovers from its log"):
            store.close()
    finally:
        disk.free()
    assert leftovers(disk.root) == []
    with MessageStore.open(root, small_config()) as again:
        assert again.abnormal_shutdown
        assert [again.get_by_offset_id(r.offset_msg_id).body for r in kept] == [f"m{n}".encode() for n in range(20)]
        assert again.check().ok


def test_a_topic_or_group_change_the_disk_refuses_is_not_applied(disk):
    root = disk.root / "store"
    with MessageStore.open(root, small_config()) as store:
        store.metadata.update_group("GID_g", max_reconsume_times=5)
        disk.fill()
        try:
            with pytest.raises(DiskFullError):
                store.metadata.update_group("GID_g", max_reconsume_times=9)
            with pytest.raises(DiskFullError):
                store.put_topic(TopicConfig("Brand_new", queues=2))
            assert store.metadata.group("GID_g").max_reconsume_times == 5
            assert store.metadata.topic("Brand_new") is None
            assert leftovers(disk.root) == []
        finally:
            disk.free()
    with MessageStore.open(root, small_config()) as again:
        assert again.metadata.group("GID_g").max_reconsume_times == 5


def test_the_free_space_guard_scales_with_the_geometry():
    assert StoreConfig().min_free_bytes() == 64 * 1024 * 1024
    small = small_config()
    assert small.min_free_bytes() < 8 * 1024 * 1024
    assert StoreConfig(disk_min_free_bytes=123).min_free_bytes() == 123
