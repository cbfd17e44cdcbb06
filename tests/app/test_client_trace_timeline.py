"""Timelines of a store a real RocketMQ broker wrote, with the clients' own message trace merged
in: every delivery each client saw is an attempt of the message's timeline, with its group and
outcome, told once."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from app.pages.message import transaction_data
from app.services.timeline import message_timeline
from store.message_store import MessageStore, StoreConfig
from tests.conftest import BROKER_GEOMETRY, GOLDEN_GEOMETRY

SUCCESS = {"CONSUME_SUCCESS", "SUCCESS"}


@pytest.fixture
def broker_store(golden_broker_dir):
    with MessageStore.open(golden_broker_dir, StoreConfig(geometry=BROKER_GEOMETRY), read_only=True) as store:
        yield store


def _deliveries(manifest) -> dict[str, Counter]:
    """msgId -> Counter of (group, attempt, consumed?) over the manifest's consumption log."""
    found: dict[str, Counter] = {}
    for group, log in manifest["consumption"].items():
        for d in log:
            found.setdefault(d["msgId"], Counter())[group, d["reconsumeTimes"] + 1, d["outcome"] in SUCCESS] += 1
    return found


def test_every_delivery_a_client_saw_is_an_attempt_of_the_timeline(broker_store, golden_broker_manifest):
    for msg_id, wanted in _deliveries(golden_broker_manifest).items():
        timeline = message_timeline(broker_store, msg_id)
        assert timeline.traced and timeline.client_trace_contexts > 0
        delivered = Counter((h.group, h.attempt) for h in timeline.hops if h.kind == "delivered" and not h.derived)
        outcomes = Counter((h.group, h.attempt, h.kind == "consumed") for h in timeline.hops
                           if h.kind in ("consumed", "failed") and not h.derived)
        assert outcomes == wanted, msg_id
        assert delivered == Counter({(g, a): n for (g, a, _), n in wanted.items()}), msg_id


def _group_story(timeline, group: str) -> list[tuple[str, int | None]]:
    return [(h.kind, h.attempt) for h in timeline.hops if h.group == group]


def test_a_dead_letter_shows_each_failed_attempt_once_and_every_group(broker_store, golden_broker_manifest):
    [fail_3] = [d for d in golden_broker_manifest["deadLetters"] if d["key"] == "fail-3"]
    timeline = message_timeline(broker_store, fail_3["queryMsgByKey"]["rows"][0]["msgId"])
    assert _group_story(timeline, "cg-fail") == [
        ("delivered", 1), ("failed", 1), ("retry_scheduled", 2), ("redelivered", 2), ("delivered", 2), ("failed", 2),
        ("retry_scheduled", 3), ("redelivered", 3), ("delivered", 3), ("failed", 3), ("dead_lettered", 3)]
    failures = [h for h in timeline.hops if h.kind == "failed"]
    assert all(not h.derived and "RECONSUME_LATER" not in h.detail and "FAILED" in h.detail for h in failures)
    states = {v.group: v.state for v in timeline.verdicts}
    assert states == {"cg-fail": "dead_lettered", "cg-ok": "consumed", "cg-flaky": "consumed",
                      "cg-bcast": "consumed"}
    [sent] = [h for h in timeline.hops if h.kind == "sent"]
    assert "producer group pg-orders" in sent.detail and sent.offset_msg_id == timeline.first_copy.offset_msg_id


def test_an_orderly_message_retried_in_place_has_no_copy_but_both_attempts(broker_store, golden_broker_manifest):
    [paid] = [s for s in golden_broker_manifest["sends"] if s.get("keys") == "fifo-1002-paid"]
    timeline = message_timeline(broker_store, paid["result"]["msgId"])
    assert [m.topic for m in timeline.copies] == ["OrdersFifo"]
    assert _group_story(timeline, "cg-orderly") == [("delivered", 1), ("failed", 1), ("delivered", 2),
                                                      ("consumed", 2)]
    [failed] = [h for h in timeline.hops if h.group == "cg-orderly" and h.kind == "failed"]
    assert "FAILED" in failed.detail
    assert {v.group: v.state for v in timeline.verdicts}["cg-orderly"] == "consumed"


@pytest.mark.parametrize("keys, end", [("pay-commit", "committed"), ("pay-rollback", "rolled back"),
                                        ("pay-unknown", "committed")])
def test_a_transaction_ends_in_its_timeline(broker_store, golden_broker_manifest, keys, end):
    [send] = [t["send"] for t in golden_broker_manifest["transactions"]
              if t["event"] == "send" and t["send"]["keys"] == keys]
    timeline = message_timeline(broker_store, send["result"]["msgId"])
    transactions = [h.detail for h in timeline.hops if h.kind == "transaction" and not h.derived]
    assert transactions and f"transaction {end} by pg-payments" in transactions[-1], transactions
    halves = [h.detail for h in timeline.hops if h.kind == "transaction" and h.derived]
    assert halves and all(d.startswith("half message") for d in halves)
    assert not any(v.group.startswith("CID_RMQ_SYS_") for v in timeline.verdicts)
    if keys == "pay-unknown":
        assert "left unknown" in transactions[0] and "answering the broker's check" in transactions[-1]


def test_a_store_without_client_trace_keeps_its_reconstructed_timeline(golden_store_dir, golden_manifest):
    with MessageStore.open(golden_store_dir, StoreConfig(geometry=GOLDEN_GEOMETRY), read_only=True) as store:
        key = next(part.split("\x01")[1] for r in golden_manifest["commitlogRecords"] if r["kind"] == "MESSAGE"
                   for part in r["propertiesString"].split("\x02") if part.startswith("UNIQ_KEY\x01"))
        timeline = message_timeline(store, key)
    assert timeline.client_trace_contexts == 0 and not timeline.traced
    assert timeline.hops and all(h.derived for h in timeline.hops)


@pytest.mark.parametrize("keys, state, words", [
    ("pay-commit", "committed", "committed: delivered to Payments"),
    ("pay-rollback", "rolled_back", "rolled back: never delivered"),
    ("pay-unknown", "committed", "committed after the broker asked the producer 1 time"),
])
def test_a_transaction_is_linked_from_its_half_message_to_its_end(broker_store, golden_broker_manifest, keys, state,
                                                                   words):
    """From the store alone (half message, op records, the committed copy), not the clients' trace."""
    [send] = [t["send"] for t in golden_broker_manifest["transactions"]
              if t["event"] == "send" and t["send"]["keys"] == keys]
    timeline = message_timeline(broker_store, send["result"]["msgId"])
    standing = timeline.transaction
    assert standing is not None and standing.state == state and words in standing.detail
    half = [m for m in timeline.copies if m.topic == "RMQ_SYS_TRANS_HALF_TOPIC"]
    assert standing.half_offset_msg_id == max(half, key=lambda m: m.queue_offset).offset_msg_id
    for copy in timeline.copies:  # the message page of each copy says the same
        assert transaction_data(broker_store, copy) == vars(standing)


def test_a_half_message_with_no_end_waits_for_the_producers_check(broker_store, golden_broker_manifest):
    """The first half message of pay-unknown, before the broker's check re-put it: no op record names it."""
    from app.services.transactions import transaction_standing

    [first] = [m for m in message_timeline(broker_store, "7F000001228B4E0E2F2A74C9A6040006").copies
               if m.topic == "RMQ_SYS_TRANS_HALF_TOPIC" and m.queue_offset == 2]
    standing = transaction_standing(broker_store, [first])
    assert standing.state == "waiting" and "waiting for the producer's check" in standing.detail
    ordinary = [m for m in message_timeline(broker_store, _any_order_key(golden_broker_manifest)).copies]
    assert transaction_standing(broker_store, ordinary) is None


def _any_order_key(manifest) -> str:
    return next(s["result"]["msgId"] for s in manifest["sends"] if s["topic"] == "Orders" and s.get("keys"))


def test_the_message_page_lists_what_the_clients_trace_says(broker_store, golden_broker_manifest):
    from app.pages.message import client_trace_data

    [fail_3] = [d for d in golden_broker_manifest["deadLetters"] if d["key"] == "fail-3"]
    key = fail_3["queryMsgByKey"]["rows"][0]["msgId"]
    first = message_timeline(broker_store, key).first_copy
    rows = client_trace_data(broker_store, first)
    assert [r["type"] for r in rows][:1] == ["Pub"] and rows[0]["outcome"] == "sent"
    failed = [r for r in rows if r["group"] == "cg-fail" and r["type"] == "SubAfter"]
    assert [r["outcome"] for r in failed] == ["FAILED"] * 3
    assert {r["attempt"] for r in rows if r["group"] == "cg-fail" and r["type"] == "SubBefore"} == {1, 2, 3}
    assert all(r["client"] == "127.0.0.1" for r in rows)
    assert [r["time_ms"] for r in rows] == sorted(r["time_ms"] for r in rows)


def _mqadmin_trace_rows(stdout: str) -> Counter:
    """(type, group, client host, cost ms, success) of each row queryMsgTraceById printed."""
    rows = Counter()
    for line in stdout.splitlines():
        columns = line.split()
        if columns and columns[0] in ("Pub", "Sub"):
            kind, group, host, *_, cost, status = columns
            rows[kind, group, host, int(cost.removesuffix("ms")), status == "success"] += 1
    return rows


def _timeline_trace_rows(timeline) -> Counter:
    rows = Counter()
    for h in timeline.hops:
        if h.derived or h.kind not in ("sent", "consumed", "failed"):
            continue
        cost = int(re.search(r"(\d+) ms", h.detail).group(1))
        if h.kind == "sent":
            group = re.search(r"producer group (\S+) at", h.detail).group(1)
            rows["Pub", group, "127.0.0.1", cost, h.detail.startswith("sent")] += 1
        else:
            rows["Sub", h.group, "127.0.0.1", cost, h.kind == "consumed"] += 1
    return rows


def test_timelines_tell_what_mqadmin_traced(broker_store, golden_broker_manifest):
    """Every row of `mqadmin queryMsgTraceById` (fail-3 and the orderly fifo-1002-paid among
    them) is a hop of the message's timeline: sends with their producer group and cost, each
    consumption with its group, cost and outcome."""
    assert len(golden_broker_manifest["traces"]) == 11
    for trace in golden_broker_manifest["traces"]:
        if trace["error"]:
            continue
        timeline = message_timeline(broker_store, trace["msgId"])
        assert "at 127.0.0.1" in " ".join(h.detail for h in timeline.hops if not h.derived)
        assert _timeline_trace_rows(timeline) == _mqadmin_trace_rows(trace["stdout"]), trace["msgId"]
