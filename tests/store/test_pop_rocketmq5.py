"""What pop receive offers a server of the RocketMQ 5 clients, with a fake clock: redelivery as
soon as an invisible time runs out (that time is the client's backoff), renewing a delivery
under the same handle, and a consumer's own dead-lettering."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from store.broker.pop import PopRequestError
from store.broker.pop_state import STATE_FILE, PopStateError
from store.broker.receipt import ReceiptHandle, ReceiptHandleError
from store.clock import FakeClock, SystemClock
from store.errors import ReadOnlyStoreError
from store.format import topics
from store.log.retention import HOUR_MS
from store.message_store import MessageStore, NewMessage
from tests.live_server import wait_until
from tests.store.helpers import small_config
from tests.store.test_pop import GROUP, SECOND, START_MS, TOPIC, backoff, put

DLQ = f"%DLQ%{GROUP}"


@pytest.fixture
def clock():
    return FakeClock(START_MS)


@pytest.fixture
def store(tmp_path, clock):
    s = MessageStore.open(tmp_path / "store", small_config(trace=True), clock=clock)
    yield s
    s.close()
    with MessageStore.open(tmp_path / "store", small_config(), read_only=True) as again:
        assert again.check().ok


def grpc_receive(store, max_messages: int = 1, invisible_ms: int = 30 * SECOND, **kwargs) -> list:
    return store.receive(GROUP, TOPIC, max_messages, invisible_ms, backoff_after_timeout=False, **kwargs)


def hops(store, unique_key: str) -> list[tuple]:
    return [(e.kind.value, e.attempt, e.at_ms - START_MS, None if e.due_ms is None else e.due_ms - START_MS)
            for e in store.timeline(unique_key)]


def saved_entries(root) -> list[dict]:
    saved = json.loads((root / "config" / STATE_FILE).read_text())
    return [entry for sub in saved["subscriptions"] for entry in sub["inFlight"]]


# -- redelivery at the expiry --------------------------------------------------------------------
def test_an_expired_delivery_is_visible_again_at_its_expiry_without_the_backoff(store, clock):
    [sent] = put(store, 1)
    [first] = grpc_receive(store)
    clock.advance(30 * SECOND - 1)
    assert grpc_receive(store) == []
    clock.advance(1)  # the invisible time runs out now: attempt 2 at once
    [second] = grpc_receive(store, invisible_ms=20 * SECOND)
    assert (second.message.unique_key, second.delivery_attempt) == (first.message.unique_key, 2)
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.ack(GROUP, first.receipt_handle)
    clock.advance(25 * SECOND)  # expired at +50 s; noticed by the scheduler's revive at +55 s
    assert store.revive_due() == 1
    [third] = grpc_receive(store)
    assert third.delivery_attempt == 3
    store.ack(GROUP, third.receipt_handle)
    assert hops(store, sent.unique_key) == [
        ("stored", None, 0, None), ("delivered", 1, 0, 30_000), ("invisible_timeout", 1, 30_000, 30_000),
        ("delivered", 2, 30_000, 50_000), ("invisible_timeout", 2, 50_000, 50_000),
        ("delivered", 3, 55_000, 85_000), ("acked", 3, 55_000, None)]


def test_a_push_consumers_backoff_is_its_change_of_invisible_time(store, clock):
    put(store, 1)
    [got] = grpc_receive(store, invisible_ms=60 * SECOND)
    clock.advance(3 * SECOND)  # the listener failed: the client asks to see the message again in 1 s
    handle = store.change_invisible(GROUP, got.receipt_handle, SECOND)
    clock.advance(SECOND - 1)
    assert grpc_receive(store) == []
    clock.advance(1)
    [again] = grpc_receive(store)
    assert again.delivery_attempt == 2
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.ack(GROUP, handle)


def test_a_nack_still_waits_the_backoff(store, clock):
    put(store, 1)
    [got] = grpc_receive(store)
    store.nack(GROUP, got.receipt_handle, "no")
    clock.advance(backoff(1) - 1)
    assert grpc_receive(store) == []
    clock.advance(1)
    assert [r.delivery_attempt for r in grpc_receive(store)] == [2]


def test_the_rest_receive_keeps_the_backoff_and_each_delivery_follows_its_own_receive(store, clock):
    put(store, 1)
    store.receive(GROUP, TOPIC, 1, 30 * SECOND)  # REST: the backoff follows the expiry
    clock.advance(30 * SECOND)
    assert grpc_receive(store) == []
    clock.advance(backoff(1))
    [second] = grpc_receive(store)  # handed out by the gRPC front: no backoff after this one
    clock.advance(30 * SECOND)
    [third] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
    assert (second.delivery_attempt, third.delivery_attempt) == (2, 3)
    clock.advance(30 * SECOND + backoff(3) - 1)
    assert store.receive(GROUP, TOPIC, 1, 30 * SECOND) == []
    clock.advance(1)
    assert [r.delivery_attempt for r in store.receive(GROUP, TOPIC, 1, 30 * SECOND)] == [4]


def test_the_last_attempt_still_goes_to_the_dead_letter_queue(store, clock):
    store.metadata.update_group(GROUP, max_reconsume_times=2)
    [sent] = put(store, 1)
    for attempt in (1, 2, 3):
        [got] = grpc_receive(store)
        assert got.delivery_attempt == attempt
        clock.advance(30 * SECOND)
    assert store.revive_due() == 1
    dead = store.get_by_queue_offset(DLQ, 0, 0)
    assert dead.unique_key == sent.unique_key and dead.reconsume_times == 3
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert grpc_receive(store) == []
    assert [h[0] for h in hops(store, sent.unique_key)][-2:] == ["invisible_timeout", "dead_letter"]


def test_the_choice_is_saved_with_each_delivery_and_older_state_files_mean_the_backoff(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 2)
        [rest] = store.receive(GROUP, TOPIC, 1, 30 * SECOND)
        [grpc] = grpc_receive(store)
    flags = {e["receiptHandle"]: e.get("backoffAfterTimeout") for e in saved_entries(tmp_path)}
    assert flags == {rest.receipt_handle: None, grpc.receipt_handle: False}  # the default is not written
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        clock.advance(30 * SECOND)
        [again] = store.receive(GROUP, TOPIC, 10, 30 * SECOND)
        assert again.message.unique_key == grpc.message.unique_key  # the REST one waits its backoff
        store.ack(GROUP, again.receipt_handle)
        clock.advance(backoff(1))
        assert [r.message.unique_key for r in store.receive(GROUP, TOPIC, 10, 30 * SECOND)] == [
            rest.message.unique_key]


def test_a_state_file_with_a_wrong_backoff_flag_stops_the_open(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 1)
        grpc_receive(store)
    path = tmp_path / "config" / STATE_FILE
    path.write_text(path.read_text().replace('"backoffAfterTimeout":false', '"backoffAfterTimeout":"no"'))
    assert '"no"' in path.read_text()
    with pytest.raises(PopStateError, match="backoffAfterTimeout"):
        MessageStore.open(tmp_path, small_config(), clock=clock)


def test_the_option_is_keyword_only_and_a_boolean(store):
    put(store, 1)
    with pytest.raises(TypeError):
        store.receive(GROUP, TOPIC, 1, 30 * SECOND, None, 0, None, False)
    for wrong in (0, "no", None):
        with pytest.raises(PopRequestError, match="backoff_after_timeout"):
            store.receive(GROUP, TOPIC, 1, 30 * SECOND, backoff_after_timeout=wrong)
    assert len(grpc_receive(store)) == 1


# -- renew ---------------------------------------------------------------------------------------
def test_renew_moves_the_deadline_and_keeps_the_handle(store, clock):
    put(store, 1)
    [got] = grpc_receive(store)
    for _ in range(5):  # a server renewing a slow listener's message every 20 s
        clock.advance(20 * SECOND)
        store.renew(GROUP, got.receipt_handle, 30 * SECOND)
    assert store.revive_due() == 0 and grpc_receive(store) == []
    entry = store.pop.state.get(GROUP, TOPIC).entries[(got.message.queue_id, got.message.queue_offset)]
    assert entry.due_ms == clock.now_ms() + 30 * SECOND and entry.attempt == 1
    store.ack(GROUP, got.receipt_handle)
    clock.advance(3 * 3600 * SECOND)
    assert store.revive_due() == 0 and grpc_receive(store) == []


def test_a_renewed_delivery_that_runs_out_comes_back_as_the_next_attempt(store, clock):
    put(store, 1)
    [got] = grpc_receive(store)
    clock.advance(25 * SECOND)
    store.renew(GROUP, got.receipt_handle, 10 * SECOND)  # now until +35 s
    clock.advance(10 * SECOND - 1)
    store.renew(GROUP, got.receipt_handle, SECOND)  # and may be shortened: until +35 s - 1 ms + 1 s
    clock.advance(SECOND)
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.renew(GROUP, got.receipt_handle, 30 * SECOND)
    [again] = grpc_receive(store)
    assert again.delivery_attempt == 2 and again.receipt_handle != got.receipt_handle


def test_renew_refuses_exactly_what_ack_refuses(store, clock):
    put(store, 5)
    acked, nacked, changed, expiring, good = grpc_receive(store, 5)
    store.ack(GROUP, acked.receipt_handle)
    store.nack(GROUP, nacked.receipt_handle)
    store.change_invisible(GROUP, changed.receipt_handle, 60 * SECOND)
    expired = store.change_invisible(GROUP, expiring.receipt_handle, SECOND)
    clock.advance(SECOND)
    forged = ReceiptHandle(GROUP, TOPIC, 0, 99, 1, "0" * 16).encode()
    bad = [acked.receipt_handle, nacked.receipt_handle, changed.receipt_handle, "", "not a handle", forged,
           ReceiptHandle(GROUP, "Elsewhere", 0, 0, 1, "ab").encode(), "x" * 5000, None]
    renewed = store.renew_many(GROUP, [*bad, expired], 30 * SECOND)
    refused = store.ack_many(GROUP, [*bad, expired])
    assert all(isinstance(e, ReceiptHandleError) for e in renewed)
    assert [str(e) for e in renewed] == [str(e) for e in refused]
    assert "expired" in str(renewed[-1]) and "already acknowledged" in str(renewed[0])
    assert "already nacked" in str(renewed[1]) and "stale" in str(renewed[2]) and "unknown" in str(renewed[5])
    with pytest.raises(ReceiptHandleError, match="another group"):
        store.renew("GID_other", good.receipt_handle, 30 * SECOND)
    store.ack(GROUP, good.receipt_handle)


def test_renew_many_renews_what_it_can_under_one_lock(store, clock):
    put(store, 300)
    got = grpc_receive(store, 300, invisible_ms=10 * SECOND)
    store.ack(GROUP, got[7].receipt_handle)
    clock.advance(9 * SECOND)
    outcomes = store.renew_many(GROUP, [r.receipt_handle for r in got], 60 * SECOND)
    assert [i for i, e in enumerate(outcomes) if e is not None] == [7]
    assert store.renew_many(GROUP, [], 60 * SECOND) == []
    clock.advance(60 * SECOND - 1)
    assert store.revive_due() == 0
    assert store.ack_many(GROUP, [r.receipt_handle for i, r in enumerate(got) if i != 7]) == [None] * 299


@pytest.mark.parametrize("invisible_ms", [0, 999, 12 * 3600 * SECOND + 1, "30000", 1.5e3, True])
def test_a_renew_out_of_bounds_is_refused_and_changes_nothing(store, clock, invisible_ms):
    put(store, 1)
    [got] = grpc_receive(store)
    with pytest.raises(PopRequestError, match="invisible_ms"):
        store.renew_many(GROUP, [got.receipt_handle], invisible_ms)
    with pytest.raises(PopRequestError):
        store.renew(GROUP, got.receipt_handle, invisible_ms)
    clock.advance(30 * SECOND)
    assert [r.delivery_attempt for r in grpc_receive(store)] == [2]


def test_a_renewal_survives_a_clean_restart(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 1)
        [got] = grpc_receive(store)
        clock.advance(20 * SECOND)
        store.renew(GROUP, got.receipt_handle, 60 * SECOND)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        clock.advance(59 * SECOND)
        assert store.revive_due() == 0
        store.ack(GROUP, got.receipt_handle)


# -- dead_letter ---------------------------------------------------------------------------------
def test_a_consumer_dead_letters_a_message_as_the_last_attempt_would(store, clock):
    [sent] = put(store, 1, tags="TagA", keys=["order-1"])
    original = store.read(sent.phys_offset)
    [got] = grpc_receive(store)
    clock.advance(2 * SECOND)
    result = store.dead_letter(GROUP, got.receipt_handle, "gave up after 16 local retries")
    assert (result.topic, result.queue_id, result.queue_offset) == (DLQ, 0, 0)
    dead = store.read(result.phys_offset)
    assert dead.unique_key == sent.unique_key and dead.body == b"m0" and dead.reconsume_times == 1
    assert dead.tags == "TagA" and dead.keys == ["order-1"]
    assert dead.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    assert dead.properties["RETRY_TOPIC"] == TOPIC and dead.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert dead.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.unique_key
    assert dead.properties[topics.DLQ_REASON] == "1 delivery attempt failed; last: gave up after 16 local retries"
    with pytest.raises(ReceiptHandleError, match="already dead-lettered"):
        store.ack(GROUP, got.receipt_handle)
    with pytest.raises(ReceiptHandleError, match="already dead-lettered"):
        store.dead_letter(GROUP, got.receipt_handle)
    clock.advance(24 * 3600 * SECOND)
    assert store.revive_due() == 0 and grpc_receive(store) == []
    assert store.offsets.get(TOPIC, GROUP, sent.queue_id) == 1
    events = store.timeline(sent.unique_key)
    assert [(e.kind.value, e.attempt, e.at_ms - START_MS) for e in events] == [
        ("stored", None, 0), ("delivered", 1, 0), ("failed", 1, 2000), ("dead_letter", 1, 2000)]
    assert events[2].reason == "gave up after 16 local retries" and events[2].due_ms is None
    assert events[3].topic == DLQ and events[3].reason == dead.properties[topics.DLQ_REASON]
    assert events[3].offset_msg_id == result.offset_msg_id


def test_a_dead_letter_without_a_reason_says_the_consumer_sent_it(store, clock):
    put(store, 1)
    [got] = grpc_receive(store)
    clock.advance(30 * SECOND)
    [again] = grpc_receive(store)
    dead = store.read(store.dead_letter(GROUP, again.receipt_handle).phys_offset)
    assert dead.reconsume_times == 2
    assert dead.properties[topics.DLQ_REASON] == ("2 delivery attempts failed; last: the consumer sent it to the "
                                             "dead-letter queue")


def test_a_dead_letter_with_a_bad_handle_or_reason_is_refused_and_writes_nothing(store, clock):
    put(store, 2)
    a, b = grpc_receive(store, 2)
    store.ack(GROUP, a.receipt_handle)
    for handle in (a.receipt_handle, "", None, "garbage!", ReceiptHandle(GROUP, TOPIC, 0, 0, 1, "0").encode()):
        with pytest.raises(ReceiptHandleError):
            store.dead_letter(GROUP, handle, "no")
    with pytest.raises(ReceiptHandleError, match="another group"):
        store.dead_letter("GID_other", b.receipt_handle)
    with pytest.raises(PopRequestError):
        store.dead_letter(GROUP, b.receipt_handle, reason=["not", "text"])
    clock.advance(30 * SECOND)
    with pytest.raises(ReceiptHandleError, match="expired"):
        store.dead_letter(GROUP, b.receipt_handle)
    assert store.queues.get(DLQ, 0) is None
    assert [r.delivery_attempt for r in grpc_receive(store)] == [2]


def test_a_long_reason_is_cut_and_kept_out_of_the_property_separators(store):
    put(store, 1)
    [got] = grpc_receive(store)
    result = store.dead_letter(GROUP, got.receipt_handle, "why\x01\x02" + "x" * 5000)
    reason = store.read(result.phys_offset).properties[topics.DLQ_REASON]
    assert "\x01" not in reason and "\x02" not in reason and len(reason) <= 1100


def test_a_message_retention_deleted_ends_for_the_group_with_nothing_written(tmp_path):
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        first = store.put(NewMessage(TOPIC, b"x" * 900, queue_id=0))
        [got] = grpc_receive(store, invisible_ms=3600 * SECOND)
        store.put_many([NewMessage(TOPIC, b"y" * 900, queue_id=1) for _ in range(100)])
        [(_, oldest), *_] = store.commitlog.segments()
        old = (clock.now_ms() - 100 * HOUR_MS) / 1000
        os.utime(oldest, (old, old))
        assert store.delete_expired().deleted == [oldest]
        assert store.dead_letter(GROUP, got.receipt_handle, "gone anyway") is None
        assert store.queues.get(DLQ, 0) is None
        with pytest.raises(ReceiptHandleError, match="already dead-lettered"):
            store.ack(GROUP, got.receipt_handle)
        assert store.offsets.get(TOPIC, GROUP, first.queue_id) == 1


def test_a_read_only_store_renews_and_dead_letters_nothing(tmp_path, clock):
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put(store, 1)
        [got] = grpc_receive(store)
    with MessageStore.open(tmp_path, small_config(), read_only=True, clock=clock) as store:
        for call in (lambda: store.renew(GROUP, got.receipt_handle, 30 * SECOND),
                     lambda: store.dead_letter(GROUP, got.receipt_handle)):
            with pytest.raises(ReadOnlyStoreError):
                call()


# -- the scheduler notices expiries --------------------------------------------------------------
def test_the_scheduler_processes_an_expiry_at_its_time_and_wakes_the_long_poll(tmp_path):
    config = small_config(schedule_interval_ms=5_000)  # idle, it would revive only every 5 s
    with MessageStore.open(tmp_path, config, clock=SystemClock()) as store:
        assert wait_until(lambda: store._scheduler_thread is not None, 1, "the scheduler thread", poll_s=0.005)
        put(store, 1)
        [got] = grpc_receive(store, invisible_ms=SECOND)
        sub = store.pop.state.get(GROUP, TOPIC)
        assert wait_until(lambda: not sub.entries[(got.message.queue_id, got.message.queue_offset)].handed_out,
                          4, "the expiry to be processed", poll_s=0.005)
        assert store.clock.now_ms() < got.invisible_until_ms + 2_000
        store.pop.wait_clock = lambda: 0.0  # a long poll's wait never runs out: only the message can end it
        [second] = grpc_receive(store, invisible_ms=SECOND, wait_ms=20_000)  # visible since the expiry
        assert second.delivery_attempt == 2
        result: list = []

        def poll():
            result.extend(grpc_receive(store, invisible_ms=SECOND, wait_ms=20_000))
            result.append(store.clock.now_ms())

        waiter = threading.Thread(target=poll)
        waiter.start()
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        third, returned_at = result
        assert third.delivery_attempt == 3 and second.invisible_until_ms <= returned_at
        assert returned_at < second.invisible_until_ms + 2_000
