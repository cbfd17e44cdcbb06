"""Content search through the REST API and the service: found by a word of the body or a property
value, within a window and topics; bounded, cancellable, owner-only, bodies masked for viewers."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.services.content_search import ContentSearches, LogSnapshot, SearchRequest
from store.clock import FakeClock
from store.message_store import MessageStore, NewMessage
from store.search.matching import ContentQuery
from store.search.walk import Found, Problem, Progress, Segment, walk
from tests.app.conftest import (
    ADMIN_TOKEN,
    TEST_HOST,
    Running,
    assert_error,
    audit_rows,
    bearer,
    make_settings,
    put_messages,
    running,
)
from tests.conftest import GOLDEN_GEOMETRY
from tests.store.helpers import small_config

pytestmark = pytest.mark.anyio

CATASTROPHIC = r"(a+)+$"  # backtracks without end on a body of many a's and one b
SLOW_BODY = "a" * 40 + "b"


async def finished(api: Running, search_id: str, headers: dict | None = None, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = await api.client.get(f"/api/content-searches/{search_id}", headers=headers or {})
        assert r.status_code == 200, r.text
        search = r.json()["search"]
        if search["state"] != "running" or time.monotonic() > deadline:
            return search
        time.sleep(0.05)


async def search(api: Running, headers: dict | None = None, **body) -> dict:
    r = await api.client.post("/api/content-searches", json=body, headers=headers or {})
    assert r.status_code == 202, r.text
    return await finished(api, r.json()["search"]["id"], headers)


async def token(api: Running, name: str, role: str) -> dict:
    r = await api.client.post("/api/tokens", json={"name": name, "role": role})
    assert r.status_code == 201, r.text
    return bearer(r.json()["value"])


async def test_finds_a_message_by_a_word_of_its_body(api):
    await put_messages(api, "Orders", [{"body": f"order {i} shipped"} for i in range(20)])
    [wanted] = await put_messages(api, "Orders", {"body": "order 99 lost in the warehouse", "keys": ["o-99"]})
    found = await search(api, text="warehouse")
    assert found["state"] == "finished" and found["error"] is None and found["problems"] == []
    [hit] = found["hits"]
    assert hit["offset_msg_id"] == wanted["offset_msg_id"] and hit["keys"] == ["o-99"]
    assert hit["where"] == "body" and hit["message_url"] == f"/messages/{wanted['offset_msg_id']}"
    assert hit["snippet"] == "order 99 lost in the warehouse" and hit["snippet_at"] == 21 and hit["match_len"] == 9
    assert hit["snippet_masked"] is False
    assert found["records"] >= 21 and found["scanned_bytes"] > 0 and found["progress"] == 1
    [entry] = audit_rows(api.sessions, action="search_contents")
    assert entry.target == f"content-search:{found['id']}" and '"warehouse"' in entry.detail


async def test_property_values_topics_and_the_window(api, clock: FakeClock):
    await put_messages(api, "Orders", {"body": "plain", "tags": "urgent-refund"})
    clock.advance(60_000)
    middle = clock.now_ms()
    await put_messages(api, "Orders", {"body": "refund please"})
    await put_messages(api, "Payments", {"body": "refund done", "properties": {"reason": "refund"}})
    clock.advance(60_000)
    await put_messages(api, "Orders", {"body": "late refund"})
    everything = await search(api, text="refund")
    assert [h["snippet"] for h in everything["hits"]] == ["urgent-refund", "refund please", "refund done",
                                                          "late refund"]
    assert everything["hits"][0]["where"] == "property" and everything["hits"][0]["property_name"] == "TAGS"
    only_props = await search(api, text="refund", in_body=False)
    assert [(h["topic"], h["property_name"]) for h in only_props["hits"]] == [("Orders", "TAGS"),
                                                                               ("Payments", "reason")]
    assert [h["snippet"] for h in (await search(api, text="refund", topics=["Payments"]))["hits"]] == ["refund done"]
    window = await search(api, text="refund", begin=middle, end=middle + 1000)
    assert [h["snippet"] for h in window["hits"]] == ["refund please", "refund done"]
    assert (await search(api, text="refund", max_hits=2))["hits"][1]["snippet"] == "refund please"


async def test_a_regular_expression(api):
    await put_messages(api, "Orders", [{"body": "id=AB-1234"}, {"body": "id=ab-99"}, {"body": "nothing"}])
    found = await search(api, text=r"(?i)ab-\d{2,}", regex=True)
    assert [h["snippet"][h["snippet_at"]:][:h["match_len"]] for h in found["hits"]] == ["AB-1234", "ab-99"]


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"text": "(unclosed", "regex": True}, 400, "does not compile"),
    ({"text": "x", "in_body": False, "in_properties": False}, 400, "body, the properties or both"),
    ({"text": "x", "begin": 10, "end": 5}, 400, "ends before it begins"),
    ({"text": "x", "topics": ["bad\nname"]}, 400, "not a topic name"),
    ({"text": ""}, 422, "text"),
    ({"text": "x" * 201}, 422, "text"),
    ({"text": "x", "max_hits": 100_000}, 422, "max_hits"),
    ({"text": "x", "max_seconds": 0}, 422, "max_seconds"),
    ({"text": "x", "topics": [f"t{i}" for i in range(21)]}, 422, "topics"),
    ({"text": "x", "surprise": 1}, 422, "surprise"),
    ({"text": 5}, 422, "text"),
])
async def test_bad_requests_are_refused_with_a_reason(api, body, status, fragment):
    assert_error(await api.client.post("/api/content-searches", json=body), status, fragment)


async def test_a_backtracking_regex_times_out_without_holding_the_server(api):
    await put_messages(api, "Orders", {"body": SLOW_BODY})
    r = await api.client.post("/api/content-searches", json={"text": CATASTROPHIC, "regex": True, "max_seconds": 1})
    started = time.monotonic()
    assert (await api.client.get("/api/topics")).status_code == 200  # the server answers meanwhile
    assert time.monotonic() - started < 1
    found = await finished(api, r.json()["search"]["id"])
    assert found["state"] == "timed out" and "1 s" in found["error"]


async def test_cancel_stops_the_scan(api):
    await put_messages(api, "Orders", {"body": SLOW_BODY})
    r = await api.client.post("/api/content-searches", json={"text": CATASTROPHIC, "regex": True})
    search_id = r.json()["search"]["id"]
    started = time.monotonic()
    r = await api.client.post(f"/api/content-searches/{search_id}/cancel")
    assert r.status_code == 200 and r.json()["search"]["state"] == "cancelled"
    assert time.monotonic() - started < 5
    assert (await api.client.post(f"/api/content-searches/{search_id}/cancel")).json()["search"]["state"] == "cancelled"


async def test_at_most_two_run_at_once(api):
    await put_messages(api, "Orders", {"body": SLOW_BODY})
    ids = []
    for _ in range(2):
        r = await api.client.post("/api/content-searches", json={"text": CATASTROPHIC, "regex": True})
        ids.append(r.json()["search"]["id"])
    assert_error(await api.client.post("/api/content-searches", json={"text": "x"}), 409, "at once")
    for search_id in ids:
        await api.client.post(f"/api/content-searches/{search_id}/cancel")
    assert (await api.client.post("/api/content-searches", json={"text": "x"})).status_code == 202


async def test_a_viewer_sees_the_hit_with_its_body_masked_and_only_its_own_searches(api):
    await put_messages(api, "Orders", {"body": "the secret word is marmalade", "tags": "marmalade-tag"})
    viewer, other, support = (await token(api, "vera", "viewer"), await token(api, "otto", "viewer"),
                              await token(api, "sam", "support"))
    seen = await search(api, viewer, text="marmalade")
    [body_hit] = seen["hits"]
    assert body_hit["snippet"] is None and body_hit["snippet_at"] is None and body_hit["snippet_masked"] is True
    assert "secret" not in str(seen)
    tag_hit = (await search(api, viewer, text="marmalade", in_body=False))["hits"][0]
    assert tag_hit["snippet"] == "marmalade-tag" and tag_hit["snippet_masked"] is False
    assert (await search(api, support, text="marmalade"))["hits"][0]["snippet"] == "the secret word is marmalade"
    assert_error(await api.client.get(f"/api/content-searches/{seen['id']}", headers=other), 404, "of yours")
    assert_error(await api.client.post(f"/api/content-searches/{seen['id']}/cancel", headers=other), 404)
    assert_error(await api.client.get("/api/content-searches/not-an-id"), 422)


async def test_anonymous_and_cross_origin_callers_are_refused(api):
    transport = httpx.ASGITransport(app=api.app)
    async with httpx.AsyncClient(transport=transport, base_url=str(api.client.base_url)) as anonymous:
        assert (await anonymous.post("/api/content-searches", json={"text": "x"})).status_code == 401
        r = await anonymous.post("/content-search", data={"text": "x"}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403


async def test_the_page_starts_a_search_and_shows_it(api):
    [wanted] = await put_messages(api, "Orders", {"body": "find the pelican here"})
    r = await api.client.post("/content-search", data={"text": "pelican", "where": "body", "topics": "Orders, Other",
                                                        "begin": "2020-01-02T03:04:05"})
    assert r.status_code == 303
    url = r.headers["location"]
    search_id = url.rsplit("/", 1)[1]
    await finished(api, search_id)
    page = await api.client.get(url, headers={"Accept": "text/html"})
    assert page.status_code == 200 and f'/messages/{wanted["offset_msg_id"]}' in page.text
    assert "<mark>pelican</mark>" in page.text and 'value="2020-01-02T03:04:05"' in page.text
    twin = (await api.client.get(url + ".json")).json()
    assert twin["search"]["hits"][0]["offset_msg_id"] == wanted["offset_msg_id"]
    assert twin["search"]["topics"] == ["Orders", "Other"]
    fragment = await api.client.get(url, headers={"HX-Request": "true"})
    assert fragment.status_code == 286 and "pelican" in fragment.text
    assert (await api.client.get("/content-search", headers={"Accept": "text/html"})).status_code == 200
    r = await api.client.post("/content-search", data={"text": "x", "max_hits": "lots"},
                              headers={"Accept": "application/json"})
    assert_error(r, 400, "whole number")


async def test_a_live_cluster_is_not_served(tmp_path: Path):
    app = create_app(make_settings(tmp_path / "data", namesrv="127.0.0.1:9"))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=transport, base_url=f"http://{TEST_HOST}", headers=bearer(ADMIN_TOKEN)) as client:
        assert_error(await client.post("/api/content-searches", json={"text": "x"}), 409, "embedded store")
        assert_error(await client.get("/content-search.json"), 409, "embedded store")


def test_the_walk_skips_segments_before_the_window_and_reports_a_corrupt_record(tmp_path: Path):
    clock = FakeClock()
    config = small_config()
    with MessageStore.open(tmp_path / "store", config, read_only=False, clock=clock) as store:
        for i in range(300):
            store.put(NewMessage(topic="T", body=f"message {i} ".encode() * 100))
            clock.advance(1000)
        segments = [Segment(base, path) for base, path in store.commitlog.segments()]
        file_size, log_end = store.commitlog.file_size, store.commitlog.end
    assert len(segments) >= 3
    late = 250 * 1000 + FakeClock().now_ms()
    events = list(walk(segments, file_size, log_end, ContentQuery("message 2", begin_ms=late), max_hits=1000,
                       max_bytes=1 << 40))
    found = [e.message.body.decode().split()[1] for e in events if isinstance(e, Found)]
    assert found == [str(i) for i in range(250, 300) if str(i).startswith("2")]
    assert max(e.window_bytes for e in events if isinstance(e, Progress)) < log_end / 2
    # damage the second segment's first record: reported, its segment's rest skipped, the others searched
    with open(segments[1].path, "r+b") as f:
        f.seek(4)
        f.write(b"\0\0\0\0")
    events = list(walk(segments, file_size, log_end, ContentQuery("message 1 "), max_hits=1000, max_bytes=1 << 40))
    [problem] = [e for e in events if isinstance(e, Problem)]
    assert "does not parse" in problem.text and segments[1].path.name in problem.text
    assert [e.message.body[:10] for e in events if isinstance(e, Found)] == [b"message 1 "]
    # a byte limit stops the walk and says so
    events = list(walk(segments, file_size, log_end, ContentQuery("zzz"), max_hits=10, max_bytes=1000,
                       chunk_bytes=400))
    assert "stopped after" in events[-1].text


def test_the_service_searches_only_up_to_the_log_end_it_started_with(tmp_path: Path):
    clock = FakeClock()
    searches = ContentSearches(clock)
    with MessageStore.open(tmp_path / "store", small_config(), read_only=False, clock=clock) as store:
        store.put(NewMessage(topic="T", body=b"before the start"))
        snapshot = LogSnapshot.of(store.commitlog)
        store.put(NewMessage(topic="T", body=b"after the start"))
        view = searches.start(snapshot, SearchRequest("the start"), "user:a")
        done = searches.wait(view.id, timeout_s=30)
    assert done is not None and [h["snippet"] for h in done.hits] == ["before the start"]
    searches.close()


def test_a_segment_deleted_under_the_walk_is_reported_and_the_rest_searched(tmp_path: Path):
    clock = FakeClock()
    with MessageStore.open(tmp_path / "store", small_config(), read_only=False, clock=clock) as store:
        for i in range(300):
            store.put(NewMessage(topic="T", body=f"message {i} ".encode() * 100))
        segments = [Segment(base, path) for base, path in store.commitlog.segments()]
        file_size, log_end = store.commitlog.file_size, store.commitlog.end
    segments[0].path.unlink()
    events = list(walk(segments, file_size, log_end, ContentQuery("message 299 "), max_hits=5, max_bytes=1 << 40))
    assert [e.text for e in events if isinstance(e, Problem)] == [
        f"segment {segments[0].path.name} was deleted by retention before the search reached it"]
    assert [e.message.body[:12] for e in events if isinstance(e, Found)] == [b"message 299 "]
    last = events[-1]
    assert isinstance(last, Progress) and last.scanned_bytes == log_end - segments[1].base


def test_max_hits_ends_the_walk_at_the_last_hit(tmp_path: Path):
    with MessageStore.open(tmp_path / "store", small_config(), read_only=False, clock=FakeClock()) as store:
        store.put_many([NewMessage(topic="T", body=b"same words") for _ in range(50)])
        segments = [Segment(base, path) for base, path in store.commitlog.segments()]
        file_size, log_end = store.commitlog.file_size, store.commitlog.end
    events = list(walk(segments, file_size, log_end, ContentQuery("words"), max_hits=3, max_bytes=1 << 40))
    assert sum(isinstance(e, Found) for e in events) == 3 and isinstance(events[-1], Progress)
    regex = list(walk(segments, file_size, log_end, ContentQuery(r"w\w+s", regex=True), max_hits=7, max_bytes=1 << 40))
    assert sum(isinstance(e, Found) for e in regex) == 7


async def test_a_read_only_console_searches_a_store_rocketmq_wrote(tmp_path: Path, golden_store_dir, clock):
    settings = make_settings(tmp_path / "data", store_dir=golden_store_dir, read_only=True,
                             **dataclasses.asdict(GOLDEN_GEOMETRY))
    async with running(settings, clock) as api:
        found = await search(api, text="order-1001", in_body=False)
        assert found["state"] == "finished" and found["problems"] == []
        ids = [h["offset_msg_id"] for h in found["hits"]]
        assert "0A6C73D900002A9F00000000000000CE" in ids
        assert all(h["where"] == "property" and "order-1001" in h["snippet"] for h in found["hits"])
