"""Pop receive for orderly groups (RocketMQ 5 FIFO groups), with a fake clock: each queue in
queue order, one batch at a time, failed messages first; queues independent of each other."""

from __future__ import annotations

import random
import threading

import pytest

from store.broker.receipt import ReceiptHandleError
from store.clock import FakeClock
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config
from tests.store.test_pop import GROUP, SECOND, START_MS, TOPIC, backoff

QUEUES = 4


@pytest.fixture
def clock():
    return FakeClock(START_MS)


@pytest.fixture
def store(tmp_path, clock):
    s = MessageStore.open(tmp_path / "store", small_config(), clock=clock)
    s.metadata.update_group(GROUP, consume_mode="orderly")
    yield s
    s.close()


def put_groups(store, per_group: int, message_groups: list[str]) -> dict[str, list[str]]:
    """Messages of each message group, interleaved, the group's queue picked from its name as
    a FIFO producer does. Returns the bodies of each queue in the order they were sent."""
    sent: dict[str, list[str]] = {}
    for i in range(per_group):
        for name in message_groups:
            queue_id = sum(name.encode()) % QUEUES
            body = f"{name}-{i}"
            store.put(NewMessage(topic=TOPIC, body=body.encode(), keys=[name], queue_id=queue_id))
            sent.setdefault(queue_id, []).append(body)
    return sent


def put_queue(store, queue_id: int, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        store.put(NewMessage(topic=TOPIC, body=b"q%d-%d" % (queue_id, i), queue_id=queue_id))


def where(received) -> list[tuple[int, int]]:
    return [(r.message.queue_id, r.message.queue_offset) for r in received]


def receive(store, max_messages: int = 32, invisible_ms: int = 30 * SECOND, **kwargs) -> list:
    return store.receive(GROUP, TOPIC, max_messages, invisible_ms, **kwargs)


def ack_all(store, received) -> None:
    assert store.ack_many(GROUP, [r.receipt_handle for r in received]) == [None] * len(received)


def test_a_receive_takes_consecutive_messages_of_one_queue_and_the_next_takes_another(store):
    for queue_id in range(3):
        put_queue(store, queue_id, 5)
    first = receive(store, 3)
    assert where(first) == [(0, 0), (0, 1), (0, 2)]
    second = receive(store, 10)
    assert where(second) == [(1, o) for o in range(5)]
    third = receive(store, 10)
    assert where(third) == [(2, o) for o in range(5)]
    assert receive(store, 10) == []  # every queue has a batch out
    ack_all(store, first)
    assert where(receive(store, 10)) == [(0, 3), (0, 4)]


def test_nothing_newer_of_a_queue_is_handed_out_while_any_of_it_is_out(store, clock):
    put_queue(store, 0, 4)
    a, b = receive(store, 2)
    store.ack(GROUP, a.receipt_handle)
    assert receive(store) == []  # b is still out
    clock.advance(20 * SECOND)
    assert receive(store) == []
    store.ack(GROUP, b.receipt_handle)
    assert where(receive(store)) == [(0, 2), (0, 3)]
    assert store.offsets.get(TOPIC, GROUP, 0) == 2


def test_acks_in_any_order_free_the_queue_once_all_are_done(store):
    put_queue(store, 0, 6)
    batch = receive(store, 4)
    for r in reversed(batch[1:]):
        store.ack(GROUP, r.receipt_handle)
        assert receive(store) == []
        assert store.offsets.get(TOPIC, GROUP, 0) == 0
    store.ack(GROUP, batch[0].receipt_handle)
    assert store.offsets.get(TOPIC, GROUP, 0) == 4
    assert where(receive(store)) == [(0, 4), (0, 5)]


def test_a_failed_message_comes_back_before_anything_after_it(store, clock):
    put_queue(store, 0, 5)
    batch = receive(store, 3)
    store.ack(GROUP, batch[1].receipt_handle)
    store.nack(GROUP, batch[0].receipt_handle, "out of order downstream")
    store.ack(GROUP, batch[2].receipt_handle)
    clock.advance(backoff(1) - 1)
    assert receive(store) == []  # the queue waits for its failed message
    clock.advance(1)
    again = receive(store, 10)
    assert where(again) == [(0, 0), (0, 3), (0, 4)]  # the failed one first, then the next new ones
    assert [r.delivery_attempt for r in again] == [2, 1, 1]


def test_failed_messages_come_back_oldest_first_and_one_not_visible_yet_holds_the_rest(store, clock):
    put_queue(store, 0, 4)
    batch = receive(store, 4)
    store.nack(GROUP, batch[2].receipt_handle)  # visible at +10 s
    clock.advance(5 * SECOND)
    store.nack(GROUP, batch[1].receipt_handle)  # visible at +15 s
    store.ack(GROUP, batch[0].receipt_handle)
    store.ack(GROUP, batch[3].receipt_handle)
    clock.advance(5 * SECOND)  # +10 s: offset 2 is visible, offset 1 before it is not
    assert receive(store) == []
    clock.advance(5 * SECOND)
    assert where(receive(store, 10)) == [(0, 1), (0, 2)]


def test_a_batch_that_runs_out_comes_back_whole_and_in_order(store, clock):
    put_queue(store, 0, 3)
    put_queue(store, 1, 2)
    first = receive(store, 10, backoff_after_timeout=False)
    other = receive(store, 10)
    assert where(first) == [(0, 0), (0, 1), (0, 2)] and where(other) == [(1, 0), (1, 1)]
    store.ack(GROUP, first[1].receipt_handle)
    clock.advance(30 * SECOND)  # both batches expire; queue 1's waits the backoff
    again = receive(store, 10)
    assert where(again) == [(0, 0), (0, 2)] and [r.delivery_attempt for r in again] == [2, 2]
    assert receive(store, 10) == []
    clock.advance(backoff(1))
    assert where(receive(store, 10)) == [(1, 0), (1, 1)]


def test_a_dead_lettered_message_frees_its_queue(store, clock):
    store.metadata.update_group(GROUP, consume_mode="orderly", max_reconsume_times=1)
    put_queue(store, 0, 3)
    [first] = receive(store, 1, backoff_after_timeout=False)
    clock.advance(30 * SECOND)
    [second] = receive(store, 1, backoff_after_timeout=False)
    assert where([second]) == [(0, 0)] and second.delivery_attempt == 2
    clock.advance(30 * SECOND)  # the last attempt: dead-lettered, and the queue goes on
    assert where(receive(store, 1)) == [(0, 1)]
    assert store.get_by_queue_offset(f"%DLQ%{GROUP}", 0, 0).body == first.message.body
    assert receive(store, 1) == []


def test_the_consumer_giving_a_message_up_frees_its_queue(store):
    put_queue(store, 0, 3)
    batch = receive(store, 2)
    store.ack(GROUP, batch[1].receipt_handle)
    assert receive(store) == []
    store.dead_letter(GROUP, batch[0].receipt_handle, "failed 17 times at the consumer")
    assert where(receive(store)) == [(0, 2)]


def test_tag_filters_pass_over_in_an_orderly_queue(store):
    for i, tag in enumerate(["a", "b", "a", "a", "b"]):
        store.put(NewMessage(topic=TOPIC, body=b"%d" % i, tags=tag, queue_id=0))
    batch = receive(store, 10, tags="a")
    assert [r.message.body for r in batch] == [b"0", b"2", b"3"]
    ack_all(store, batch)
    assert receive(store, 10, tags="a") == [] and store.offsets.get(TOPIC, GROUP, 0) == 5


def test_a_restart_keeps_the_queue_held_and_its_batch_in_order(tmp_path, clock):
    config = small_config()
    with MessageStore.open(tmp_path, config, clock=clock) as store:
        store.metadata.update_group(GROUP, consume_mode="orderly")
        put_queue(store, 0, 4)
        batch = receive(store, 3, backoff_after_timeout=False)
        store.ack(GROUP, batch[1].receipt_handle)
    with MessageStore.open(tmp_path, config, clock=clock) as store:
        assert receive(store) == []
        store.ack(GROUP, batch[0].receipt_handle)  # the handles of the batch still work
        clock.advance(30 * SECOND)  # offset 2 runs out: it comes back before offset 3
        again = receive(store)
        assert where(again) == [(0, 2), (0, 3)] and [r.delivery_attempt for r in again] == [2, 1]
    with MessageStore.open(tmp_path, config, clock=clock) as store:
        assert receive(store) == []
        ack_all(store, again)
        assert receive(store) == [] and store.offsets.get(TOPIC, GROUP, 0) == 4


def test_concurrent_groups_are_not_held(store):
    put_queue(store, 0, 4)
    store.metadata.update_group("GID_concurrent", consume_mode="concurrent")
    first = store.receive("GID_concurrent", TOPIC, 2, 30 * SECOND)
    assert where(first) == [(0, 0), (0, 1)]
    assert where(store.receive("GID_concurrent", TOPIC, 2, 30 * SECOND)) == [(0, 2), (0, 3)]


def test_message_groups_progress_in_parallel_and_each_in_order(store):
    names = [f"order-{i}" for i in range(8)]
    sent = put_groups(store, 25, names)
    total = sum(len(bodies) for bodies in sent.values())
    consumed: dict[int, list[str]] = {q: [] for q in sent}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def consume(seed: int):
        rng = random.Random(seed)
        try:
            while not errors and sum(len(bodies) for bodies in consumed.values()) < total:
                batch = receive(store, rng.choice([1, 3, 32]))
                if not batch:
                    continue
                [queue_id] = {r.message.queue_id for r in batch}
                with lock:  # the next batch of the queue can only come after the ack below
                    consumed[queue_id] += [r.message.body.decode() for r in batch]
                ack_all(store, batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert consumed == sent


class OrderlyModel:
    """What an orderly group must see of each queue: its messages in order, each until acked
    or dead-lettered, a batch at a time."""

    def __init__(self, max_attempts: int):
        self.max_attempts = max_attempts
        self.offsets: dict[int, list[int]] = {}  # queue -> offsets not yet done, in order
        self.out: dict[tuple[int, int], str] = {}  # (queue, offset) -> current handle
        self.attempts: dict[tuple[int, int], int] = {}

    def check_batch(self, batch) -> None:
        keys = where(batch)
        assert len({q for q, _ in keys}) <= 1
        if not keys:
            return
        queue_id = keys[0][0]
        assert not any(q == queue_id for q, _ in self.out), "a batch while another of the queue is out"
        assert keys == self.offsets[queue_id][:len(keys)], "not the oldest messages of the queue, in order"
        for r, key in zip(batch, keys, strict=True):
            self.attempts[key] = self.attempts.get(key, 0) + 1
            assert r.delivery_attempt == self.attempts[key]
            self.out[key] = r.receipt_handle


@pytest.mark.parametrize("seed", range(6))
def test_randomized_orderly_consumption_keeps_every_queue_in_order(tmp_path, seed):
    rng = random.Random(seed)
    clock = FakeClock(START_MS)
    config = small_config()
    store = MessageStore.open(tmp_path, config, clock=clock)
    store.metadata.update_group(GROUP, consume_mode="orderly", max_reconsume_times=3)
    model = OrderlyModel(max_attempts=4)
    for queue_id in range(QUEUES):
        put_queue(store, queue_id, 6)
        model.offsets[queue_id] = [(queue_id, o) for o in range(6)]
    done: set[tuple[int, int]] = set()

    def settle() -> None:
        """Forget what the store ended on its own: expired batches and dead letters."""
        sub = store.pop.state.get(GROUP, TOPIC)
        if sub is None:
            return
        now = clock.now_ms()
        for key in list(model.out):
            entry = sub.entries.get(key)
            if entry is None or entry.receipt_handle != model.out[key] or entry.due_ms <= now:
                del model.out[key]
        dying = {key for key, entry in sub.entries.items()  # the last attempt ran out: dead-lettered when noticed
                 if entry.handed_out and entry.due_ms <= now and entry.attempt >= model.max_attempts}
        for queue_id, keys in model.offsets.items():
            cursor = sub.cursors.get(queue_id, 0)
            model.offsets[queue_id] = [k for k in keys if k not in done | dying
                                       and (k in sub.entries or k[1] >= cursor)]

    for _ in range(250):
        op = rng.choices(["receive", "ack", "nack", "renew", "advance", "restart", "put"],
                         weights=[30, 25, 8, 5, 15, 3, 4])[0]
        if op == "receive":
            settle()
            model.check_batch(receive(store, rng.choice([1, 2, 5, 32]), rng.choice([SECOND, 20 * SECOND]),
                                      backoff_after_timeout=rng.random() < 0.5))
        elif op in ("ack", "nack", "renew") and model.out:
            key = rng.choice(sorted(model.out))
            handle = model.out[key]
            try:
                if op == "ack":
                    store.ack(GROUP, handle)
                elif op == "nack":
                    store.nack(GROUP, handle)
                else:
                    store.renew(GROUP, handle, 20 * SECOND)
            except ReceiptHandleError:
                settle()
                assert key not in model.out  # refused only when the store had ended that delivery
                continue
            if op != "renew":
                del model.out[key]
            if op == "ack":
                done.add(key)
        elif op == "advance":
            clock.advance(rng.choice([500, SECOND, 10 * SECOND, 40 * SECOND]))
        elif op == "restart":
            store.close()
            store = MessageStore.open(tmp_path, config, clock=clock)
        elif op == "put":
            queue_id = rng.randrange(QUEUES)
            start = store.queues.get(TOPIC, queue_id).max_offset
            put_queue(store, queue_id, 2, start)
            model.offsets[queue_id] += [(queue_id, start), (queue_id, start + 1)]
    for _ in range(40):  # drain: every queue ends acked or dead-lettered, in order
        clock.advance(3 * 3600 * SECOND)
        settle()
        batch = receive(store, 32)
        model.check_batch(batch)
        ack_all(store, batch)
        done |= set(where(batch))
        model.out.clear()
    settle()
    assert all(keys == [] for keys in model.offsets.values())
    store.close()
