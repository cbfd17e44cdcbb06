"""The dead-letter inbox: REST (GET /api/dlq/...), exports, and the inbox pages with their
resend confirmation."""

from __future__ import annotations

import csv
import io
import json

import pytest

from store.format import topics
from tests.app.conftest import assert_error, bearer, put_messages
from tests.app.test_resend import GROUP, OTHER, receive

pytestmark = pytest.mark.anyio

INBOX = f"/api/dlq/{GROUP}/messages"
HTML = {"Accept": "text/html"}


async def fail(api, key: str, *, tags: str = "T", reason: str = "boom", group: str = GROUP) -> dict:
    """Put a message to Orders and have `group` fail it for good (max reconsume times 0)."""
    assert (await api.client.put(f"/api/groups/{group}", json={"max_reconsume_times": 0})).status_code == 200
    [put] = await put_messages(api, "Orders", {"body": f"body of {key}", "keys": [key], "tags": tags})
    for got in await receive(api, group):
        r = await api.client.post(f"/api/groups/{group}/nack", json={"receipt_handle": got["receipt_handle"],
                                                                     "reason": reason})
        assert r.status_code == 200
    return put


async def test_the_inbox_lists_dead_letters_newest_first_with_their_story(api, clock):
    first = await fail(api, "o-1", reason="card declined")
    clock.advance(1000)
    second = await fail(api, "o-2", tags="U", reason="timeout calling billing")
    r = await api.client.get(INBOX)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == 2 and body["next_cursor"] is None and body["counts"] == {
        "waiting": 2, "resent": 0, "failed_again": 0}
    newest, oldest = body["messages"]
    assert newest["unique_key"] == second["unique_key"] and oldest["unique_key"] == first["unique_key"]
    assert (newest["group"], newest["topic"], newest["original_topic"]) == (GROUP, topics.dlq_topic(GROUP), "Orders")
    assert (newest["keys"], newest["tags"], newest["reconsume_times"], newest["state"]) == (["o-2"], "U", 1,
                                                                                           "waiting")
    assert "timeout calling billing" in newest["reason"] and "card declined" in oldest["reason"]
    assert newest["expires_at"] > clock.now_ms() and oldest["age_ms"] == 1000
    assert body["oldest_waiting_ms"] == oldest["store_timestamp"]


async def test_filters_and_cursor_paging(api, clock):
    puts = []
    for n in range(5):
        puts.append(await fail(api, f"k-{n}", tags="A" if n % 2 else "B", reason=f"reason {n}"))
        clock.advance(10)
    seen = []
    cursor = None
    while True:
        r = await api.client.get(INBOX, params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        page = r.json()
        seen += [m["keys"][0] for m in page["messages"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"k-{n}" for n in range(4, -1, -1)]
    assert [m["keys"] for m in (await api.client.get(INBOX, params={"key": "k-3"})).json()["messages"]] == [["k-3"]]
    by_uniq = (await api.client.get(INBOX, params={"key": puts[1]["unique_key"]})).json()["messages"]
    assert [m["keys"] for m in by_uniq] == [["k-1"]]
    assert (await api.client.get(INBOX, params={"tag": "A"})).json()["total"] == 2
    assert (await api.client.get(INBOX, params={"reason": "REASON 4"})).json()["total"] == 1
    stamps = [m["store_timestamp"] for m in (await api.client.get(INBOX)).json()["messages"]]
    window = (await api.client.get(INBOX, params={"begin": stamps[3], "end": stamps[1]})).json()
    assert window["total"] == 3
    assert (await api.client.get(INBOX, params={"state": "resent"})).json()["total"] == 0


async def test_resent_then_consumed_or_failed_again(api, clock):
    kept = await fail(api, "keep")
    again = await fail(api, "again")
    ids = {m["keys"][0]: m["offset_msg_id"] for m in (await api.client.get(INBOX)).json()["messages"]}
    r = await api.client.post(f"/api/dlq/{GROUP}/resend", json={"message_ids": [ids["keep"], ids["again"]]})
    assert r.status_code == 200, r.text
    rows = {m["keys"][0]: m for m in (await api.client.get(INBOX)).json()["messages"]}
    assert rows["keep"]["state"] == "resent" and rows["keep"]["resend"]["copy_state"] == "pending"
    assert rows["keep"]["resend"]["actor"] == "bootstrap-admin"
    # the group gets both copies: it acks one and fails the other again
    copies = {m["keys"][0]: m for m in await receive(api, GROUP)}
    assert set(copies) == {"keep", "again"}
    await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": copies["keep"]["receipt_handle"]})
    await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": copies["again"]["receipt_handle"],
                                                             "reason": "still broken"})
    body = (await api.client.get(INBOX)).json()
    assert body["counts"] == {"waiting": 1, "resent": 1, "failed_again": 1}
    by_id = {m["offset_msg_id"]: m for m in body["messages"]}
    assert by_id[ids["keep"]]["resend"]["copy_state"] == "consumed"
    old = by_id[ids["again"]]
    assert old["state"] == "failed_again" and old["resend"]["copy_state"] == "failed_again"
    newer = by_id[old["dead_again"]]
    assert newer["state"] == "waiting" and newer["resent_after"] == ids["again"]
    assert "still broken" in newer["reason"] and newer["original_topic"] == "Orders"
    assert kept["unique_key"] != again["unique_key"]
    # the newer dead letter can be resent without force: it was never resent itself
    r = await api.client.post(f"/api/dlq/{GROUP}/resend", json={"message_ids": [newer["offset_msg_id"]]})
    assert r.status_code == 200 and r.json()["results"][0]["status"] == "ok"


async def test_every_group_and_bad_requests(api):
    await fail(api, "mine")
    await fail(api, "theirs", group=OTHER)
    everyone = (await api.client.get("/api/dlq/messages")).json()
    assert {m["group"] for m in everyone["messages"]} == {GROUP, OTHER}
    assert_error(await api.client.get("/api/dlq/nobody/messages"), 404, "no dead letters")
    assert (await api.client.put("/api/groups/GID_healthy", json={"max_reconsume_times": 3})).status_code == 200
    healthy = await api.client.get("/api/dlq/GID_healthy/messages")
    assert healthy.status_code == 200 and healthy.json()["messages"] == []
    page = await api.client.get("/groups/GID_healthy/dead-letters", headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert_error(await api.client.get(INBOX, params={"state": "lost"}), 400, "unknown state")
    assert_error(await api.client.get(INBOX, params={"cursor": "x"}), 400, "malformed cursor")
    assert_error(await api.client.get(INBOX, params={"limit": 0}), 422)
    assert_error(await api.client.get(INBOX, params={"begin": 10, "end": 5}), 400, "begins after")
    assert_error(await api.client.get(INBOX, params={"key": "k" * 300}), 422)


async def test_exports_in_csv_and_ndjson(api):
    await fail(api, "=cmd|'/C_calc'!A0", reason="=HYPERLINK(\"x\")")
    await fail(api, "plain")
    r = await api.client.get(f"{INBOX}.csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["keys"] for row in rows] == ["plain", "'=cmd|'/C_calc'!A0"]  # a formula kept as text
    assert "HYPERLINK" in rows[1]["reason"] and not rows[1]["reason"].startswith("=")
    r = await api.client.get(f"{INBOX}.ndjson", params={"key": "plain"})
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert [line["keys"] for line in lines] == [["plain"]]
    assert_error(await api.client.get("/api/dlq/nobody/messages.csv"), 404)


async def test_the_inbox_page_and_its_resend_confirmation(api):
    await fail(api, "page-1")
    viewer = (await api.client.post("/api/tokens", json={"name": "v", "role": "viewer"})).json()["value"]
    page = await api.client.get(f"/groups/{GROUP}/dead-letters", headers=HTML)
    assert page.status_code == 200 and "page-1" in page.text and "Resend to GID_dlq" in page.text
    assert f"through <code>{topics.pop_retry_topic(GROUP, 'Orders')}</code>" in page.text
    seen = await api.client.get(f"/groups/{GROUP}/dead-letters", headers={**HTML, **bearer(viewer)})
    assert seen.status_code == 200 and "page-1" in seen.text and "Resend" not in seen.text
    twin = (await api.client.get(f"/groups/{GROUP}/dead-letters.json")).json()
    [row] = twin["messages"]
    form = {"group": GROUP, "message_id": row["offset_msg_id"], "destination": "group"}
    confirm = await api.client.post("/dead-letters/resend", data=form, headers=HTML)
    assert confirm.status_code == 200
    assert (f"1 message back to group {GROUP} only, through {topics.pop_retry_topic(GROUP, 'Orders')}"
            in confirm.text)
    assert (await api.client.get(INBOX)).json()["counts"]["resent"] == 0  # a confirmation sends nothing
    done = await api.client.post("/dead-letters/resend", data={**form, "confirm": "true", "idempotency_key": "c1"},
                                 headers=HTML)
    assert done.status_code == 200 and "resent to" in done.text
    twice = await api.client.post("/dead-letters/resend", data={**form, "confirm": "true", "idempotency_key": "c1"},
                                  headers=HTML)
    assert twice.status_code == 200 and "already done" in twice.text
    assert (await api.client.get(INBOX)).json()["counts"]["resent"] == 1
    refused = await api.client.post("/dead-letters/resend", data={**form, "confirm": "true"},
                                    headers={**HTML, **bearer(viewer)})
    assert refused.status_code == 403 and "may not do this" in refused.text
    every = await api.client.get("/dead-letters", headers=HTML)
    assert every.status_code == 200 and GROUP in every.text


async def test_a_dead_letters_message_page_resends_it_and_then_follows_the_copy(api):
    await fail(api, "msg-page")
    [row] = (await api.client.get(INBOX)).json()["messages"]
    page = await api.client.get(f"/messages/{row['offset_msg_id']}", headers=HTML)
    assert 'data-testid="dead-letter-actions"' in page.text and "Resend to GID_dlq" in page.text
    r = await api.client.post("/dead-letters/resend", headers=HTML,
                              data={"group": GROUP, "message_id": row["offset_msg_id"], "confirm": "true"})
    assert r.status_code == 200
    page = await api.client.get(f"/messages/{row['offset_msg_id']}", headers=HTML)
    assert "Resend to GID_dlq" not in page.text and 'data-testid="last-resend"' in page.text
    assert "<strong>pending</strong>" in page.text
    [copy] = await receive(api, GROUP)
    await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": copy["receipt_handle"]})
    page = await api.client.get(f"/messages/{row['offset_msg_id']}", headers=HTML)
    assert "<strong>consumed</strong>" in page.text
    copy_page = (await api.client.get(f"/messages/{copy['offset_msg_id']}.json")).json()
    assert copy_page["message"]["copy"] == "resent"


async def test_the_json_link_of_a_dead_letter_topic_page_works(api):
    await fail(api, "json-link")
    page = await api.client.get(f"/topics/%25DLQ%25{GROUP}", headers=HTML)
    assert page.status_code == 200
    assert f'href="/topics/%25DLQ%25{GROUP}.json">this page as JSON' in page.text
    twin = await api.client.get(f"/topics/%25DLQ%25{GROUP}.json")
    assert twin.status_code == 200 and twin.json()["ok"] is True
