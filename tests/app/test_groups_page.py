"""The consumer group pages: which groups are known, lag per queue after a commit, retries waiting
per delay level (and the bound on that scan), the retry topic, dead letters and their age."""

from __future__ import annotations

import pytest

from app.services import group_status
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
HTML = {"Accept": "text/html"}


async def produce(api, messages: list[dict]) -> list[dict]:
    return await put_messages(api, TOPIC, messages)


async def get_json(api, url: str) -> dict:
    r = await api.client.get(url)
    assert r.status_code == 200, r.text
    return r.json()


async def test_lag_per_queue_after_a_commit(api):
    await produce(api, [{"body": f"m{i}", "queue_id": 1} for i in range(5)] + [{"body": "q2", "queue_id": 2}])
    for queue_id, offset in ((1, 2), (2, 0)):
        r = await api.client.put("/api/groups/GID_pull/offsets", json={"topic": TOPIC, "queue_id": queue_id,
                                                                        "offset": offset})
        assert r.status_code == 200, r.text

    group = (await get_json(api, "/groups/GID_pull.json"))["group"]
    rows = {(o["topic"], o["queue_id"]): o for o in group["offsets"]}
    assert rows[(TOPIC, 1)] == {"topic": TOPIC, "queue_id": 1, "committed": 2, "min_offset": 0, "max_offset": 5,
                                "lag": 3, "expired": False}
    assert rows[(TOPIC, 2)]["lag"] == 1 and group["lag"] == 4
    assert group["settings"]["configured"] is False

    listed = {g["name"]: g for g in (await get_json(api, "/groups.json"))["groups"]}
    assert listed["GID_pull"] == {"name": "GID_pull", "configured": False, "queues": 2, "lag": 4,
                                  "retry_messages": 0, "dead_letters": 0}

    await api.client.put("/api/groups/GID_pull/offsets", json={"topic": TOPIC, "queue_id": 1, "offset": 5})
    group = (await get_json(api, "/groups/GID_pull.json"))["group"]
    assert group["lag"] == 1

    page = await api.client.get("/groups/GID_pull", headers=HTML)
    assert page.status_code == 200 and 'data-testid="lag">1<' in page.text
    assert 'href="/topics/Orders/queues/2?offset=0"' in page.text  # browse from the committed offset


async def test_known_groups_come_from_settings_offsets_and_retry_or_dlq_topics(api, clock):
    results = await produce(api, [{"body": "a"}, {"body": "b"}])
    r = await api.client.put("/api/groups/GID_configured", json={"max_reconsume_times": 3})
    assert r.status_code == 200, r.text
    api.store.send_back(results[0]["phys_offset"], "GID_dead", delay_level=-1)
    api.store.send_back(results[1]["phys_offset"], "GID_retrying", delay_level=1)
    api.store.commit_offset("GID_committed", TOPIC, results[0]["queue_id"], 0)

    names = [g["name"] for g in (await get_json(api, "/groups.json"))["groups"]]
    assert names == ["GID_committed", "GID_configured", "GID_dead"]
    # A group whose only trace is a retry still waiting has a page; once delivered, its retry topic lists it.
    waiting = (await get_json(api, "/groups/GID_retrying.json"))["group"]
    assert [row["level"] for row in waiting["retry_backlog"]] == [1]
    clock.advance(1000)
    api.store.deliver_due()
    names = [g["name"] for g in (await get_json(api, "/groups.json"))["groups"]]
    assert names == ["GID_committed", "GID_configured", "GID_dead", "GID_retrying"]
    page = await api.client.get("/groups", headers=HTML)
    assert page.status_code == 200 and 'href="/groups/GID_dead"' in page.text


async def test_retries_waiting_per_delay_level(api, clock):
    results = await produce(api, [{"body": f"m{i}", "queue_id": 0} for i in range(4)])
    sent_at = clock.now_ms()
    for result, level in zip(results[:3], (2, 2, 5), strict=True):
        api.store.send_back(result["phys_offset"], "GID_r", delay_level=level)
    api.store.send_back(results[3]["phys_offset"], "GID_other", delay_level=2)

    group = (await get_json(api, "/groups/GID_r.json"))["group"]
    backlog = {row["level"]: row for row in group["retry_backlog"]}
    assert sorted(backlog) == [2, 5]
    assert backlog[2] == {"level": 2, "delay_ms": 5000, "waiting": 2, "capped": False, "scanned": 3,
                          "waiting_all_groups": 3, "next_due_ms": sent_at + 5000}
    assert backlog[5]["waiting"] == 1 and backlog[5]["next_due_ms"] == sent_at + 60_000
    assert group["retry"]["messages"] == 0

    clock.advance(5000)
    assert len(api.store.deliver_due().delivered) == 3  # level 2: both of GID_r's and GID_other's
    group = (await get_json(api, "/groups/GID_r.json"))["group"]
    assert [row["level"] for row in group["retry_backlog"]] == [5]
    assert group["retry"]["topic"] == "%RETRY%GID_r"
    assert (group["retry"]["messages"], group["retry"]["lag"], group["retry"]["consumed"]) == (2, 2, False)

    page = await api.client.get("/groups/GID_r", headers=HTML)
    assert page.status_code == 200 and 'data-level="5"' in page.text and 'data-level="2"' not in page.text
    assert 'data-testid="retry-lag">2<' in page.text


async def test_the_retry_scan_is_bounded_and_says_so(api, monkeypatch):
    results = await produce(api, [{"body": f"m{i}", "queue_id": 0} for i in range(3)])
    for result in results:
        api.store.send_back(result["phys_offset"], "GID_r", delay_level=4)
    bounds = group_status.queue_bounds(api.store)
    [row] = group_status.retry_backlog(api.store, "GID_r", bounds, scan_limit=2)
    assert (row["waiting"], row["scanned"], row["capped"], row["waiting_all_groups"]) == (2, 2, True, 3)

    monkeypatch.setattr(group_status, "RETRY_SCAN_LIMIT", 2)
    page = await api.client.get("/groups/GID_r", headers=HTML)
    assert page.status_code == 200 and 'data-testid="capped"' in page.text
    assert "counted among the first 2 only" in page.text


async def test_dead_letters_size_and_age(api, clock):
    results = await produce(api, [{"body": "a"}, {"body": "b"}])
    first_at = clock.now_ms()
    api.store.send_back(results[0]["phys_offset"], "GID_d", delay_level=-1)
    clock.advance(90_000)
    api.store.send_back(results[1]["phys_offset"], "GID_d", delay_level=-1)
    clock.advance(30_000)

    dlq = (await get_json(api, "/groups/GID_d.json"))["group"]["dead_letters"]
    assert dlq == {"topic": "%DLQ%GID_d", "queues": [0], "messages": 2, "oldest_ms": first_at,
                   "oldest_age_ms": 120_000}
    page = await api.client.get("/groups/GID_d", headers=HTML)
    assert page.status_code == 200
    assert 'data-testid="dlq-size">2<' in page.text and 'data-testid="dlq-age">2m<' in page.text
    assert 'href="/groups/GID_d/dead-letters"' in page.text  # the group's dead-letter inbox
    assert 'href="/topics/%25DLQ%25GID_d/queues/0"' in page.text

    listed = {g["name"]: g for g in (await get_json(api, "/groups.json"))["groups"]}
    assert listed["GID_d"]["dead_letters"] == 2


async def test_unknown_and_malformed_groups(api):
    assert_error(await api.client.get("/groups/GID_nobody.json"), 404, "no group GID_nobody")
    assert_error(await api.client.get("/groups/bad!group.json"), 400, "invalid group name")
    page = await api.client.get("/groups/GID_nobody", headers=HTML)
    assert page.status_code == 404 and "no group GID_nobody" in page.text
