"""GET /api/messages/{id}/timeline: by unique key or any copy's offset id, derived events, refusals."""

from __future__ import annotations

import dataclasses

import pytest

from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

GROUP = "GID_tl"


async def produce(api, **fields) -> dict:
    [result] = await put_messages(api, "Orders", {"body": "x", **fields})
    return result


async def timeline(api, message_id: str) -> dict:
    r = await api.client.get(f"/api/messages/{message_id}/timeline")
    assert r.status_code == 200, r.text
    return r.json()


async def test_events_by_unique_key_and_by_offset_ids_of_every_copy(api):
    put = await produce(api)
    r = await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": "Orders"})
    [got] = r.json()["messages"]
    assert (await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": got["receipt_handle"]})
            ).status_code == 200
    by_key = await timeline(api, put["unique_key"])
    assert by_key["ok"] is True and by_key["id"] == put["unique_key"]
    events = by_key["events"]
    assert [e["kind"] for e in events] == ["stored", "delivered", "acked"]
    assert all(e["derived"] is False and e["unique_key"] == put["unique_key"] for e in events)
    assert events[0] == {"kind": "stored", "unique_key": put["unique_key"], "at_ms": put["store_timestamp"],
                         "topic": "Orders", "queue_id": put["queue_id"], "queue_offset": put["queue_offset"],
                         "offset_msg_id": put["offset_msg_id"], "derived": False}  # unset fields left out
    assert events[1]["group"] == GROUP and events[1]["attempt"] == 1
    assert (await timeline(api, put["offset_msg_id"]))["events"] == events
    assert (await timeline(api, put["offset_msg_id"].lower()))["events"] == events


async def test_a_delayed_message_shows_its_scheduled_copy(api):
    put = await produce(api, delay_level=2)
    [event] = (await timeline(api, put["unique_key"]))["events"]
    assert event["kind"] == "scheduled" and event["real_topic"] == "Orders" and event["due_ms"] > put["store_timestamp"]


async def test_without_events_an_offset_id_gives_a_derived_stored_event(api):
    api.store.config = dataclasses.replace(api.store.config, trace=False)
    put = await produce(api, tags="T")
    assert api.store.timeline(put["unique_key"]) == []
    body = await timeline(api, put["offset_msg_id"])
    assert body["events"] == [{"kind": "stored", "unique_key": put["unique_key"], "at_ms": put["store_timestamp"],
                               "topic": "Orders", "queue_id": put["queue_id"], "queue_offset": put["queue_offset"],
                               "offset_msg_id": put["offset_msg_id"], "derived": True}]
    by_key = await timeline(api, put["unique_key"])
    assert by_key["events"] == [] and by_key["traced"] is False
    assert [(h["kind"], h["offset_msg_id"], h["derived"]) for h in by_key["hops"]] == [
        ("produced", put["offset_msg_id"], True)]


@pytest.mark.parametrize("message_id", ["xyz", "ABC", "G" * 32, "0" * 129, "7F000001-0000"])
async def test_malformed_ids_are_400(api, message_id):
    assert_error(await api.client.get(f"/api/messages/{message_id}/timeline"), 400, "malformed message id")


@pytest.mark.parametrize("message_id", [
    "7F00000100002A9F00000000000FFFFF",  # an offset id past the end of the log
    "7F00000100002A9F0000000000000003",  # an offset id inside a record, not at its start
    "0A0B0C0D00002A9F0000000000000000",  # another host's offset id at a real record's offset
    "AC1F00011D6C18B4AAC27A3F5E2F0000",  # a unique key nobody stored
])
async def test_unknown_ids_are_404(api, message_id):
    await produce(api)
    assert_error(await api.client.get(f"/api/messages/{message_id}/timeline"), 404, "no trace event and no message")
