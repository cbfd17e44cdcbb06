"""POST /api/messages/{offset_msg_id}/resend: dead letters back to their topic, audited, repeat-safe."""

from __future__ import annotations

import json

import pytest

from app.models import AuditEntry
from app.services import audit
from app.services.resend import RESEND_DEAD_LETTER, reconcile_resends
from store import topics
from store.errors import InvalidMessageError
from tests.app.conftest import assert_error, audit_rows, make_settings, put_messages, running

pytestmark = pytest.mark.anyio

GROUP = "GID_dlq"
URL = "/api/messages/{}/resend"


async def dead_letter(api) -> tuple[dict, str]:
    """A message of Orders that GROUP failed once with max_reconsume_times 0: (its put result,
    the dead letter's offset id)."""
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    [put] = await put_messages(api, "Orders", {"body": "poison", "keys": ["k-1"], "tags": "T"})
    [got] = (await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": "Orders"})).json()["messages"]
    r = await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200
    [event] = [e for e in api.store.timeline(put["unique_key"]) if e.kind.value == "dead_letter"]
    assert event.topic == topics.dlq_topic(GROUP)
    return put, event.offset_msg_id


async def test_resend_puts_a_fresh_copy_on_the_original_topic_with_an_audit_entry(api, clock):
    put, dead_id = await dead_letter(api)
    r = await api.client.post(URL.format(dead_id))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and body["dead_letter"] == dead_id and body["replayed"] is False
    copy = body["result"]
    assert copy["topic"] == "Orders" and copy["unique_key"] == put["unique_key"]
    resent = api.store.get_by_offset_id(copy["offset_msg_id"])
    assert resent.body == b"poison" and resent.keys == ["k-1"] and resent.tags == "T" and resent.reconsume_times == 0
    assert topics.DLQ_ORIGIN_TOPIC not in resent.properties

    [entry] = audit_rows(api.sessions, action=RESEND_DEAD_LETTER)
    assert (entry.action, entry.target, entry.outcome, entry.actor, entry.at_ms) == (
        RESEND_DEAD_LETTER, dead_id, audit.OK, "bootstrap-admin", clock.now_ms())
    assert json.loads(entry.detail) == {"request": {"offset_msg_id": dead_id},
                                        "result": {"dead_letter_topic": topics.dlq_topic(GROUP), "resent": copy}}
    kinds = [e.kind.value for e in api.store.timeline(put["unique_key"])]
    assert kinds[-1] == "resent"
    # consumers get it again as a first delivery
    [again] = (await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": "Orders"})).json()["messages"]
    assert again["offset_msg_id"] == copy["offset_msg_id"] and again["delivery_attempt"] == 1


async def test_an_idempotency_key_resends_once(api):
    put, dead_id = await dead_letter(api)
    headers = {"Idempotency-Key": "click-1"}
    first = await api.client.post(URL.format(dead_id), headers=headers)
    second = await api.client.post(URL.format(dead_id.lower()), headers=headers)
    assert first.status_code == second.status_code == 200
    assert second.json()["replayed"] is True and second.json()["result"] == first.json()["result"]
    assert sum(hi - lo for _, lo, hi in api.store.topics()["Orders"]) == 2  # the original and one copy
    assert len(audit_rows(api.sessions, action=RESEND_DEAD_LETTER)) == 1
    third = await api.client.post(URL.format(dead_id))  # no key: an operator may resend again on purpose
    assert third.status_code == 200 and third.json()["result"] != first.json()["result"]


async def test_a_key_reused_for_another_dead_letter_is_409(api):
    _, dead_id = await dead_letter(api)
    _, other_dead_id = await dead_letter(api)
    assert (await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "k"})).status_code == 200
    r = await api.client.post(URL.format(other_dead_id), headers={"Idempotency-Key": "k"})
    assert_error(r, 409, "different request")
    assert sum(hi - lo for _, lo, hi in api.store.topics()["Orders"]) == 3  # two originals and one copy
    r = await api.client.post(URL.format(other_dead_id), headers={"Idempotency-Key": "x" * 256})
    assert_error(r, 400, "idempotency key")


async def test_not_a_dead_letter_is_400_and_leaves_no_audit_row(api):
    put, _ = await dead_letter(api)
    assert_error(await api.client.post(URL.format(put["offset_msg_id"])), 400, "not in a dead-letter topic")
    assert audit_rows(api.sessions, action=RESEND_DEAD_LETTER) == []


@pytest.mark.parametrize(("message_id", "status", "fragment"), [
    ("xyz", 400, "offset message id"),
    ("G" * 32, 400, "hex"),
    ("7F00000100002A9F00000000000FFFFF", 404, "no message"),
    ("0A0B0C0D00002A9F0000000000000000", 404, "no message"),
])
async def test_bad_or_unknown_ids(api, message_id, status, fragment):
    await dead_letter(api)
    assert_error(await api.client.post(URL.format(message_id)), status, fragment)
    assert audit_rows(api.sessions, action=RESEND_DEAD_LETTER) == []


async def test_a_failed_resend_is_recorded_as_failed(api, monkeypatch):
    _, dead_id = await dead_letter(api)

    def refuse(phys_offset, actor=None):
        raise InvalidMessageError("the dead letter does not say which topic it came from")

    monkeypatch.setattr(api.store, "resend_dead_letter", refuse)
    assert_error(await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "f"}), 400,
                 "does not say which topic")
    [entry] = audit_rows(api.sessions, action=RESEND_DEAD_LETTER)
    assert entry.outcome == audit.FAILED and "does not say which topic" in entry.outcome_detail
    r = await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "f"})
    assert_error(r, 409, "failed")


async def test_start_up_settles_resends_a_crash_left_pending(api, clock):
    _, dead_id = await dead_letter(api)
    _, other_dead_id = await dead_letter(api)
    with api.sessions.begin() as s:
        for target in (dead_id, other_dead_id):
            s.add(AuditEntry(at_ms=clock.now_ms(), actor="ops", action=RESEND_DEAD_LETTER, target=target,
                             detail=json.dumps({"request": {"offset_msg_id": target},
                                                "result": {"dead_letter_topic": topics.dlq_topic(GROUP)}}),
                             outcome=audit.PENDING))
    clock.advance(5)
    copy = api.store.resend_dead_letter(api.store.get_by_offset_id(dead_id).phys_offset, actor="ops")  # then a crash
    done = reconcile_resends(api.store, api.sessions)
    assert len(done) == 2
    finished, interrupted = audit_rows(api.sessions, action=RESEND_DEAD_LETTER)
    assert finished.outcome == audit.OK and "found in the trace" in finished.outcome_detail
    assert json.loads(finished.detail)["result"]["resent"]["offset_msg_id"] == copy.offset_msg_id
    assert interrupted.outcome == audit.FAILED and "interrupted" in interrupted.outcome_detail
    assert reconcile_resends(api.store, api.sessions) == []


async def test_the_server_settles_pending_resends_when_it_starts(data_dir, clock):
    settings = make_settings(data_dir)
    async with running(settings, clock) as api:
        _, dead_id = await dead_letter(api)
        with api.sessions.begin() as s:
            s.add(AuditEntry(at_ms=clock.now_ms(), actor="ops", action=RESEND_DEAD_LETTER, target=dead_id,
                             detail=json.dumps({"request": {"offset_msg_id": dead_id}}), outcome=audit.PENDING))
    async with running(settings, clock) as again:
        [entry] = audit_rows(again.sessions, action=RESEND_DEAD_LETTER)
        assert entry.outcome == audit.FAILED and "interrupted" in entry.outcome_detail
