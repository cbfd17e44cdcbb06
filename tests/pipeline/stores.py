"""A generated store with a bit of every retry path, for the timeline, dead-letter and key jobs.

Traced part (trace on): Orders received by pop group g-pop (acked, failed and redelivered,
dead-lettered after three attempts, timed out, left in flight, left waiting for a retry),
Payments pulled by push group g-push (retries through SCHEDULE_TOPIC_XXXX and %RETRY%g-push,
dead letters, committed offsets), a delayed message, dead letters resent by an operator.
Group g-bulk gives up on 24 Bulk messages at once (straight to its dead-letter queue), and pop
group g-slow leaves three Payments failed, waiting for their next attempt. Untraced part
(trace off, a day later): Audit messages retried and dead-lettered by g-push, one sent back by
g-audit, which records no progress, one past g-push's offset, and Ledger messages received by
pop group g-ledger, acknowledged behind one left in flight; their timelines come from the copies
alone. Keys repeat across messages and topics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from store.broker.metadata import TopicConfig
from store.clock import FakeClock
from store.format import topics
from store.format.codec import StoredMessage
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig

GEOMETRY = StoreGeometry(commitlog_file_size=64 * 1024, cq_file_size=20 * 64, index_slots=64, index_entries=2048)
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND, MINUTE, HOUR, DAY = 1_000, 60_000, 3_600_000, 86_400_000
POP_GROUP, PUSH_GROUP, SLOW_GROUP, AUDIT_GROUP, BULK_GROUP = "g-pop", "g-push", "g-slow", "g-audit", "g-bulk"
LEDGER_GROUP = "g-ledger"


def _pull_all(store: MessageStore, group: str, topic: str) -> list:
    """Every message of the topic from the group's committed offsets, committed past."""
    found = []
    for queue_id, low, high in store.topics().get(topic, []):
        start = store.offsets.get(topic, group, queue_id) or low
        if start >= high:
            continue
        result = store.pull(group, topic, queue_id, start, max_messages=64)
        found += result.messages
        store.commit_offset(group, topic, queue_id, result.next_offset)
    return found


def _pop_round(store: MessageStore, clock: FakeClock, outcome) -> None:
    """Receive every visible Orders message for g-pop and do what `outcome(key, attempt)` says:
    "ack", "nack" or None (leave it handed out)."""
    for got in store.receive(POP_GROUP, "Orders", 32, 5 * MINUTE):
        action = outcome(got.message.keys[0], got.delivery_attempt)
        if action == "ack":
            store.ack(POP_GROUP, got.receipt_handle)
        elif action is not None:
            store.nack(POP_GROUP, got.receipt_handle, action)
        clock.advance(7)


def _pop_outcome(key: str, attempt: int) -> str | None:
    n = int(key.split("-")[1]) if key.startswith("o-") else 0
    plan = {
        0: ["ack"],
        1: ["nack:declined", "nack:declined again", "nack:card expired"],
        2: ["nack:declined", "ack"],
        3: ["nack:out of stock", "nack:out of stock"],  # the second failure waits for attempt 3
        4: [None, None],  # times out, then stays handed out
        5: ["nack:address unknown", "nack:address unknown", "nack:address unknown"],
    }[n % 6] if key.startswith("o-") else ["ack"]
    step = plan[min(attempt, len(plan)) - 1]
    return step if step is None or step == "ack" else step.split(":", 1)[1]


def _push_round(store: MessageStore, topic: str, fail) -> None:
    """g-push consumes what is new in `topic` and sends back the messages `fail(message)` names."""
    for msg in _pull_all(store, PUSH_GROUP, topic):
        if fail(msg):
            store.send_back(msg.phys_offset, PUSH_GROUP, reason="rejected")


def build_retry_store(root: Path) -> Path:
    clock = FakeClock(START_MS)
    config = StoreConfig(geometry=GEOMETRY, flush="sync", schedule_interval_ms=0, trace=True)
    with MessageStore.open(root, config, clock=clock) as store:
        store.metadata.update_group(POP_GROUP, max_reconsume_times=2)
        store.metadata.update_group(PUSH_GROUP, max_reconsume_times=1)
        store.metadata.update_group(AUDIT_GROUP)
        store.metadata.update_group(BULK_GROUP)
        store.put_many([NewMessage("Orders", f"order {n}".encode(), tags=("paid", "refund")[n % 2],
                                   keys=[f"o-{n}", f"c-{n % 3}"], properties={"region": "eu"}) for n in range(24)])
        store.put_many([NewMessage("Payments", f"payment {n}".encode(), tags="card", keys=[f"p-{n}", f"c-{n % 3}"])
                        for n in range(9)])
        store.put(NewMessage("Orders", b"later", tags="paid", keys=["late-1"], delay_level=2))
        clock.advance(SECOND)

        _pop_round(store, clock, _pop_outcome)  # attempt 1
        _push_round(store, "Payments", lambda m: int(m.keys[0].split("-")[1]) % 3 != 2)
        clock.advance(10 * MINUTE)
        store.revive_due()
        store.deliver_due()
        _pop_round(store, clock, _pop_outcome)  # attempt 2 (and the delayed one's first)
        clock.advance(MINUTE)
        store.deliver_due()
        _push_round(store, topics.retry_topic(PUSH_GROUP), lambda m: int(m.keys[0].split("-")[1]) % 3 == 0)
        clock.advance(2 * HOUR)
        store.revive_due()
        for got in store.receive(POP_GROUP, "Orders", 32, 5 * MINUTE):  # attempt 3 of o-1, o-7, ... and o-5, o-11...
            if got.message.keys[0] in ("o-3", "o-9", "o-15", "o-21"):
                continue
            action = _pop_outcome(got.message.keys[0], got.delivery_attempt)
            if action == "ack":
                store.ack(POP_GROUP, got.receipt_handle)
            elif action is not None:
                store.nack(POP_GROUP, got.receipt_handle, action)
            clock.advance(11)

        clock.advance(HOUR)
        dead = [store.get_by_queue_offset(topics.dlq_topic(POP_GROUP), 0, n) for n in range(2)]
        for letter in dead:
            store.resend_dead_letter(letter.phys_offset, "ops", marks={topics.RESENT_FROM: letter.offset_msg_id})
        push_dead = store.get_by_queue_offset(topics.dlq_topic(PUSH_GROUP), 0, 0)
        store.resend_dead_letter(push_dead.phys_offset, "ops", topic=topics.retry_topic(PUSH_GROUP),
                                 marks={topics.RESENT_FROM: push_dead.offset_msg_id})

        bulk = store.put_many([NewMessage("Bulk", f"bulk {n}".encode(), tags=f"t{n % 4}", keys=[f"b-{n:02d}", "bulk"])
                               for n in range(24)])
        clock.advance(3 * SECOND)
        for put in bulk:  # straight to the dead-letter queue, a little later each
            store.send_back(put.phys_offset, BULK_GROUP, delay_level=-1, reason="unparseable")
            clock.advance(400)
        slow = "slow-host@9@1@2k4xqb00"  # a RocketMQ 5 client, named by the events it causes
        for n, got in enumerate(store.receive(SLOW_GROUP, "Payments", 3, 5 * MINUTE, client=slow)):
            handle = got.receipt_handle
            if n == 0:  # postponed first (a push consumer's backoff), within the same attempt
                handle = store.change_invisible(SLOW_GROUP, handle, 10 * MINUTE, client=slow)
            store.nack(SLOW_GROUP, handle, "busy", client=slow)  # failed, waiting for attempt 2

        clock.advance(DAY + 5 * HOUR)
        store.config = dataclasses.replace(store.config, trace=False)
        store.put_many([NewMessage("Audit", f"audit {n}".encode(), tags=("login", "logout")[n % 2],
                                   keys=[f"a-{n}", f"c-{n % 3}"]) for n in range(6)])
        clock.advance(SECOND)
        _push_round(store, "Audit", lambda m: int(m.keys[0].split("-")[1]) < 4)
        store.put(NewMessage("Audit", b"audit 6", tags="login", keys=["a-6"]))  # g-push's offset stops at it
        store.put_topic(TopicConfig("Ledger", queues=1))
        store.put_many([NewMessage("Ledger", f"entry {n}".encode(), keys=[f"l-{n}"]) for n in range(3)])
        first, *later = store.receive(LEDGER_GROUP, "Ledger", 3, 5 * MINUTE)
        for got in later:  # acknowledged behind the first, which stays handed out
            store.ack(LEDGER_GROUP, got.receipt_handle)
        clock.advance(10 * MINUTE)
        store.deliver_due()
        _push_round(store, topics.retry_topic(PUSH_GROUP), lambda m: m.keys[0] in ("a-0", "a-1"))
        audits = {m.keys[0]: m for q, low, high in store.topics()["Audit"]
                  for m in (store.get_by_queue_offset("Audit", q, n) for n in range(low, high))}
        store.send_back(audits["a-0"].phys_offset, AUDIT_GROUP)  # a group with no recorded progress at all
        clock.advance(MINUTE)
        store.deliver_due()
        clock.advance(3 * DAY)
        store.put(NewMessage("Audit", b"late audit", tags="login", keys=["a-9"], delay_level=4))
        store.send_back(audits["a-4"].phys_offset, AUDIT_GROUP)  # its retry not due yet
    return root


def every_record(store: MessageStore) -> list[StoredMessage]:
    """Every record of an open store, walked with its reader from the first offset to the end."""
    found, phys, segment = [], store.commitlog.min_offset, store.config.geometry.commitlog_file_size
    while phys < store.commitlog.end:
        try:
            msg = store.read(phys)
        except Exception:  # a filler: on to the next segment
            phys = (phys // segment + 1) * segment
            continue
        found.append(msg)
        phys += msg.size
    return found
