"""Pop-style receive with a fake clock: invisible times, receipt handles, the redelivery backoff,
dead letters, tag filters, concurrency, restarts and a randomized model check."""

from __future__ import annotations

import json
import random
import shutil
import threading

import pytest

from store.broker.metadata import TopicConfig
from store.broker.pop import PopRequestError
from store.broker.pop_state import COMPACT_AFTER_STALE, STATE_FILE, PopStateError, load_state
from store.broker.pull import NotReadableError
from store.broker.receipt import ReceiptHandle, ReceiptHandleError, decode_handle
from store.clock import FakeClock
from store.errors import ReadOnlyStoreError
from store.format import topics
from store.format.delay_levels import DelayLevels
from store.format.topics import PERM_WRITE
from store.log.config_file import ConfigFileError
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage
from tests.live_server import wait_until
from tests.store.helpers import small_config

START_MS = 1_700_000_000_000
SECOND = 1000
MINUTE = 60 * SECOND
GROUP = "GID_pop"
TOPIC = "Orders"
DELAYS = DelayLevels().delays_ms


def backoff(attempt: int) -> int:
    return DELAYS[min(2 + attempt, len(DELAYS)) - 1]


@pytest.fixture
def clock():
    return FakeClock(START_MS)


@pytest.fixture
def store(tmp_path, clock):
    s = MessageStore.open(tmp_path / "store", small_config(), clock=clock)
    yield s
    s.close()
    with MessageStore.open(tmp_path / "store", small_config(), read_only=True) as again:
        assert again.check().ok


def put(store, count: int, topic: str = TOPIC, **kwargs) -> list:
    return [store.put(NewMessage(topic=topic, body=b"m%d" % i, **kwargs)) for i in range(count)]


def keys_of(received) -> list[str]:
    return [r.message.unique_key for r in received]


def test_received_messages_carry_handle_attempt_and_deadline(store, clock):
    [sent] = put(store, 1)
    [got] = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
    assert got.message.unique_key == sent.unique_key and got.message.body == b"m0"
    assert got.delivery_attempt == 1
    assert got.invisible_until_ms == START_MS + 30 * SECOND
    assert isinstance(got.receipt_handle, str) and " " not in got.receipt_handle
    assert store.receive(GROUP, TOPIC, 10, 30 * SECOND) == []  # invisible now


def test_acked_messages_are_never_delivered_again(store, clock):
    put(store, 5)
    first = store.receive(GROUP, TOPIC, 5, 30 * SECOND)
    for r in first:
        store.ack(GROUP, r.receipt_handle)
    for _ in range(4):
        clock.advance(3 * 3600 * SECOND)
        assert store.revive_due() == 0
        assert store.receive(GROUP, TOPIC, 10, 30 * SECOND) == []
    assert store.offsets.of_group(GROUP) == {TOPIC: {0: 2, 1: 1, 2: 1, 3: 1}}


def test_an_expired_delivery_comes_back_with_the_next_attempt_after_the_backoff(store, clock):
    put(store, 1)
    [first] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    clock.advance(30 * SECOND - 1)
    assert store.revive_due() == 0
    clock.advance(1)  # the invisible time ran out at +30 s: attempt 2 is visible at +30 s + 10 s
    assert store.revive_due() == 1
    clock.advance(10 * SECOND - 1)
    assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
    clock.advance(1)
    [second] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    assert second.message.unique_key == first.message.unique_key
    assert second.delivery_attempt == 2 and second.receipt_handle != first.receipt_handle
    assert second.invisible_until_ms == START_MS + 70 * SECOND


def test_an_expiry_noticed_late_keeps_the_times_of_the_rule(store, clock):
    put(store, 1)
    store.receive(GROUP, TOPIC, 1, 60 * SECOND)
    clock.advance(60 * SECOND + 10 * SECOND - 1)  # nobody ran revive_due: receive notices the expiry
    assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
    clock.advance(1)
    [again] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    assert again.delivery_attempt == 2


def test_a_nack_makes_the_message_visible_after_the_backoff_of_its_attempt(store, clock):
    put(store, 1)
    for attempt in (1, 2, 3):
        [got] = store.receive(GROUP, TOPIC, 1, 5 * MINUTE)
        assert got.delivery_attempt == attempt
        clock.advance(2 * SECOND)
        store.nack(GROUP, got.receipt_handle, "downstream unavailable")
        clock.advance(backoff(attempt) - 1)
        assert store.receive(GROUP, TOPIC, 1, 5 * MINUTE) == []
        clock.advance(1)
    assert [backoff(a) for a in (1, 2, 3)] == [10 * SECOND, 30 * SECOND, MINUTE]
    [fourth] = store.receive(GROUP, TOPIC, 1, 5 * MINUTE)
    assert fourth.delivery_attempt == 4


def test_change_invisible_moves_the_deadline_and_replaces_the_handle(store, clock):
    put(store, 1)
    [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    clock.advance(20 * SECOND)
    handle = store.change_invisible(GROUP, got.receipt_handle, 60 * SECOND)
    assert handle != got.receipt_handle
    with pytest.raises(ReceiptHandleError, match="stale.*change_invisible"):
        store.ack(GROUP, got.receipt_handle)
    clock.advance(59 * SECOND)  # +79 s: the first deadline (+30 s) is long past
    assert store.revive_due() == 0
    assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
    shorter = store.change_invisible(GROUP, handle, 1 * SECOND)
    clock.advance(SECOND)
    assert store.revive_due() == 1
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.ack(GROUP, shorter)
    clock.advance(backoff(1))
    [again] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    assert again.delivery_attempt == 2  # change_invisible is not a new attempt


def test_refused_handles_say_why(store, clock):
    put(store, 3)
    a, b, c = store.receive(GROUP, TOPIC, 3, 30 * SECOND)
    for bad in ("", "not base64!!", "bm9wZQ", "x" * 5000, None, 42):
        with pytest.raises(ReceiptHandleError, match="malformed|missing"):
            store.ack(GROUP, bad)
    fields = decode_handle(a.receipt_handle)
    forged = ReceiptHandle(fields.group, fields.topic, fields.queue_id, fields.queue_offset, fields.generation,
                           "0" * 16).encode()
    with pytest.raises(ReceiptHandleError, match="unknown"):
        store.ack(GROUP, forged)
    unknown_topic = ReceiptHandle(GROUP, "Elsewhere", 0, 0, 1, "ab").encode()
    with pytest.raises(ReceiptHandleError, match="unknown"):
        store.ack(GROUP, unknown_topic)
    with pytest.raises(ReceiptHandleError, match="another group"):
        store.ack("GID_other", a.receipt_handle)
    store.ack(GROUP, a.receipt_handle)
    with pytest.raises(ReceiptHandleError, match="already acknowledged"):
        store.ack(GROUP, a.receipt_handle)
    with pytest.raises(ReceiptHandleError, match="already acknowledged"):
        store.nack(GROUP, a.receipt_handle)
    store.nack(GROUP, b.receipt_handle, "no")
    with pytest.raises(ReceiptHandleError, match="already nacked"):
        store.ack(GROUP, b.receipt_handle)
    clock.advance(30 * SECOND)
    with pytest.raises(ReceiptHandleError, match="expired"):  # before any revive ran
        store.change_invisible(GROUP, c.receipt_handle, 10 * SECOND)
    store.revive_due()
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.ack(GROUP, c.receipt_handle)
    clock.advance(backoff(1))
    [c2] = [r for r in store.receive(GROUP, TOPIC, 3, 30 * SECOND) if r.message.unique_key == c.message.unique_key]
    with pytest.raises(ReceiptHandleError):
        store.ack(GROUP, c.receipt_handle)
    store.ack(GROUP, c2.receipt_handle)


def test_ack_many_acknowledges_each_handle_it_can_and_says_why_not_for_the_rest(store, clock):
    put(store, 3)
    a, b, c = store.receive(GROUP, TOPIC, 3, 30 * SECOND)
    store.ack(GROUP, b.receipt_handle)
    outcomes = store.ack_many(GROUP, [a.receipt_handle, b.receipt_handle, "garbage!", c.receipt_handle])
    assert outcomes[0] is None and outcomes[3] is None
    assert "already acknowledged" in str(outcomes[1]) and "malformed" in str(outcomes[2])
    assert store.ack_many(GROUP, []) == []
    clock.advance(24 * 3600 * SECOND)
    assert store.receive(GROUP, TOPIC, 10, 30 * SECOND) == []
    assert store.offsets.of_group(GROUP) == {TOPIC: {0: 1, 1: 1, 2: 1}}


def test_old_handles_refused_after_a_restart_explain_themselves(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 2)
        a, b = store.receive(GROUP, TOPIC, 2, 30 * SECOND)
        store.ack(GROUP, a.receipt_handle)
        newer = store.change_invisible(GROUP, b.receipt_handle, 40 * SECOND)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        with pytest.raises(ReceiptHandleError, match="no longer in flight"):
            store.ack(GROUP, a.receipt_handle)
        with pytest.raises(ReceiptHandleError, match="stale"):
            store.ack(GROUP, b.receipt_handle)
        store.ack(GROUP, newer)


def test_after_the_last_attempt_the_message_is_dead_lettered(store, clock):
    store.metadata.update_group(GROUP, max_reconsume_times=2)
    [sent] = put(store, 1, tags="TagA", keys=["order-1"])
    original = store.read(sent.phys_offset)
    for attempt in (1, 2, 3):
        [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
        assert got.delivery_attempt == attempt
        if attempt < 3:
            store.nack(GROUP, got.receipt_handle, f"failure {attempt}")
            clock.advance(backoff(attempt))
    clock.advance(30 * SECOND)  # the third attempt times out
    assert store.revive_due() == 1
    cq = store.queues.get("%DLQ%GID_pop", 0)
    assert (cq.min_offset, cq.max_offset) == (0, 1)
    dead = store.get_by_queue_offset("%DLQ%GID_pop", 0, 0)
    assert dead.reconsume_times == 3 and dead.body == b"m0" and dead.unique_key == sent.unique_key
    assert dead.tags == "TagA" and dead.keys == ["order-1"]
    assert dead.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    assert dead.properties["RETRY_TOPIC"] == TOPIC
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert dead.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.unique_key
    assert "DELAY" not in dead.properties
    assert dead.born_timestamp == original.born_timestamp
    clock.advance(24 * 3600 * SECOND)
    assert store.receive(GROUP, TOPIC, 10, 30 * SECOND) == []
    assert store.offsets.get(TOPIC, GROUP, sent.queue_id) == 1
    with pytest.raises(NotReadableError, match="dead-letter"):
        store.receive(GROUP, "%DLQ%GID_pop", 1, 30 * SECOND)


def test_a_scheduled_message_is_dead_lettered_without_its_delay(store, clock):
    store.metadata.update_group(GROUP, max_reconsume_times=0)
    store.put(NewMessage(topic=TOPIC, body=b"later", delay_level=1))
    clock.advance(SECOND)
    store.deliver_due()
    [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    assert got.message.properties["DELAY"] == "1"  # RocketMQ's delivered copy keeps it
    store.nack(GROUP, got.receipt_handle)
    dead = store.get_by_queue_offset("%DLQ%GID_pop", 0, 0)
    assert "DELAY" not in dead.properties and dead.reconsume_times == 1


def test_unreadable_unknown_and_system_topics(store, clock):
    assert store.receive(GROUP, "NoSuchTopic", 1, 30 * SECOND) == []
    store.put_topic(TopicConfig("WriteOnly", queues=2, perm=PERM_WRITE))
    with pytest.raises(NotReadableError, match="not readable"):
        store.receive(GROUP, "WriteOnly", 1, 30 * SECOND)
    with pytest.raises(NotReadableError):
        store.receive(GROUP, topics.SCHEDULE_TOPIC, 1, 30 * SECOND)
    with pytest.raises(NotReadableError):
        store.receive(GROUP, "%DLQ%anything", 1, 30 * SECOND)
    with pytest.raises(ValueError):
        store.receive(GROUP, "bad topic", 1, 30 * SECOND)
    with pytest.raises(ValueError):
        store.receive("bad group", TOPIC, 1, 30 * SECOND)
    store.metadata.update_group("GID_off", consume_enable=False)
    put(store, 1)
    with pytest.raises(PopRequestError, match="disabled"):
        store.receive("GID_off", TOPIC, 1, 30 * SECOND)


@pytest.mark.parametrize("kwargs", [
    {"max_messages": 0}, {"max_messages": 1001}, {"max_messages": True}, {"max_messages": 2.0},
    {"invisible_ms": 999}, {"invisible_ms": 12 * 3600 * SECOND + 1}, {"invisible_ms": "30000"},
    {"wait_ms": -1}, {"wait_ms": 60_001}, {"tags": 7}, {"tags": "a || "},
])
def test_bad_receive_arguments_are_refused(store, kwargs):
    args = {"group": GROUP, "topic": TOPIC, "max_messages": 1, "invisible_ms": 30 * SECOND} | kwargs
    with pytest.raises(PopRequestError):
        store.receive(**args)


def test_bad_nack_and_change_invisible_arguments_are_refused(store):
    put(store, 1)
    [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    with pytest.raises(PopRequestError):
        store.nack(GROUP, got.receipt_handle, reason=b"bytes")
    with pytest.raises(PopRequestError):
        store.change_invisible(GROUP, got.receipt_handle, 0)
    store.ack(GROUP, got.receipt_handle)  # still valid: the bad calls changed nothing


def test_tag_filters_pass_over_other_tags_and_count_them_consumed(store, clock):
    for i, tag in enumerate(["a", "b", "c", None, "a", "b"]):
        store.put(NewMessage(topic=TOPIC, body=b"%d" % i, tags=tag, queue_id=0))
    got = store.receive(GROUP, TOPIC, 10, 30 * SECOND, tags="a || c")
    assert [r.message.body for r in got] == [b"0", b"2", b"4"]
    for r in got:
        store.ack(GROUP, r.receipt_handle)
    assert store.offsets.get(TOPIC, GROUP, 0) == 6
    assert store.receive(GROUP, TOPIC, 10, 30 * SECOND, tags="*") == []
    everything = store.receive("GID_all", TOPIC, 10, 30 * SECOND, tags="*")
    assert len(everything) == 6


def test_queues_are_served_in_turn(store):
    for queue_id in range(4):
        for i in range(3):
            store.put(NewMessage(topic=TOPIC, body=b"%d-%d" % (queue_id, i), queue_id=queue_id))
    got = store.receive(GROUP, TOPIC, 4, 30 * SECOND)
    assert sorted(r.message.queue_id for r in got) == [0, 1, 2, 3]
    rest = store.receive(GROUP, TOPIC, 100, 30 * SECOND)
    assert len(rest) == 8 and len({(r.message.queue_id, r.message.queue_offset) for r in got + rest}) == 12


def test_the_consumer_offset_is_the_lowest_offset_not_done(store, clock):
    for i in range(5):
        store.put(NewMessage(topic=TOPIC, body=b"%d" % i, queue_id=0))
    got = store.receive(GROUP, TOPIC, 5, 30 * SECOND)
    assert store.offsets.get(TOPIC, GROUP, 0) == 0
    store.ack(GROUP, got[1].receipt_handle)
    store.ack(GROUP, got[2].receipt_handle)
    assert store.offsets.get(TOPIC, GROUP, 0) == 0
    store.ack(GROUP, got[0].receipt_handle)
    assert store.offsets.get(TOPIC, GROUP, 0) == 3
    store.ack(GROUP, got[4].receipt_handle)
    store.ack(GROUP, got[3].receipt_handle)
    assert store.offsets.get(TOPIC, GROUP, 0) == 5


def test_a_group_starts_at_its_committed_offset(store):
    for i in range(5):
        store.put(NewMessage(topic=TOPIC, body=b"%d" % i, queue_id=0))
    store.offsets.commit(TOPIC, GROUP, 0, 3)
    assert [r.message.queue_offset for r in store.receive(GROUP, TOPIC, 10, 30 * SECOND)] == [3, 4]


def test_concurrent_receivers_never_share_an_invisible_message(store):
    sent = {r.unique_key for r in put(store, 200)}
    seen: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def consume():
        try:
            while batch := store.receive(GROUP, TOPIC, 3, 60 * SECOND):
                with lock:
                    seen.extend(keys_of(batch))
                for r in batch[::2]:
                    store.ack(GROUP, r.receipt_handle)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(seen) == len(set(seen)) == 200 and set(seen) == sent


class StoppedWatch:
    """A long poll's seconds that never pass: such a poll can only end with a message."""

    def __call__(self) -> float:
        return 0.0


class StepWatch:
    """A long poll's seconds that advance a step at each reading; keeps what was read."""

    def __init__(self, step: float):
        self.step, self.read = step, []

    def __call__(self) -> float:
        self.read.append(len(self.read) * self.step)
        return self.read[-1]


def test_a_long_poll_returns_when_a_message_arrives(store):
    store.pop.wait_clock = StoppedWatch()  # its wait never runs out: only the message can end it
    result: list = []

    def poll():
        result.extend(store.receive(GROUP, TOPIC, 5, 30 * SECOND, wait_ms=20_000))

    t = threading.Thread(target=poll)
    t.start()
    wait_until(lambda: store._long_polls == 1, 60, "the long poll to wait")
    put(store, 1)
    t.join(timeout=60)
    assert not t.is_alive()
    assert len(result) == 1


def test_a_long_poll_gives_up_when_its_wait_is_over_and_not_before(store):
    watch = store.pop.wait_clock = StepWatch(0.0625)
    assert store.receive(GROUP, TOPIC, 5, 30 * SECOND, wait_ms=125) == []
    # read when it began, then after each wait: it looked again until 0.125 s had passed
    assert watch.read == [0.0, 0.0625, 0.125]
    assert store.receive(GROUP, TOPIC, 5, 30 * SECOND, wait_ms=0) == []


def test_a_clean_restart_keeps_handles_and_deadlines(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 4)
        a, b, c, _ = store.receive(GROUP, TOPIC, 4, 30 * SECOND)
        store.ack(GROUP, a.receipt_handle)
        store.nack(GROUP, b.receipt_handle, "later")
    saved = json.loads((tmp_path / "config" / STATE_FILE).read_text())
    assert saved["version"] == 1 and len(saved["subscriptions"][0]["inFlight"]) == 3
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        store.ack(GROUP, c.receipt_handle)
        assert store.receive(GROUP, TOPIC, 10, 30 * SECOND) == []
        clock.advance(10 * SECOND)  # b's backoff is over; d's deadline is at +30 s
        [b2] = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert (b2.message.unique_key, b2.delivery_attempt) == (b.message.unique_key, 2)
        put(store, 1)
        [e] = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert e.delivery_attempt == 1
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        clock.advance(20 * SECOND + backoff(1))  # d expired at +30 s, visible at +40 s
        again = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert [r.delivery_attempt for r in again] == [2]


def test_a_crash_loses_nothing_and_redelivers_what_was_in_flight(tmp_path, clock):
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"
    store = MessageStore.open(live, small_config(), clock=clock)
    sent = {r.unique_key for r in put(store, 10)}
    before = store.receive(GROUP, TOPIC, 4, 30 * SECOND)
    store.ack(GROUP, before[0].receipt_handle)
    store.flush()
    after = store.receive(GROUP, TOPIC, 3, 30 * SECOND)  # not saved: delivered again as attempt 1
    store.ack(GROUP, before[1].receipt_handle)  # not saved: delivered again after its invisible time
    store.nack(GROUP, before[2].receipt_handle)
    shutil.copytree(live, crashed)  # the store as a crash would leave it: open, abort marker present
    store.close()
    acked = {before[0].message.unique_key}
    with MessageStore.open(crashed, small_config(), clock=clock) as store:
        assert store.abnormal_shutdown
        store.ack(GROUP, before[3].receipt_handle)  # saved by the flush: still valid
        acked.add(before[3].message.unique_key)
        with pytest.raises(ReceiptHandleError):
            store.ack(GROUP, after[0].receipt_handle)
        redelivered = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert {r.message.unique_key for r in redelivered} == sent - acked - {before[1].message.unique_key,
                                                                              before[2].message.unique_key}
        assert all(r.delivery_attempt == 1 for r in redelivered)
        for r in redelivered:
            store.ack(GROUP, r.receipt_handle)
            acked.add(r.message.unique_key)
        clock.advance(30 * SECOND + backoff(1))
        late = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert sorted(r.delivery_attempt for r in late) == [2, 2]
        acked |= set(keys_of(late))
        assert acked == sent


def test_saved_state_is_fitted_to_the_queues_on_load(tmp_path):
    state = {"version": 1, "subscriptions": [{"group": "G", "topic": "T", "nextOffsets": {"0": 9, "1": 2, "7": 1},
                                              "inFlight": [
        {"queueId": 0, "queueOffset": 1, "physOffset": 200, "uniqueKey": "k1", "offsetMsgId": "o1", "attempt": 1,
         "generation": 1, "receiptHandle": "h1", "invisibleUntilMs": 5},
        {"queueId": 0, "queueOffset": 6, "physOffset": 600, "uniqueKey": "k6", "offsetMsgId": "o6", "attempt": 1,
         "generation": 1, "receiptHandle": "h6", "invisibleUntilMs": 5},  # past the queue's end: lost in a crash
        {"queueId": 1, "queueOffset": 0, "physOffset": 999, "uniqueKey": "k", "offsetMsgId": "o", "attempt": 2,
         "generation": 3, "visibleAtMs": 5},  # the unit points elsewhere
        {"queueId": 1, "queueOffset": 1, "physOffset": 210, "uniqueKey": "k", "offsetMsgId": "o", "attempt": 2,
         "generation": 3, "visibleAtMs": 5, "lastFailure": "boom"}]}]}
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    bounds = {("T", 0): (0, 5), ("T", 1): (0, 4)}
    loaded = load_state(tmp_path, lambda t, q: bounds.get((t, q)), lambda t, q, o: 100 * (o + 1) + 10 * q)
    sub = loaded.get("G", "T")
    assert sub.cursors == {0: 5, 1: 2}
    assert sorted(sub.entries) == [(0, 1), (1, 1)]
    assert sub.entries[(1, 1)].last_failure == "boom" and sub.entries[(1, 1)].receipt_handle is None
    assert sub.pop_expired(5).receipt_handle == "h1" and sub.pop_visible(5).queue_offset == 1


def test_timers_of_finished_deliveries_do_not_pile_up(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(geometry=StoreGeometry()), clock=clock) as store:
        store.put_many([NewMessage(topic=TOPIC, body=b"m") for _ in range(10_000)])
        sub = None
        for _ in range(10):
            got = store.receive(GROUP, TOPIC, 1000, 12 * 3600 * SECOND)  # deadlines far away: no timer fires
            assert store.ack_many(GROUP, [r.receipt_handle for r in got[:-10]]) == [None] * (len(got) - 10)
            for r in got[-10:]:
                store.change_invisible(GROUP, r.receipt_handle, 12 * 3600 * SECOND)
            sub = store.pop.state.get(GROUP, TOPIC)
            assert len(sub._invisible) <= 2 * COMPACT_AFTER_STALE + len(sub.entries)
        assert len(sub.entries) == 100 and len(sub._invisible) < 10_000
        clock.advance(12 * 3600 * SECOND)
        assert store.revive_due() == 100


def test_an_unreadable_state_file_stops_the_open(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 1)
        store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    path = tmp_path / "config" / STATE_FILE
    path.write_text('{"version": 99, "subscriptions": []}')
    with pytest.raises(PopStateError, match="version"):
        MessageStore.open(tmp_path, small_config(), clock=clock)
    path.write_text("{torn")
    with pytest.raises(ConfigFileError):
        MessageStore.open(tmp_path, small_config(), clock=clock)
    path.unlink()
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:  # no state: from the consumer offset
        assert [r.delivery_attempt for r in store.receive(GROUP, TOPIC, 1, 30 * SECOND)] == [1]


def test_a_read_only_store_does_not_receive(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 1)
    with MessageStore.open(tmp_path, small_config(), read_only=True, clock=clock) as store, \
            pytest.raises(ReadOnlyStoreError):
        store.receive(GROUP, TOPIC, 1, 30 * SECOND)


def test_the_timeline_lists_every_hop_in_order(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(trace=True), clock=clock) as store:
        store.metadata.update_group(GROUP, max_reconsume_times=2)
        [sent] = put(store, 1)
        [first] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
        clock.advance(5 * SECOND)
        store.nack(GROUP, first.receipt_handle, "boom")
        clock.advance(10 * SECOND)
        [second] = store.receive(GROUP, TOPIC, 1, 20 * SECOND)
        clock.advance(50 * SECOND)  # expired at +35 s, visible at +65 s: noticed by this receive
        [third] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
        store.nack(GROUP, third.receipt_handle, "bad again")
        events = store.timeline(sent.unique_key)
        hops = [(e.kind.value, e.attempt, e.at_ms - START_MS) for e in events]
        assert hops == [("stored", None, 0), ("delivered", 1, 0), ("failed", 1, 5000), ("delivered", 2, 15000),
                        ("invisible_timeout", 2, 35000), ("delivered", 3, 65000), ("failed", 3, 65000),
                        ("dead_letter", 3, 65000)]
        assert events[1].due_ms == START_MS + 30 * SECOND and events[1].group == GROUP
        assert events[2].reason == "boom" and events[2].due_ms == START_MS + 15 * SECOND
        assert events[4].due_ms == START_MS + 65 * SECOND
        assert events[-1].reason == "3 delivery attempts failed; last: bad again"
        assert events[-1].topic == "%DLQ%GID_pop" and events[-1].reconsume_times == 3
        assert [e.kind.value for e in store.timeline(events[-1].offset_msg_id)] == [h[0] for h in hops]


def test_a_message_failing_every_time_follows_rocketmqs_schedule_to_the_dlq(store, clock):
    [sent] = put(store, 1)
    waits = []
    for attempt in range(1, 18):
        [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
        assert got.delivery_attempt == attempt
        if attempt % 2:
            store.nack(GROUP, got.receipt_handle, "still failing")
        else:
            clock.advance(30 * SECOND)  # or let the invisible time run out
        if attempt == 17:
            break
        wait = backoff(attempt)
        clock.advance(wait - 1)
        assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
        clock.advance(1)
        waits.append(wait // 1000)
    assert waits == [10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]
    dead = store.get_by_queue_offset("%DLQ%GID_pop", 0, 0)
    assert dead.reconsume_times == 17 and dead.unique_key == sent.unique_key
    clock.advance(10 * 3600 * SECOND)
    assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []


def test_the_backoff_follows_the_stores_delay_table(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(delay_levels="1s 2s 3s 4s"), clock=clock) as store:
        put(store, 1)
        for attempt, wait in ((1, 3000), (2, 4000), (3, 4000)):
            [got] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
            assert got.delivery_attempt == attempt
            store.nack(GROUP, got.receipt_handle)
            clock.advance(wait - 1)
            assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
            clock.advance(1)


class PopModel:
    """What the store must do, message by message (unique key -> state)."""

    def __init__(self, max_attempts: int):
        self.max_attempts = max_attempts
        self.attempts: dict[str, int] = {}
        self.handle: dict[str, str | None] = {}
        self.invisible_until: dict[str, int] = {}
        self.visible_at: dict[str, int] = {}
        self.done: set[str] = set()
        self.dead: set[str] = set()

    def add(self, key: str) -> None:
        self.attempts[key], self.handle[key], self.visible_at[key] = 0, None, 0

    def _settle(self, key: str, now: int) -> None:
        """Apply an expiry that has happened by `now`."""
        if self.handle[key] is not None and now >= self.invisible_until[key]:
            self._fail(key, self.invisible_until[key])

    def _fail(self, key: str, at: int) -> None:
        self.handle[key] = None
        if self.attempts[key] >= self.max_attempts:
            self.dead.add(key)
        else:
            self.visible_at[key] = at + backoff(self.attempts[key])

    def visible(self, now: int) -> set[str]:
        for key in self.attempts:
            if key not in self.done | self.dead:
                self._settle(key, now)
        return {k for k in self.attempts if k not in self.done | self.dead and self.handle[k] is None
                and self.visible_at[k] <= now}

    def valid(self, key: str, handle: str, now: int) -> bool:
        return key not in self.done | self.dead and self.handle[key] == handle and now < self.invisible_until[key]


@pytest.mark.parametrize("seed", range(8))
def test_randomized_operations_agree_with_the_model(tmp_path, seed):
    rng = random.Random(seed)
    clock = FakeClock(START_MS)
    model = PopModel(max_attempts=4)
    store = MessageStore.open(tmp_path, small_config(), clock=clock)
    store.metadata.update_group(GROUP, max_reconsume_times=3)
    held: list[tuple[str, str]] = []  # (key, handle), current and stale

    def check_ack_like(op: str) -> None:
        key, handle = rng.choice(held)
        now = clock.now_ms()
        model.visible(now)
        expect_ok = model.valid(key, handle, now)
        try:
            if op == "ack":
                store.ack(GROUP, handle)
            elif op == "nack":
                store.nack(GROUP, handle, "model says no")
            else:
                new = store.change_invisible(GROUP, handle, rng.choice([SECOND, 20 * SECOND, 90 * SECOND]))
        except ReceiptHandleError:
            assert not expect_ok, (op, key)
            return
        assert expect_ok, (op, key)
        if op == "ack":
            model.done.add(key)
        elif op == "nack":
            model._fail(key, now)
        else:
            model.handle[key] = new
            model.invisible_until[key] = store.pop.state.get(GROUP, TOPIC).entries[
                (decode_handle(new).queue_id, decode_handle(new).queue_offset)].due_ms
            held.append((key, new))

    for key in (r.unique_key for r in put(store, 12)):
        model.add(key)
    for _ in range(300):
        op = rng.choices(["receive", "ack", "nack", "change", "advance", "boundary", "restart", "put"],
                         weights=[30, 20, 10, 6, 12, 12, 3, 4])[0]
        now = clock.now_ms()
        if op == "receive":
            want = rng.choice([1, 3, 1000])
            visible = model.visible(now)
            got = store.receive(GROUP, TOPIC, want, rng.choice([SECOND, 10 * SECOND, 45 * SECOND]))
            keys = keys_of(got)
            assert len(keys) == len(set(keys)) == min(want, len(visible)) and set(keys) <= visible
            for r in got:
                key = r.message.unique_key
                model.attempts[key] += 1
                assert r.delivery_attempt == model.attempts[key]
                model.handle[key], model.invisible_until[key] = r.receipt_handle, r.invisible_until_ms
                held.append((key, r.receipt_handle))
        elif op in ("ack", "nack", "change") and held:
            check_ack_like(op)
        elif op == "advance":
            clock.advance(rng.choice([1, 999, SECOND, 10 * SECOND, MINUTE]))
        elif op == "boundary":
            times = [t for k in model.attempts if k not in model.done | model.dead
                     for t in (model.invisible_until.get(k, 0) if model.handle[k] else model.visible_at[k],)
                     if t > now]
            if times:
                clock.set(min(times) - rng.choice([0, 0, 1]))
        elif op == "restart":
            store.close()
            store = MessageStore.open(tmp_path, small_config(), clock=clock)
        elif op == "put":
            model.add(store.put(NewMessage(topic=TOPIC, body=b"late")).unique_key)
    for _ in range(model.max_attempts + 1):  # drain: everything ends acked or dead-lettered
        clock.advance(3 * 3600 * SECOND)
        visible = model.visible(clock.now_ms())
        got = store.receive(GROUP, TOPIC, 1000, 30 * SECOND)
        assert set(keys_of(got)) == visible
        for r in got:
            store.ack(GROUP, r.receipt_handle)
            model.done.add(r.message.unique_key)
    store.revive_due()
    dlq = store.queues.get("%DLQ%GID_pop", 0)
    dead_keys = [store.get_by_queue_offset("%DLQ%GID_pop", 0, o).unique_key
                 for o in range(dlq.max_offset)] if dlq else []
    assert sorted(dead_keys) == sorted(model.dead)
    assert model.done | model.dead == set(model.attempts)
    store.close()
