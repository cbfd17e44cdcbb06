"""The retry timeline: /messages/{id}/timeline (page and JSON twin) and the hops and verdicts of
GET /api/messages/{id}/timeline, from trace events and, with tracing off, rebuilt from copies."""

from __future__ import annotations

import dataclasses
import re

import pytest
from markupsafe import escape

from app.render import format_ms
from store.format import topics
from store.format.delay_levels import DelayLevels
from store.message_store import NewMessage
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

GROUP = "GID_tl"
TOPIC = "Orders"
SECOND = 1000
DELAYS = DelayLevels().delays_ms
HTML = {"Accept": "text/html"}


def backoff(attempt: int) -> int:
    """How long receive waits after attempt `attempt` failed (delay level 2 + attempt)."""
    return DELAYS[min(2 + attempt, len(DELAYS)) - 1]


def trace_off(api) -> None:
    api.store.config = dataclasses.replace(api.store.config, trace=False)


async def produce(api, **fields) -> dict:
    return (await put_messages(api, TOPIC, {"body": "x", **fields}))[0]


async def receive_one(api, group: str = GROUP) -> dict:
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": TOPIC})
    assert r.status_code == 200, r.text
    [got] = r.json()["messages"]
    return got


async def nack(api, got: dict, reason: str | None = None, group: str = GROUP) -> None:
    r = await api.client.post(f"/api/groups/{group}/nack", json={"receipt_handle": got["receipt_handle"],
                                                                 "reason": reason})
    assert r.status_code == 200, r.text


async def page_json(api, message_id: str) -> dict:
    r = await api.client.get(f"/messages/{message_id}/timeline.json")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True
    return body


async def page_html(api, message_id: str) -> str:
    r = await api.client.get(f"/messages/{message_id}/timeline", headers=HTML)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    return r.text


def kinds(body: dict) -> list[tuple]:
    return [(h["kind"], h["group"], h["attempt"]) for h in body["hops"]]


def verdict_of(body: dict, group: str = GROUP) -> dict:
    [verdict] = [v for v in body["verdicts"] if v["group"] == group]
    return verdict


def escaped(text: str) -> str:
    """`text` as the templates write it (autoescape)."""
    return str(escape(text))


def svg_of(page: str) -> str:
    match = re.search(r"<svg class=\"timeline\".*?</svg>", page, re.S)
    assert match, "the page draws no timeline"
    return match.group(0)


# -- from trace events -------------------------------------------------------------------------
async def test_failing_until_dead_lettered_shows_every_hop_and_the_verdict(api, clock):
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 2})).status_code == 200
    put = await produce(api, keys=["order-7"])
    for attempt in (1, 2, 3):
        got = await receive_one(api)
        assert got["delivery_attempt"] == attempt
        await nack(api, got, reason=f"payment down ({attempt})")
        clock.advance(backoff(attempt))
    body = await page_json(api, put["unique_key"])
    assert body["traced"] is True and body["message"]["topic"] == TOPIC and body["message"]["keys"] == ["order-7"]
    assert kinds(body) == [("produced", None, None),
                           ("delivered", GROUP, 1), ("failed", GROUP, 1),
                           ("delivered", GROUP, 2), ("failed", GROUP, 2),
                           ("delivered", GROUP, 3), ("failed", GROUP, 3),
                           ("dead_lettered", GROUP, 3)]
    assert [h["reason"] for h in body["hops"] if h["kind"] == "failed"] == [f"payment down ({n})" for n in (1, 2, 3)]
    assert all(h["derived"] is False for h in body["hops"])
    times = [h["time_ms"] for h in body["hops"]]
    assert times == sorted(times) and times[0] == put["store_timestamp"]
    dead = body["hops"][-1]
    assert dead["topic"] == topics.dlq_topic(GROUP) and "3 delivery attempts failed" in dead["detail"]
    verdict = verdict_of(body)
    assert verdict["state"] == "dead_lettered" and verdict["attempts"] == 3 and verdict["next_attempt_ms"] is None

    page = await page_html(api, put["offset_msg_id"])  # the same timeline by the offset id of a copy
    assert 'class="verdict dead_lettered"' in page
    svg = svg_of(page)
    assert svg.count('<circle class="hop ') == 8 and 'class="hop dead_lettered"' in svg
    assert f">{GROUP}<title>{GROUP}</title>" in svg and ">producer / broker<" in svg  # one lane per group
    assert f'href="/messages/{dead["offset_msg_id"]}"' in svg  # each point links its copy
    rows = re.findall(r'<tr id="hop-\d+" data-kind="(\w+)"', page)
    assert rows == [kind for kind, _, _ in kinds(body)]
    assert f'<a href="/messages/{dead["offset_msg_id"]}">{topics.dlq_topic(GROUP)}:0:0</a>' in page
    assert escaped(format_ms(dead["time_ms"])) in page
    assert f'href="/groups/{GROUP}/dead-letters?key={put["unique_key"]}"' in page  # the verdict links its inbox
    inbox = (await api.client.get(f"/api/dlq/{GROUP}/messages", params={"key": put["unique_key"]})).json()
    assert [m["offset_msg_id"] for m in inbox["messages"]] == [dead["offset_msg_id"]]


async def test_send_back_through_the_schedule_and_retry_topics_then_the_dead_letter_queue(api, clock):
    put = await produce(api)
    api.store.pull(GROUP, TOPIC, put["queue_id"], put["queue_offset"], 1)
    scheduled, _ = api.store.send_back(put["phys_offset"], GROUP, reason="timeout calling stock")
    clock.advance(DELAYS[2])  # the first retry waits delay level 3
    [retry] = api.store.deliver_due().delivered
    api.store.send_back(retry.phys_offset, GROUP, delay_level=-1, reason="gave up")
    body = await page_json(api, put["offset_msg_id"])
    assert kinds(body) == [("produced", None, None), ("delivered", GROUP, 1), ("failed", GROUP, 1),
                           ("retry_scheduled", GROUP, 2), ("redelivered", GROUP, 2), ("failed", GROUP, 2),
                           ("dead_lettered", GROUP, None)]
    waiting = body["hops"][3]
    assert (waiting["delay_level"], waiting["due_ms"]) == (3, scheduled.store_timestamp + DELAYS[2])
    assert waiting["topic"] == topics.SCHEDULE_TOPIC and waiting["offset_msg_id"] == scheduled.offset_msg_id
    assert body["hops"][4]["topic"] == topics.retry_topic(GROUP)
    assert verdict_of(body)["state"] == "dead_lettered"
    api_body = (await api.client.get(f"/api/messages/{put['unique_key']}/timeline")).json()  # REST: same hops
    assert [h["kind"] for h in api_body["hops"]] == [h["kind"] for h in body["hops"]]
    assert api_body["verdicts"][0]["state"] == "dead_lettered" and api_body["traced"] is True


async def test_a_pending_retry_shows_its_next_attempt_time(api, clock):
    put = await produce(api)
    got = await receive_one(api)
    await nack(api, got, reason="busy")
    due = clock.now_ms() + backoff(1)
    body = await page_json(api, put["unique_key"])
    verdict = verdict_of(body)
    assert verdict["state"] == "retry_pending" and verdict["next_attempt_ms"] == due and verdict["attempts"] == 1
    page = await page_html(api, put["unique_key"])
    assert 'class="verdict retry_pending"' in page and escaped(format_ms(due)) in page


async def test_consumed_by_ack_and_by_a_committed_offset_and_pending_for_a_group_behind(api, clock):
    put = await produce(api)
    got = await receive_one(api)
    assert (await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": got["receipt_handle"]})
            ).status_code == 200
    api.store.pull("GID_puller", TOPIC, put["queue_id"], put["queue_offset"], 1)
    api.store.commit_offset("GID_puller", TOPIC, put["queue_id"], put["queue_offset"] + 1)
    api.store.commit_offset("GID_behind", TOPIC, put["queue_id"], put["queue_offset"])
    body = await page_json(api, put["unique_key"])
    assert verdict_of(body)["state"] == "consumed"
    assert ("consumed", GROUP, 1) in kinds(body)
    puller = verdict_of(body, "GID_puller")
    assert puller["state"] == "consumed" and f"is {put['queue_offset'] + 1}" in puller["detail"]
    assert verdict_of(body, "GID_behind")["state"] == "pending"
    page = await page_html(api, put["unique_key"])
    assert page.count('class="verdict consumed"') == 2 and page.count('class="verdict pending"') == 1


# -- rebuilt from the copies -------------------------------------------------------------------
async def test_without_trace_the_hops_are_rebuilt_from_the_copies(api, clock):
    trace_off(api)
    put = await produce(api)
    scheduled, _ = api.store.send_back(put["phys_offset"], GROUP)
    clock.advance(DELAYS[2])
    [retry] = api.store.deliver_due().delivered
    retry_msg = api.store.read(retry.phys_offset)
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 1})).status_code == 200
    dead, _ = api.store.send_back(retry.phys_offset, GROUP)
    assert api.store.timeline(put["unique_key"]) == []
    body = await page_json(api, put["unique_key"])
    assert body["traced"] is False and all(h["derived"] for h in body["hops"])
    assert kinds(body) == [("produced", None, None), ("failed", GROUP, 1), ("retry_scheduled", GROUP, 2),
                           ("redelivered", GROUP, 2), ("failed", GROUP, 2), ("dead_lettered", GROUP, 2)]
    hops = body["hops"]
    assert (hops[2]["delay_level"], hops[2]["due_ms"]) == (3, scheduled.store_timestamp + DELAYS[2])
    assert hops[3]["offset_msg_id"] == retry_msg.offset_msg_id and hops[3]["time_ms"] == retry_msg.store_timestamp
    assert hops[5]["offset_msg_id"] == dead.offset_msg_id
    assert "after 1 reconsumes, the group's maximum of 1" in hops[5]["detail"]
    assert verdict_of(body)["state"] == "dead_lettered"
    assert (await page_json(api, dead.offset_msg_id))["hops"] == hops  # from any copy's offset id
    page = await page_html(api, put["offset_msg_id"])
    assert 'data-testid="reconstructed"' in page and svg_of(page).count('class="hop ') == 6
    assert svg_of(page).count(" derived\"") == 6


async def test_without_trace_a_resend_and_a_pending_receive_retry_are_seen(api, clock):
    trace_off(api)
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    put = await produce(api)
    await nack(api, await receive_one(api), reason="poison")  # max 0: straight to the DLQ
    [dead] = [m for m in (await api.client.get(f"/api/messages/by-unique-key/{put['unique_key']}")).json()["messages"]
              if m["copy"] == "dead_letter"]
    r = await api.client.post(f"/api/messages/{dead['offset_msg_id']}/resend")
    assert r.status_code == 200, r.text
    resent = r.json()["result"]
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 5})).status_code == 200
    got = await receive_one(api)
    assert got["offset_msg_id"] == resent["offset_msg_id"]
    await nack(api, got)
    body = await page_json(api, put["unique_key"])
    assert kinds(body) == [("produced", None, None), ("failed", GROUP, 1), ("dead_lettered", GROUP, 1),
                           ("resent", None, None)]
    assert body["hops"][3]["offset_msg_id"] == resent["offset_msg_id"]
    verdict = verdict_of(body)  # from the receive state: the resent copy waits for its second attempt
    assert verdict["state"] == "retry_pending" and verdict["next_attempt_ms"] == clock.now_ms() + backoff(1)


async def test_without_trace_or_offsets_a_redelivered_message_is_unknown(api, clock):
    trace_off(api)
    put = await produce(api)
    api.store.send_back(put["phys_offset"], GROUP)
    clock.advance(DELAYS[2])
    api.store.deliver_due()
    body = await page_json(api, put["unique_key"])
    assert kinds(body)[-1] == ("redelivered", GROUP, 2)
    verdict = verdict_of(body)
    assert verdict["state"] == "unknown" and "no consumer offset" in verdict["detail"]


async def test_a_message_no_group_touched_has_no_verdict(api):
    trace_off(api)
    put = await produce(api)
    body = await page_json(api, put["offset_msg_id"])
    assert kinds(body) == [("produced", None, None)] and body["verdicts"] == []
    assert 'data-testid="no-groups"' in await page_html(api, put["offset_msg_id"])


# -- escaping and refusals ---------------------------------------------------------------------
async def test_keys_and_reasons_are_escaped_in_the_drawing_and_the_table(api, clock):
    key = '<img/src=x>"k"&'
    reason = '<script>alert("r")</script> & <b>more</b>'
    put = await produce(api, keys=[key])
    await nack(api, await receive_one(api), reason=reason)
    page = await page_html(api, put["unique_key"])
    assert "<script>alert" not in page and "<img/src=x>" not in page and "<b>more" not in page
    assert escaped(key) in page
    escaped_reason = escaped(reason)
    assert escaped_reason in svg_of(page)  # in the point's <title>
    table = page[page.index('<table class="results hops">'):]
    assert escaped_reason in table


@pytest.mark.parametrize("message_id", ["xyz", "G" * 32, "0" * 129])
async def test_malformed_ids_are_400_as_json_and_as_a_page(api, message_id):
    assert_error(await api.client.get(f"/messages/{message_id}/timeline.json"), 400, "malformed message id")
    r = await api.client.get(f"/messages/{message_id}/timeline", headers=HTML)
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/html")
    assert "malformed message id" in r.text and "16 to 128 hex characters" in r.text


async def test_unknown_ids_are_404_as_json_and_as_a_page(api):
    await produce(api)
    unknown = "AC1F00011D6C18B4AAC27A3F5E2F0000"
    assert_error(await api.client.get(f"/messages/{unknown}/timeline.json"), 404, "no trace event and no message",
                 "offset message id")
    r = await api.client.get(f"/messages/{unknown}/timeline", headers=HTML)
    assert r.status_code == 404 and "no trace event and no message" in r.text


async def test_the_timeline_names_the_clients_that_sent_received_and_acknowledged_it(api, clock):
    producer, consumer = "app-host@4242@1@2k4xq9ab", "worker-1@77@1@2k4xqa01"
    sent = api.store.put(NewMessage(TOPIC, b"order", client=producer))
    clock.advance(SECOND)
    [first] = api.store.receive(GROUP, TOPIC, 1, 30 * SECOND, client=consumer)
    clock.advance(SECOND)
    handle = api.store.change_invisible(GROUP, first.receipt_handle, 10 * SECOND, client=consumer)
    clock.advance(10 * SECOND)  # the consumer failed it: the new invisible time ran out
    api.store.revive_due()
    clock.advance(backoff(1))
    [second] = api.store.receive(GROUP, TOPIC, 1, 30 * SECOND, client=consumer)
    assert second.delivery_attempt == 2 and handle != second.receipt_handle
    api.store.ack(GROUP, second.receipt_handle, client=consumer)

    body = await page_json(api, sent.unique_key)
    details = [(h["kind"], h["detail"], h.get("client")) for h in body["hops"]]
    assert details == [
        ("produced", f"stored in {TOPIC}, sent by client {producer}", producer),
        ("delivered", f"attempt 1 received by client {consumer} of {GROUP}", consumer),
        ("invisible_changed", f"{GROUP} (client {consumer}) moved the invisible time of attempt 1: unless "
                              "acknowledged, it is delivered again when due", consumer),
        ("failed", "attempt 1 failed: not acknowledged within its invisible time", None),
        ("delivered", f"attempt 2 received by client {consumer} of {GROUP}", consumer),
        ("consumed", f"{GROUP} (client {consumer}) acknowledged attempt 2", consumer),
    ]
    [verdict] = body["verdicts"]
    assert verdict["state"] == "consumed"
    page = await page_html(api, sent.unique_key)
    assert f"sent by client {producer}" in page and f"attempt 2 received by client {consumer}" in page
    assert "invisible time changed" in page

    r = await api.client.get(f"/api/messages/{sent.unique_key}/timeline")
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    assert [(e["kind"], e.get("client")) for e in events] == [
        ("stored", producer), ("delivered", consumer), ("invisible_changed", consumer), ("invisible_timeout", None),
        ("delivered", consumer), ("acked", consumer)]


async def test_rest_callers_are_not_named(api):
    put = await produce(api)
    got = await receive_one(api)
    await nack(api, got, "no stock")
    events = (await api.client.get(f"/api/messages/{put['unique_key']}/timeline")).json()["events"]
    assert [e["kind"] for e in events] == ["stored", "delivered", "failed"]
    assert all("client" not in e for e in events)
    hops = (await page_json(api, put["unique_key"]))["hops"]
    assert all(h["client"] is None and "client" not in h["detail"] for h in hops)
