"""Two ways a message could be lost in plain sight (issue #14): a group whose name is too long
for its %RETRY%/%DLQ% topics could never dead-letter (it is refused where it is created or first
used), and the topics that hold messages for later (timer, schedule, transaction halves) could
be received before their time, while a resend of such a copy went back to the holding topic
(they are not consumable, and a resend goes to the message's real topic)."""

from __future__ import annotations

import pytest

from store.format import topics
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
LONGEST = "G" * (topics.MAX_TOPIC_BYTES - len(topics.RETRY_PREFIX))  # 120 bytes
TOO_LONG = LONGEST + "G"


def refused_for_length(r) -> None:
    assert r.status_code in (400, 422), r.text
    assert "120" in r.json()["error"], r.text


async def test_a_group_name_too_long_to_dead_letter_is_refused_where_it_is_set_up_or_first_used(api):
    refused_for_length(await api.client.put(f"/api/groups/{TOO_LONG}", json={"max_reconsume_times": 0}))
    await put_messages(api, TOPIC, {"body": "x"})
    refused_for_length(await api.client.post(f"/api/groups/{TOO_LONG}/receive", json={"topic": TOPIC}))
    refused_for_length(await api.client.put(f"/api/groups/{TOO_LONG}/offsets",
                                            json={"topic": TOPIC, "queue_id": 0, "offset": 0}))
    assert TOO_LONG not in {g["name"] for g in (await api.client.get("/api/groups")).json()["groups"]}


async def test_the_longest_group_name_allowed_dead_letters(api):
    assert (await api.client.put(f"/api/groups/{LONGEST}", json={"max_reconsume_times": 0})).status_code == 200
    [put] = await put_messages(api, TOPIC, {"body": "poison"})
    r = await api.client.post(f"/api/groups/{LONGEST}/receive", json={"topic": TOPIC})
    [got] = r.json()["messages"]
    r = await api.client.post(f"/api/groups/{LONGEST}/nack", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200, r.text
    [dead] = [e for e in api.store.timeline(put["unique_key"]) if e.kind.value == "dead_letter"]
    assert dead.topic == topics.dlq_topic(LONGEST)


@pytest.mark.parametrize("held", [topics.TIMER_TOPIC, topics.SCHEDULE_TOPIC, topics.TRANS_HALF_TOPIC,
                                  topics.TRANS_OP_HALF_TOPIC])
async def test_topics_holding_messages_for_later_cannot_be_received(api, clock, held):
    [put] = await put_messages(api, TOPIC, {"body": "later", "deliver_at_ms": clock.now_ms() + 3_600_000})
    assert put["topic"] == topics.TIMER_TOPIC
    r = await api.client.post("/api/groups/GID_any/receive", json={"topic": held})
    assert_error(r, 400, "cannot be consumed")
    with pytest.raises(Exception, match="cannot be consumed"):
        api.store.pull("GID_any", held, 0, 0)


async def test_a_dead_letter_of_a_timer_copy_is_resent_to_its_real_topic(api, clock):
    [put] = await put_messages(api, TOPIC, {"body": "later", "deliver_at_ms": clock.now_ms() + 3_600_000})
    # What a store has where a group received the timer topic before it was refused: a dead letter
    # of the waiting copy, consumed from rmq_sys_wheel_timer.
    result, _ = api.store.send_back(put["phys_offset"], "GID_old", delay_level=-1)
    dead = api.store.read(result.phys_offset)
    assert dead.properties[topics.RETRY_TOPIC] == topics.TIMER_TOPIC
    r = await api.client.post(f"/api/messages/{dead.offset_msg_id}/resend", json={"destination": "topic"})
    assert r.status_code == 200, r.text
    assert r.json()["destination"] == TOPIC
    copy = api.store.read(r.json()["result"]["phys_offset"])
    assert copy.topic == TOPIC and copy.body == b"later"
    got = (await api.client.post("/api/groups/GID_new/receive", json={"topic": TOPIC})).json()["messages"]
    assert [m["body_text"] for m in got] == ["later"]
