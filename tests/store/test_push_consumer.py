"""Push consumers over the embedded store: RocketMQ's retry schedule for concurrent groups,
retry in place for orderly groups, no retry for broadcast groups (fake clock, no sleeps)."""

from __future__ import annotations

import pytest

from store.broker.pull import NotReadableError
from store.broker.trace import TraceKind
from store.clients.push_consumer import PushConsumer
from store.clock import FakeClock
from store.errors import StoreError
from store.format import topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

RETRY_DELAYS_MS = parse_delay_levels(DEFAULT_DELAY_LEVELS)[2:]  # level 3 (10 s) .. 18 (2 h)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    with MessageStore.open(tmp_path / "store", small_config(trace=True), clock=clock) as s:
        yield s


def dead_letters(store, group):
    dlq = topics.dlq_topic(group)
    return [store.get_by_queue_offset(dlq, q, o) for q, low, high in store.topics().get(dlq, [])
            for o in range(low, high)]


def test_a_failing_concurrent_consumer_sees_rocketmqs_schedule_then_the_dlq(store, clock):
    seen = []
    consumer = PushConsumer(store, "G", "Orders", lambda d: seen.append((d, clock.now_ms())) or False)
    put = store.put(NewMessage("Orders", b"pay", tags="new"))
    consumer.poll()
    while not dead_letters(store, "G"):
        [due] = [e.due_ms for e in store.timeline(put.unique_key) if e.kind == TraceKind.RETRY][-1:]
        clock.set(due - 1)
        assert store.deliver_due().delivered == []
        clock.set(due)
        store.deliver_due()
        assert consumer.poll() == 1

    gaps = [later[1] - earlier[1] for earlier, later in zip(seen, seen[1:], strict=False)]
    assert gaps == RETRY_DELAYS_MS  # 10 s, 30 s, 1 m, 2 m, ... 2 h: 16 retries
    assert [d.attempt for d, _ in seen] == list(range(1, 18))
    assert {d.topic for d, _ in seen} == {"Orders"}  # retry copies are shown under their topic
    [dead] = dead_letters(store, "G")
    assert dead.reconsume_times == 17 and dead.unique_key == put.unique_key
    assert dead.properties[topics.ORIGIN_MESSAGE_ID] == put.offset_msg_id

    timeline = store.timeline(put.unique_key)
    retries = [e for e in timeline if e.kind == TraceKind.RETRY]
    assert [e.due_ms - e.at_ms for e in retries] == RETRY_DELAYS_MS
    assert [e.kind for e in timeline].count(TraceKind.RELEASED) == 16
    assert timeline[-1].kind == TraceKind.DEAD_LETTER and timeline[-1].topic == "%DLQ%G"
    assert [e.at_ms for e in timeline] == sorted(e.at_ms for e in timeline)


def test_max_reconsume_times_three_dead_letters_after_three_retries(store, clock):
    store.metadata.update_group("G3", max_reconsume_times=3)
    seen = []
    consumer = PushConsumer(store, "G3", "Orders", lambda d: seen.append(d.attempt) or False)
    put = store.put(NewMessage("Orders", b"x"))
    consumer.poll()
    while not dead_letters(store, "G3"):
        clock.advance(60_000)
        store.deliver_due()
        consumer.poll()
    assert seen == [1, 2, 3, 4]
    [dead] = dead_letters(store, "G3")
    assert dead.reconsume_times == 4 and dead.unique_key == put.unique_key


def test_success_commits_and_never_redelivers(store, clock):
    seen = []
    consumer = PushConsumer(store, "G", "Orders", lambda d: seen.append(d.message.body))
    store.put_many([NewMessage("Orders", f"m{i}".encode(), queue_id=i % 2) for i in range(6)])
    assert consumer.poll() == 6
    assert consumer.poll() == 0
    assert sorted(seen) == [f"m{i}".encode() for i in range(6)]
    assert store.offsets.get("Orders", "G", 0) == 3 and store.offsets.get("Orders", "G", 1) == 3
    assert topics.retry_topic("G") not in store.topics()
    counts = store.stats.snapshot()
    assert (counts.put, counts.delivered, counts.acked) == (6, 6, 6)


def test_tag_filter_skips_other_tags_and_moves_the_offset_past_them(store):
    seen = []
    consumer = PushConsumer(store, "G", "Orders", lambda d: seen.append(d.message.tags), tags="paid || shipped")
    store.put_many([NewMessage("Orders", b"x", tags=t, queue_id=0) for t in ["new", "paid", "new", "shipped"]])
    consumer.poll()
    assert seen == ["paid", "shipped"]
    assert store.offsets.get("Orders", "G", 0) == 4


def test_orderly_group_retries_in_place_and_holds_the_queue(store, clock):
    store.metadata.update_group("O", consume_mode="orderly", max_reconsume_times=5)
    failures_left = {b"first": 2}
    seen = []

    def listener(d):
        seen.append((d.message.body, d.attempt, clock.now_ms()))
        if failures_left.get(d.message.body, 0) > 0:
            failures_left[d.message.body] -= 1
            raise RuntimeError("database busy")

    consumer = PushConsumer(store, "O", "Orders", listener, suspend_ms=1000)
    store.put_many([NewMessage("Orders", body, queue_id=0) for body in (b"first", b"second", b"third")])
    start = clock.now_ms()
    assert consumer.poll() == 1  # first fails: nothing behind it is delivered
    clock.advance(999)
    assert consumer.poll() == 0  # still suspended
    clock.advance(1)
    assert consumer.poll() == 1
    clock.advance(1000)
    assert consumer.poll() == 3
    assert seen == [(b"first", 1, start), (b"first", 2, start + 1000), (b"first", 3, start + 2000),
                    (b"second", 1, start + 2000), (b"third", 1, start + 2000)]
    assert topics.retry_topic("O") not in store.topics() and not dead_letters(store, "O")
    failed = [e for e in store.timeline(store.get_by_queue_offset("Orders", 0, 0).unique_key)
              if e.kind == TraceKind.FAILED]
    assert [(e.attempt, e.reason, e.due_ms) for e in failed] == [
        (1, "RuntimeError: database busy", start + 1000), (2, "RuntimeError: database busy", start + 2000)]


def test_orderly_group_dead_letters_after_its_maximum_then_moves_on(store, clock):
    store.metadata.update_group("O", consume_mode="orderly", max_reconsume_times=2)
    seen = []
    consumer = PushConsumer(store, "O", "Orders",
                            lambda d: seen.append((d.message.body, d.attempt)) or d.message.body != b"poison")
    store.put_many([NewMessage("Orders", body, queue_id=0) for body in (b"poison", b"next")])
    for _ in range(3):
        consumer.poll()
        clock.advance(1000)
    assert seen == [(b"poison", 1), (b"poison", 2), (b"poison", 3), (b"next", 1)]
    [dead] = dead_letters(store, "O")
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert topics.retry_topic("O") not in store.topics()


def test_broadcast_consumers_each_get_everything_and_never_retry(store, clock):
    store.metadata.update_group("B", message_model="broadcast")
    got = {"a": [], "b": []}
    a = PushConsumer(store, "B", "Orders", lambda d: got["a"].append(d.message.body) or False)
    b = PushConsumer(store, "B", "Orders", lambda d: got["b"].append(d.message.body))
    store.put_many([NewMessage("Orders", f"m{i}".encode()) for i in range(4)])
    assert a.poll() == 4 and b.poll() == 4
    clock.advance(3_600_000)
    store.deliver_due()
    assert a.poll() == 0 and b.poll() == 0
    assert sorted(got["a"]) == sorted(got["b"]) == [f"m{i}".encode() for i in range(4)]
    assert topics.retry_topic("B") not in store.topics() and topics.SCHEDULE_TOPIC not in store.topics()
    assert not dead_letters(store, "B")
    assert store.offsets.of_group("B") == {}  # broadcast offsets stay with each consumer
    failed = [e for e in store.timeline(store.get_by_queue_offset("Orders", 0, 0).unique_key)
              if e.kind == TraceKind.FAILED]
    assert len(failed) == 1 and "do not retry" in failed[0].reason


def test_pull_rejects_dead_letter_topics_and_bad_sizes(store):
    store.metadata.update_group("G", max_reconsume_times=0)
    put = store.put(NewMessage("Orders", b"x"))
    store.send_back(put.phys_offset, "G")
    with pytest.raises(NotReadableError, match="dead-letter"):
        store.pull("G", "%DLQ%G", 0, 0)
    with pytest.raises(ValueError, match="between 1 and"):
        store.pull("G", "Orders", 0, 0, max_messages=0)
    with pytest.raises(ValueError, match="tag expression"):
        store.pull("G", "Orders", 0, 0, tags="a || ")


def test_pull_from_an_offset_outside_the_queue_starts_at_its_nearest_end(store):
    store.put_many([NewMessage("Orders", b"x", queue_id=0) for _ in range(3)])
    result = store.pull("G", "Orders", 0, 10)
    assert result.messages == [] and result.next_offset == 3 and result.max_offset == 3
    assert [m.queue_offset for m in store.pull("G", "Orders", 0, -5).messages] == [0, 1, 2]
    assert store.pull("G", "Nowhere", 0, 0).messages == []


def test_commit_offset_checks_the_range(store):
    store.put(NewMessage("Orders", b"x", queue_id=1))
    store.commit_offset("G", "Orders", 1, 1)
    assert store.offsets.get("Orders", "G", 1) == 1
    with pytest.raises(ValueError, match="outside queue"):
        store.commit_offset("G", "Orders", 1, 2)
    with pytest.raises(ValueError, match="outside queue"):
        store.commit_offset("G", "Orders", 1, -1)


def test_commit_offset_refuses_bad_names_and_queue_ids(store):
    for bad in [("bad group!", "Orders", 0), ("G", "bad topic!", 0), ("G", "Orders", -1)]:
        with pytest.raises(StoreError):
            store.commit_offset(*bad, 0)
    with pytest.raises(StoreError):
        store.pull("G", "Orders", 0, 0, tags="||")
