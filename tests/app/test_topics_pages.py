"""The topic list, a topic's queues with offsets and rates, and the queue browser (paging, jumps
to an offset or a time, the end and the expired start of a queue, bad input, htmx fragments)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from store.log.retention import HOUR_MS
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
HTML = {"Accept": "text/html"}
QUEUE = f"/topics/{TOPIC}/queues/0"


async def produce(api, topic: str, messages: list[dict]) -> list[dict]:
    return await put_messages(api, topic, messages)


async def get_json(api, url: str, **params) -> dict:
    r = await api.client.get(url, params=params or None)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def queue_of_45(api, clock) -> int:
    """45 messages in queue 0 of Orders, one a second from the fake clock's start; returns that start."""
    start = clock.now_ms()
    for i in range(45):
        await produce(api, TOPIC, [{"body": f"m{i}", "tags": f"T{i % 3}", "keys": [f"order-{i}"], "queue_id": 0}])
        clock.advance(1000)
    return start


async def test_the_topic_list_puts_user_topics_first_and_marks_the_kinds(api, clock):
    await produce(api, "Zeta", [{"body": "z", "queue_id": 0}])
    clock.advance(5000)
    results = await produce(api, TOPIC, [{"body": f"o{i}", "queue_id": i % 2} for i in range(3)])
    api.store.send_back(results[0]["phys_offset"], "GID_dead", delay_level=-1)  # straight to %DLQ%GID_dead

    rows = (await get_json(api, "/topics.json"))["topics"]
    assert [r["name"] for r in rows][:2] == [TOPIC, "Zeta"]
    by_name = {r["name"]: r for r in rows}
    assert by_name[TOPIC] == {"name": TOPIC, "kind": "user", "queues": 4, "messages": 3, "newest_ms": clock.now_ms()}
    assert by_name["Zeta"]["newest_ms"] == clock.now_ms() - 5000
    assert by_name["%DLQ%GID_dead"]["kind"] == "dead_letter" and by_name["%DLQ%GID_dead"]["messages"] == 1
    assert by_name["RMQ_SYS_TRACE_TOPIC"]["kind"] == "trace"
    kinds = [r["kind"] for r in rows]
    assert kinds.index("dead_letter") > kinds.index("user") and kinds[-1] in ("trace", "system")

    page = await api.client.get("/topics", headers=HTML)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="/topics/%25DLQ%25GID_dead"' in page.text  # system topic names are URL-encoded in links
    assert f'href="/topics/{TOPIC}"' in page.text


async def test_a_topic_shows_offsets_messages_and_the_last_minute_per_queue(api, clock):
    await produce(api, TOPIC, [{"body": f"old{i}", "queue_id": 1} for i in range(3)])
    clock.advance(120_000)
    await produce(api, TOPIC, [{"body": "new-a", "queue_id": 1}, {"body": "new-b", "queue_id": 1},
                               {"body": "new-c", "queue_id": 2}])
    clock.advance(10_000)

    topic = (await get_json(api, f"/topics/{TOPIC}.json"))["topic"]
    queues = {q["queue_id"]: q for q in topic["queues"]}
    assert sorted(queues) == [0, 1, 2, 3]
    one = queues[1]
    assert (one["min_offset"], one["max_offset"], one["messages"], one["last_minute"]) == (0, 5, 5, 2)
    assert one["per_second"] == round(2 / 60, 3)
    assert one["newest_ms"] == clock.now_ms() - 10_000
    assert one["newest_page_url"] == f"/topics/{TOPIC}/queues/1?offset=0"
    assert (queues[2]["messages"], queues[2]["last_minute"]) == (1, 1)
    assert (queues[0]["messages"], queues[0]["last_minute"], queues[0]["newest_ms"]) == (0, 0, None)
    assert (topic["messages"], topic["last_minute"], topic["per_second"]) == (6, 3, 0.05)

    clock.advance(60_000)  # nothing new in the last minute
    topic = (await get_json(api, f"/topics/{TOPIC}.json"))["topic"]
    assert topic["last_minute"] == 0 and topic["messages"] == 6

    page = await api.client.get(f"/topics/{TOPIC}", headers=HTML)
    assert page.status_code == 200
    assert f'href="/topics/{TOPIC}/queues/1"' in page.text


async def test_unknown_and_malformed_topics(api):
    assert_error(await api.client.get("/topics/NoSuchTopic.json"), 404, "no topic NoSuchTopic")
    assert_error(await api.client.get("/topics/bad!topic.json"), 400, "invalid topic")
    page = await api.client.get("/topics/NoSuchTopic", headers=HTML)
    assert page.status_code == 404 and "no topic NoSuchTopic" in page.text


async def test_the_queue_browser_pages_forward_to_the_last_page(api, queue_of_45):
    first = await get_json(api, QUEUE + ".json")
    assert [m["queue_offset"] for m in first["messages"]] == list(range(20))
    assert (first["offset"], first["min_offset"], first["max_offset"], first["max"]) == (0, 0, 45, 20)
    assert first["prev_url"] is None and first["first_url"] is None
    assert first["next_url"] == QUEUE + "?offset=20&max=20"
    assert first["last_url"] == QUEUE + "?offset=25&max=20"
    row = first["messages"][3]
    assert (row["tags"], row["keys"], row["copy"], row["store_timestamp"]) == ("T0", ["order-3"], "original",
                                                                             queue_of_45 + 3000)

    path, query = first["next_url"].split("?")
    second = await get_json(api, f"{path}.json?{query}")  # the Next link, as JSON
    assert second["ok"] and [m["queue_offset"] for m in second["messages"]] == list(range(20, 40))
    assert second["prev_url"] == QUEUE + "?offset=0&max=20" and second["next_url"] == QUEUE + "?offset=40&max=20"

    last = await get_json(api, QUEUE + ".json", offset=40)
    assert [m["queue_offset"] for m in last["messages"]] == [40, 41, 42, 43, 44]
    assert last["next_url"] is None and not last["past_end"] and last["notice"] is None

    page = await api.client.get(QUEUE, params={"offset": 20}, headers=HTML)
    assert page.status_code == 200
    assert 'data-offset="20"' in page.text and 'data-offset="39"' in page.text and 'data-offset="40"' not in page.text
    assert 'rel="next" href="/topics/Orders/queues/0?offset=40&amp;max=20"' in page.text
    assert 'rel="prev" href="/topics/Orders/queues/0?offset=0&amp;max=20"' in page.text


async def test_jump_to_an_offset_with_a_page_size(api, queue_of_45):
    body = await get_json(api, QUEUE + ".json", offset=7, max=5)
    assert [m["queue_offset"] for m in body["messages"]] == [7, 8, 9, 10, 11]
    assert body["prev_url"] == QUEUE + "?offset=2&max=5" and body["next_url"] == QUEUE + "?offset=12&max=5"


async def test_jump_to_a_time(api, queue_of_45):
    body = await get_json(api, QUEUE + ".json", at=str(queue_of_45 + 10_500), max=3)
    assert body["requested_offset"] == 11 and [m["queue_offset"] for m in body["messages"]] == [11, 12, 13]
    assert body["at_ms"] == queue_of_45 + 10_500

    iso = dt.datetime.fromtimestamp((queue_of_45 + 10_000) / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    body = await get_json(api, QUEUE + ".json", at=iso, max=3)
    assert [m["queue_offset"] for m in body["messages"]] == [10, 11, 12]
    assert body["form"]["at"] == iso

    body = await get_json(api, QUEUE + ".json", at="0")
    assert body["messages"][0]["queue_offset"] == 0


async def test_past_the_end_is_a_notice_not_an_error(api, queue_of_45):
    body = await get_json(api, QUEUE + ".json", offset=str(2**70))
    assert body["messages"] == [] and body["past_end"]
    body = await get_json(api, QUEUE + ".json", offset=100)
    assert body["messages"] == [] and body["past_end"]
    assert "no messages beyond offset 44" in body["notice"].lower()
    assert body["prev_url"] == QUEUE + "?offset=25&max=20" and body["next_url"] is None

    body = await get_json(api, QUEUE + ".json", at=str(queue_of_45 + 3_600_000))  # after every message
    assert body["messages"] == [] and "no messages beyond offset 44" in body["notice"].lower()

    page = await api.client.get(QUEUE, params={"offset": 45}, headers=HTML)
    assert page.status_code == 200 and "no messages beyond offset 44" in page.text.lower()

    empty = await get_json(api, f"/topics/{TOPIC}/queues/3.json")
    assert empty["messages"] == [] and "no messages yet" in empty["notice"]


@pytest.mark.parametrize(("path", "params", "status", "fragment"), [
    (QUEUE, {"offset": "-1"}, 400, "offset must be at least 0"),
    (QUEUE, {"offset": "abc"}, 400, "offset must be a whole number"),
    (QUEUE, {"max": "0"}, 400, "max must be 1 to 500"),
    (QUEUE, {"max": "501"}, 400, "max must be 1 to 500"),
    (QUEUE, {"at": "yesterday"}, 400, "at must be epoch milliseconds or a date and time"),
    (QUEUE, {"at": "1000", "offset": "3"}, 400, "either an offset or a time"),
    (f"/topics/{TOPIC}/queues/x", {}, 400, "queue id must be a whole number"),
    (f"/topics/{TOPIC}/queues/-1", {}, 400, "queue id must be at least 0"),
    (f"/topics/{TOPIC}/queues/9", {}, 400, "queue ids 0 to 3"),
    ("/topics/NoSuchTopic/queues/0", {}, 404, "no topic NoSuchTopic"),
    ("/topics/bad!topic/queues/0", {}, 400, "invalid topic"),
])
async def test_bad_browser_input_is_refused_with_a_message(api, queue_of_45, path, params, status, fragment):
    assert_error(await api.client.get(path + ".json", params=params), status, fragment)
    page = await api.client.get(path, params=params, headers=HTML)
    assert page.status_code == status and page.headers["content-type"].startswith("text/html")
    assert fragment in page.text


async def test_htmx_paging_swaps_only_the_rows(api, queue_of_45):
    headers = {"HX-Request": "true", "HX-Target": "rows"}
    r = await api.client.get(QUEUE, params={"offset": 20}, headers=headers)
    assert r.status_code == 200
    assert "<html" not in r.text and "<form" not in r.text
    assert 'data-offset="20"' in r.text and 'rel="next"' in r.text
    full = await api.client.get(QUEUE, headers=HTML)
    assert '<div id="rows">' in full.text
    assert '<div class="queue-pager" hx-boost="true" hx-target="#rows">' in full.text  # only the pager is boosted

    bad = await api.client.get(QUEUE, params={"max": "0"}, headers=headers)
    assert bad.status_code == 400 and "max must be 1 to 500" in bad.text and "<html" not in bad.text


async def test_keys_and_tags_are_escaped(api):
    await produce(api, TOPIC, [{"body": "x", "tags": "<b>bold</b>", "keys": ["<script>alert(1)</script>"],
                                "queue_id": 0}])
    page = await api.client.get(QUEUE, headers=HTML)
    assert page.status_code == 200
    assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<b>bold</b>" not in page.text and "&lt;b&gt;bold&lt;/b&gt;" in page.text


async def test_offsets_deleted_by_retention_start_at_the_queue_minimum(api, clock):
    big = "x" * 20_000  # 256 KiB segments in tests: these fill two
    for _ in range(20):
        await produce(api, TOPIC, [{"body": big, "queue_id": 0}])
    # Segments expire by their file's modification time: move the fake clock past it.
    clock.set(time.time_ns() // 1_000_000 + 73 * HOUR_MS)
    await produce(api, TOPIC, [{"body": "after", "queue_id": 0}])
    assert api.store.delete_expired().deleted
    body = await get_json(api, QUEUE + ".json", offset=0, max=2)
    low = body["min_offset"]
    assert low > 0 and body["expired"] and body["offset"] == low
    assert [m["queue_offset"] for m in body["messages"]] == [low, low + 1]
    page = await api.client.get(QUEUE, params={"offset": 0}, headers=HTML)
    assert f"Offsets before {low} have expired" in page.text
