"""Resending dead letters: POST /api/messages/{id}/resend and POST /api/dlq/{group}/resend.
By default back to the failed group only, audited, repeat-safe, settled from the commit log."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import select

from app.models import ResendItem
from app.services import audit
from app.services.resend import (
    ACTION_PROPERTY,
    RESEND_DEAD_LETTERS,
    RESENT_FROM_PROPERTY,
    reconcile_resends,
)
from store.errors import DiskFullError
from store.format import topics
from tests.app.conftest import assert_error, audit_rows, bearer, make_settings, put_messages, running

pytestmark = pytest.mark.anyio

GROUP = "GID_dlq"
OTHER = "GID_other"
URL = "/api/messages/{}/resend"
BULK = f"/api/dlq/{GROUP}/resend"


async def receive(api, group: str, topic: str = "Orders") -> list[dict]:
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": topic, "max": 32})
    assert r.status_code == 200, r.text
    return r.json()["messages"]


async def dead_letter(api, key: str = "k-1") -> tuple[dict, str]:
    """A message of Orders that GROUP failed once with max_reconsume_times 0 (OTHER acked it):
    (its put result, the dead letter's offset id)."""
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    [put] = await put_messages(api, "Orders", {"body": "poison", "keys": [key], "tags": "T"})
    [got] = await receive(api, GROUP)
    r = await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200
    for other in await receive(api, OTHER):
        assert (await api.client.post(f"/api/groups/{OTHER}/ack",
                                      json={"receipt_handle": other["receipt_handle"]})).status_code == 200
    [event] = [e for e in api.store.timeline(put["unique_key"]) if e.kind.value == "dead_letter"]
    assert event.topic == topics.dlq_topic(GROUP)
    return put, event.offset_msg_id


def copies_in(api, topic: str, unique_key: str) -> list:
    return api.store.query_by_unique_key(topic, unique_key).messages


def resends(api) -> list:
    return audit_rows(api.sessions, action=RESEND_DEAD_LETTERS)


async def test_resend_goes_back_to_the_failed_group_only_with_an_audit_entry(api, clock):
    put, dead_id = await dead_letter(api)
    r = await api.client.post(URL.format(dead_id), json={"reason": "ticket 42"})
    assert r.status_code == 200, r.text
    body = r.json()
    retry = topics.pop_retry_topic(GROUP, "Orders")  # GROUP receives by pop: its pop retry topic
    assert (body["dead_letter"], body["destination"], body["replayed"]) == (dead_id, retry, False)
    copy = api.store.get_by_offset_id(body["result"]["offset_msg_id"])
    assert copy.topic == retry and copy.unique_key == put["unique_key"] and copy.body == b"poison"
    assert copy.keys == ["k-1"] and copy.tags == "T" and copy.reconsume_times == 0
    assert copy.properties[ACTION_PROPERTY] == str(body["action_id"])
    assert copy.properties[RESENT_FROM_PROPERTY] == dead_id
    assert copy.properties[topics.RETRY_TOPIC] == "Orders"

    [entry] = resends(api)
    assert (entry.id, entry.action, entry.target, entry.outcome, entry.actor, entry.role, entry.reason) == (
        body["action_id"], RESEND_DEAD_LETTERS, f"message:{dead_id}", audit.OK, "bootstrap-admin", "admin",
        "ticket 42")
    assert json.loads(entry.detail)["result"]["items"] == [{"dead_letter": dead_id, "to": retry}]
    # the failed group gets it again as a first delivery; the group that acked it does not
    assert await receive(api, OTHER) == []
    [again] = await receive(api, GROUP)
    assert again["offset_msg_id"] == copy.offset_msg_id and again["delivery_attempt"] == 1
    r = await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": again["receipt_handle"]})
    assert r.status_code == 200
    # the timeline follows the copy; its verdict counts the copy's attempts, not the first run's
    timeline = (await api.client.get(f"/messages/{put['unique_key']}/timeline.json")).json()
    assert [h["kind"] for h in timeline["hops"]][-3:] == ["resent", "delivered", "consumed"]
    [verdict] = [v for v in timeline["verdicts"] if v["group"] == GROUP]
    assert (verdict["state"], verdict["attempts"]) == ("consumed", 1)


async def test_a_push_group_gets_it_through_its_retry_topic(api):
    [put] = await put_messages(api, "Orders", {"body": "p", "keys": ["push-1"]})
    original = api.store.get_by_offset_id(put["offset_msg_id"])
    api.store.metadata.update_group("GID_push", max_reconsume_times=0)
    api.store.send_back(original.phys_offset, "GID_push", delay_level=-1)  # a push consumer gave up on it
    [dead] = copies_in(api, topics.dlq_topic("GID_push"), put["unique_key"])
    r = await api.client.post(URL.format(dead.offset_msg_id))
    assert r.status_code == 200, r.text
    assert r.json()["destination"] == topics.retry_topic("GID_push")


@pytest.mark.parametrize(("destination", "expected"), [("topic", "Orders"), ({"topic": "Replays"}, "Replays")])
async def test_resend_to_the_original_or_a_chosen_topic(api, destination, expected):
    put, dead_id = await dead_letter(api)
    await api.client.put("/api/topics/Replays", json={"queues": 1})  # a resend goes to an existing topic only
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": destination})
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert (result["status"], result["destination"]) == ("ok", expected)
    copy = api.store.get_by_offset_id(result["new_offset_msg_id"])
    assert copy.topic == expected and topics.RETRY_TOPIC not in copy.properties
    if expected == "Orders":  # every group sees it again
        assert [m["offset_msg_id"] for m in await receive(api, OTHER)] == [copy.offset_msg_id]


async def test_a_dead_letter_resent_already_needs_force_and_a_reason(api):
    put, dead_id = await dead_letter(api)
    assert (await api.client.post(URL.format(dead_id))).status_code == 200
    assert_error(await api.client.post(URL.format(dead_id)), 409, "resent already", "bootstrap-admin")
    assert_error(await api.client.post(BULK, json={"message_ids": [dead_id]}), 409, "resent already")
    assert_error(await api.client.post(URL.format(dead_id), json={"force": True}), 400, "reason")
    r = await api.client.post(URL.format(dead_id), json={"force": True, "reason": "customer asked twice"})
    assert r.status_code == 200
    assert len(copies_in(api, topics.pop_retry_topic(GROUP, "Orders"), put["unique_key"])) == 2


async def test_identical_concurrent_requests_make_one_copy(api):
    put, dead_id = await dead_letter(api)
    keyed = [api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "click-1"}) for _ in range(4)]
    unkeyed = [api.client.post(URL.format(dead_id)) for _ in range(4)]
    answers = await asyncio.gather(*keyed, *unkeyed)
    assert {a.status_code for a in answers} <= {200, 409}
    made = {a.json()["result"]["offset_msg_id"] for a in answers if a.status_code == 200}
    assert len(made) == 1
    assert len(copies_in(api, topics.pop_retry_topic(GROUP, "Orders"), put["unique_key"])) == 1
    # a repeat with the key later gets the first answer
    again = await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "click-1"})
    if again.status_code == 200:
        assert again.json()["replayed"] is True and again.json()["result"]["offset_msg_id"] in made
    else:
        assert_error(again, 409, "resent already")


async def test_bulk_resend_by_id_or_unique_key_with_a_result_each(api):
    first, first_dead = await dead_letter(api, "a")
    second, _ = await dead_letter(api, "b")
    ids = [first_dead, second["unique_key"], "NO_SUCH_KEY"]
    r = await api.client.post(BULK, json={"message_ids": ids, "dry_run": True})
    assert r.status_code == 200 and r.json()["action_id"] is None
    assert [x["status"] for x in r.json()["results"]] == ["would_resend", "would_resend", "not_found"]
    assert resends(api) == []
    r = await api.client.post(BULK, json={"message_ids": ids, "reason": "outage"})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["message_id"] for x in results] == ids
    assert [x["status"] for x in results] == ["ok", "ok", "not_found"]
    assert "no dead letter of group GID_dlq has the id or unique key NO_SUCH_KEY" in results[2]["error"]
    [entry] = resends(api)
    assert entry.target == f"dlq:{GROUP}" and json.loads(entry.detail)["result"]["count"] == 2


async def test_the_support_role_resends_up_to_its_limit(data_dir, clock):
    async with running(make_settings(data_dir, resend_limit=1), clock) as api:
        first, first_dead = await dead_letter(api, "a")
        second, second_dead = await dead_letter(api, "b")
        tokens = {}
        for role in ("support", "operator"):
            tokens[role] = (await api.client.post("/api/tokens", json={"name": role, "role": role})).json()["value"]
        r = await api.client.post(BULK, json={"message_ids": [first_dead, second_dead]},
                                  headers=bearer(tokens["support"]))
        assert_error(r, 403, "at most 1", "redrive job")
        r = await api.client.post(BULK, json={"message_ids": [first_dead]}, headers=bearer(tokens["support"]))
        assert r.status_code == 200 and resends(api)[0].actor == "support"
        r = await api.client.post(BULK, json={"message_ids": [second_dead]}, headers=bearer(tokens["operator"]))
        assert r.status_code == 200


async def test_bad_resend_requests(api):
    put, dead_id = await dead_letter(api)
    assert_error(await api.client.post(URL.format(put["offset_msg_id"])), 400, "not in a dead-letter topic")
    assert_error(await api.client.post(URL.format("xyz")), 400, "offset message id")
    assert_error(await api.client.post(URL.format("G" * 32)), 400, "offset message id")
    assert_error(await api.client.post(URL.format("7F00000100002A9F00000000000FFFFF")), 404, "no message")
    assert_error(await api.client.post(BULK, json={"message_ids": []}), 422)
    assert_error(await api.client.post(BULK, json={"message_ids": ["x"] * 1001}), 422)
    assert_error(await api.client.post(BULK, json={"message_ids": [dead_id], "destination": "elsewhere"}), 422)
    assert_error(await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": "%DLQ%x"}}),
                 400, "system topic")
    assert_error(await api.client.post("/api/dlq/nobody/resend", json={"message_ids": [dead_id]}), 404,
                 "no dead letters")
    assert_error(await api.client.post(f"/api/dlq/{OTHER}x/resend", json={"message_ids": [dead_id]}), 404)
    assert_error(await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "x" * 256}), 422)
    assert resends(api) == []


async def test_a_failed_resend_is_recorded_and_can_be_tried_again(api, monkeypatch):
    put, dead_id = await dead_letter(api)
    real = api.store.resend_dead_letter

    def refuse(*args, **kwargs):
        raise DiskFullError("the disk is full")

    monkeypatch.setattr(api.store, "resend_dead_letter", refuse)
    r = await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "f"})
    assert_error(r, 507, "disk is full")
    [entry] = resends(api)
    assert entry.outcome == audit.FAILED and "disk is full" in entry.outcome_detail
    with api.sessions() as s:
        [item] = s.scalars(select(ResendItem)).all()
        assert (item.status, item.claim) == ("failed", None)
    monkeypatch.setattr(api.store, "resend_dead_letter", real)
    assert_error(await api.client.post(URL.format(dead_id), headers={"Idempotency-Key": "f"}), 409, "failed")
    assert (await api.client.post(URL.format(dead_id))).status_code == 200  # not resent: no force needed


async def test_start_up_settles_from_the_commit_log_one_copy_per_item(api, clock, monkeypatch):
    _, done_dead = await dead_letter(api, "a")
    _, cut_dead = await dead_letter(api, "b")

    # the resend of done_dead acts, then "crashes" before its outcome is recorded
    def crash(*args, **kwargs):
        raise SystemExit("killed")

    original_perform = audit.perform

    def perform_then_crash(sessions, clock_, **kw):
        act = kw["act"]

        def act_and_die(decided):
            act(decided)
            crash()

        return original_perform(sessions, clock_, **{**kw, "act": act_and_die})

    monkeypatch.setattr(audit, "perform", perform_then_crash)
    with pytest.raises(SystemExit):
        await api.client.post(URL.format(done_dead))

    # the resend of cut_dead is recorded but dies before it touches the store
    def die_first(sessions, clock_, **kw):
        return original_perform(sessions, clock_, **{**kw, "act": lambda decided: crash()})

    monkeypatch.setattr(audit, "perform", die_first)
    with pytest.raises(SystemExit):
        await api.client.post(URL.format(cut_dead))
    monkeypatch.setattr(audit, "perform", original_perform)

    # both entries stay pending (SystemExit is not an Exception: the failure path never ran)
    assert [e.outcome for e in resends(api)] == [audit.PENDING, audit.PENDING]
    done = reconcile_resends(api.store, api.sessions)
    assert len(done) == 2
    finished, interrupted = resends(api)
    assert finished.outcome == audit.OK and "found in the commit log" in finished.outcome_detail
    assert interrupted.outcome == audit.FAILED and "interrupted" in interrupted.outcome_detail
    with api.sessions() as s:
        items = {i.dead_letter_id: i for i in s.scalars(select(ResendItem))}
    copy = api.store.get_by_offset_id(items[done_dead].new_offset_msg_id)
    assert copy.properties[RESENT_FROM_PROPERTY] == done_dead
    assert (items[cut_dead].status, items[cut_dead].claim) == ("failed", None)
    assert reconcile_resends(api.store, api.sessions) == []
    # the interrupted one may be resent now, without force
    assert (await api.client.post(URL.format(cut_dead))).status_code == 200


async def test_an_operator_edits_the_body_and_properties_before_resending(api):
    put, dead_id = await dead_letter(api)
    support = (await api.client.post("/api/tokens", json={"name": "sup", "role": "support"})).json()["value"]
    edit = {"body": "fixed", "properties": {"region": "eu", "TAGS": None}}
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "edit": edit}, headers=bearer(support))
    assert_error(r, 403, "may not edit")
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "edit": {"properties": {"TAGS": "x"}}})
    assert_error(r, 400, "cannot be set here")
    preview = await api.client.post(BULK, json={"message_ids": [dead_id], "dry_run": True,
                                                "edit": {"body": "fixed", "properties": {"region": "eu"}}})
    assert preview.json()["edit"]["properties"] == [{"name": "region", "before": None, "after": "eu"}]
    assert preview.json()["edit"]["body"]["diff"][-2:] == ["-poison", "+fixed"]
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "reason": "customer fixed the address",
                                          "edit": {"body": "fixed", "properties": {"region": "eu"}}})
    assert r.status_code == 200, r.text
    copy = api.store.get_by_offset_id(r.json()["results"][0]["new_offset_msg_id"])
    assert copy.body == b"fixed" and copy.properties["region"] == "eu" and copy.unique_key == put["unique_key"]
    assert copy.keys == ["k-1"] and copy.tags == "T"
    [entry] = resends(api)
    assert json.loads(entry.detail)["result"]["edit"]["properties"][0]["after"] == "eu"
    assert_error(await api.client.post(BULK, json={"message_ids": [dead_id, dead_id + "0"], "edit": {"body": "x"}}),
                 400, "one dead letter at a time")


async def test_the_message_page_edits_and_resends_with_a_diff_first(api):
    put, dead_id = await dead_letter(api)
    html = {"Accept": "text/html"}
    page = await api.client.get(f"/messages/{dead_id}", headers=html)
    assert 'data-testid="edit-resend"' in page.text
    form = {"group": GROUP, "message_id": dead_id, "destination": "group", "edit": "true",
            "edit_body": "poison, fixed", "edit_properties": "region=eu"}
    confirm = await api.client.post("/dead-letters/resend", data=form, headers=html)
    assert confirm.status_code == 200 and 'data-testid="edit-diff"' in confirm.text
    assert "+poison, fixed" in confirm.text and "region" in confirm.text
    done = await api.client.post("/dead-letters/resend", data={**form, "confirm": "true"}, headers=html)
    assert done.status_code == 200
    [copy] = copies_in(api, topics.pop_retry_topic(GROUP, "Orders"), put["unique_key"])
    assert copy.body == b"poison, fixed" and copy.properties["region"] == "eu"
    bad = await api.client.post("/dead-letters/resend", data={**form, "edit_properties": "no equals sign"},
                                headers=html)
    assert bad.status_code == 400 and "not name=value" in bad.text
