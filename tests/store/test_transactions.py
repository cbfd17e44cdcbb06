"""Transactional messages: the half message, its commit or rollback, the broker's checks of open
ones (counted, then discarded), the open ones found again after a restart, and the records
compared with those a real RocketMQ 4.9.8 broker wrote (the golden broker store)."""

from __future__ import annotations

import shutil

import pytest

from store.broker.transactions import MAX_HALVES_PER_CHECK, TransactionCheck
from store.clock import FakeClock
from store.errors import (
    InvalidConfigError,
    InvalidMessageError,
    InvalidTransactionIdError,
    NotAHalfMessageError,
    ReadOnlyStoreError,
    StoreError,
    TransactionEndedError,
    TransactionNotFoundError,
)
from store.format import codec, ids, topics
from store.format.hosts import HostAddress
from store.log.config_file import read_config, write_config
from store.message_store import MessageStore, NewMessage
from tests.conftest import BROKER_GEOMETRY, BROKER_GOLDEN_DIR, GOLDEN_GEOMETRY
from tests.store import independent_reader as rd
from tests.store.helpers import small_config

HALF = topics.TRANS_HALF_TOPIC
OP = topics.TRANS_OP_HALF_TOPIC
DISCARDS = topics.TRANS_CHECK_MAX_TIME_TOPIC
TOPIC = "Payments"
GROUP = "pg-payments"
SECOND = 1000
TIMEOUT_MS = 6 * SECOND


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    with MessageStore.open(tmp_path / "store", small_config(trace=True), clock=clock) as s:
        yield s


def payment(case: str, **changes) -> NewMessage:
    values = {"topic": TOPIC, "body": f'{{"payment":"{case}"}}'.encode(), "tags": "TagPay",
              "keys": [case.replace(" ", "-")],
              "properties": {"paymentCase": case}}
    return NewMessage(**{**values, **changes})


def queue_of(store: MessageStore, topic: str, queue_id: int = 0) -> list:
    [(_, low, high)] = [q for q in store.topics().get(topic, [(queue_id, 0, 0)]) if q[0] == queue_id]
    return [store.get_by_queue_offset(topic, queue_id, offset) for offset in range(low, high)]


def real_copies(store: MessageStore, unique_key: str) -> list:
    return store.query_by_unique_key(TOPIC, unique_key).messages


def event_kinds(store: MessageStore, unique_key: str) -> list[str]:
    return [str(e.kind) for e in store.timeline(unique_key)]


# -- the half message and its end ----------------------------------------------------------------
def test_a_half_message_waits_in_the_half_topic_with_its_real_topic_and_queue(store):
    half = store.put_half(payment("commit", queue_id=2), GROUP)
    assert (half.topic, half.queue_id, half.queue_offset) == (HALF, 0, 0)
    stored = store.get_by_offset_id(half.offset_msg_id)
    assert stored.properties[topics.REAL_TOPIC] == TOPIC and stored.properties[topics.REAL_QID] == "2"
    assert stored.properties[topics.TRAN_MSG] == "true" and stored.properties[topics.PRODUCER_GROUP] == GROUP
    assert stored.unique_key == half.unique_key and stored.tags == "TagPay" and stored.keys == ["commit"]
    assert stored.sys_flag & codec.TRANSACTION_TYPE_MASK == 0  # the broker resets it: queued and indexed
    assert stored.body == b'{"payment":"commit"}'
    assert real_copies(store, half.unique_key) == []  # nothing reaches the topic before the commit
    assert store.query_by_key(HALF, "commit").messages[0].phys_offset == half.phys_offset
    assert store.metadata.topic(HALF).queues == 1


def test_a_commit_puts_the_message_to_its_topic_and_ends_the_half(store):
    store.put(NewMessage("Other", b"first"))  # the half is not at commit log offset 0
    half = store.put_half(payment("commit", queue_id=2), GROUP)
    committed = store.end_transaction(half.offset_msg_id, True)
    assert (committed.topic, committed.queue_id, committed.queue_offset) == (TOPIC, 2, 0)
    assert committed.unique_key == half.unique_key
    [copy] = real_copies(store, half.unique_key)  # a lookup by the client's message id finds it
    stored_half = store.read(half.phys_offset)
    assert copy.phys_offset == committed.phys_offset
    assert copy.transaction_type == codec.TRANSACTION_COMMIT
    assert copy.prepared_transaction_offset == half.phys_offset != 0
    assert copy.properties_text() == stored_half.properties_text()  # RocketMQ writes the half's string as it is
    assert (copy.body, copy.born_timestamp, copy.born_host) == (stored_half.body, stored_half.born_timestamp,
                                                                stored_half.born_host)
    assert store.get_by_queue_offset(TOPIC, 2, 0).phys_offset == copy.phys_offset  # consumers get it
    [op] = queue_of(store, OP)
    assert op.body == b"0" and op.tags == "d" and op.unique_key is None
    assert op.born_host == store.store_host and op.sys_flag == 0
    assert event_kinds(store, half.unique_key) == ["stored", "committed"]


def test_a_rollback_writes_only_the_op_record(store):
    half = store.put_half(payment("rollback"), GROUP)
    assert store.end_transaction(half.offset_msg_id, False) is None
    assert real_copies(store, half.unique_key) == [] and TOPIC not in store.topics()
    [op] = queue_of(store, OP)
    assert op.body == str(half.queue_offset).encode()
    assert event_kinds(store, half.unique_key) == ["stored", "rolled_back"]
    with pytest.raises(TransactionEndedError):
        store.end_transaction(half.offset_msg_id, True)
    assert real_copies(store, half.unique_key) == []


@pytest.mark.parametrize("first, second", [(True, True), (True, False), (False, False), (False, True)])
def test_a_transaction_ends_once(store, first, second):
    half = store.put_half(payment("twice"), GROUP)
    store.end_transaction(half.offset_msg_id, first)
    with pytest.raises(TransactionEndedError, match="already ended"):
        store.end_transaction(half.offset_msg_id, second)
    assert len(real_copies(store, half.unique_key)) == int(first)
    assert len(queue_of(store, OP)) == 1


def test_a_commit_keeps_the_delivery_time(store, clock):
    deliver_ms = clock.now_ms() + 60 * SECOND
    half = store.put_half(payment("later", properties={topics.TIMER_DELIVER_MS: str(deliver_ms)}), GROUP)
    clock.advance(10 * SECOND)
    waiting = store.end_transaction(half.offset_msg_id, True)
    assert waiting.topic == topics.TIMER_TOPIC
    timed = store.read(waiting.phys_offset)
    assert timed.properties[topics.REAL_TOPIC] == TOPIC and topics.TRAN_MSG not in timed.properties
    assert timed.transaction_type == codec.TRANSACTION_COMMIT
    assert store.deliver_due().delivered == [] and real_copies(store, half.unique_key) == []
    clock.set(deliver_ms)
    [released] = store.deliver_due().delivered
    assert (released.topic, released.unique_key) == (TOPIC, half.unique_key)
    assert event_kinds(store, half.unique_key) == ["stored", "committed", "released"]
    [committed] = [e for e in store.timeline(half.unique_key) if e.kind == "committed"]
    assert committed.due_ms == deliver_ms and committed.real_topic == TOPIC


def test_a_commit_after_the_delivery_time_goes_straight_to_the_topic(store, clock):
    deliver_ms = clock.now_ms() + 5 * SECOND
    half = store.put_half(payment("soon", properties={topics.TIMER_DELIVER_MS: str(deliver_ms)}), GROUP)
    clock.advance(10 * SECOND)
    assert store.end_transaction(half.offset_msg_id, True).topic == TOPIC


@pytest.mark.parametrize("message, words", [
    (payment("delayed", delay_level=3), "no delay level"),
    (payment("delayed", properties={topics.DELAY: "2"}), "no delay level"),
    (payment("bad time", properties={topics.TIMER_DELIVER_MS: "soon"}), "epoch milliseconds"),
    (payment("held", topic=topics.SCHEDULE_TOPIC), "does not take transactional messages"),
    (payment("held", topic=HALF), "does not take transactional messages"),
    (payment("bad topic", topic="a/b"), "invalid topic"),
])
def test_a_half_message_the_store_refuses(store, message, words):
    with pytest.raises(InvalidMessageError, match=words):
        store.put_half(message, GROUP)
    assert HALF not in store.topics()


@pytest.mark.parametrize("group", ["", "a b", "x" * 256, "pg\x01", 7])
def test_a_bad_producer_group_is_refused(store, group):
    with pytest.raises(InvalidMessageError, match="producer group"):
        store.put_half(payment("g"), group)


def test_a_half_message_without_a_producer_group(store):
    half = store.put_half(payment("anonymous"))
    assert topics.PRODUCER_GROUP not in store.read(half.phys_offset).properties
    assert store.end_transaction(half.offset_msg_id, True, producer_group="anyone").topic == TOPIC


def test_a_read_only_store_takes_no_transaction(tmp_path, clock):
    MessageStore.open(tmp_path / "s", small_config(), clock=clock).close()
    with MessageStore.open(tmp_path / "s", small_config(), read_only=True, clock=clock) as store:
        with pytest.raises(ReadOnlyStoreError):
            store.put_half(payment("ro"), GROUP)
        with pytest.raises(ReadOnlyStoreError):
            store.end_transaction(ids.create_offset_msg_id(store.store_host, 0), True)
        with pytest.raises(ReadOnlyStoreError):
            store.open_transactions_to_check(TIMEOUT_MS)


# -- ids the store refuses ------------------------------------------------------------------
def test_transaction_ids_the_store_refuses(store):
    plain = store.put(NewMessage(TOPIC, b"not in a transaction"))
    half = store.put_half(payment("real"), GROUP)
    other_host = ids.create_offset_msg_id(HostAddress.parse("10.0.0.9:10911"), half.phys_offset)
    for bad in ["", "xyz", "G" * 32, half.offset_msg_id[:-1], other_host, 42, None]:
        with pytest.raises(InvalidTransactionIdError):
            store.end_transaction(bad, True)
    with pytest.raises(NotAHalfMessageError, match=f"message of {TOPIC}"):
        store.end_transaction(plain.offset_msg_id, True)
    with pytest.raises(TransactionNotFoundError):
        store.end_transaction(ids.create_offset_msg_id(store.store_host, 10**9), True)
    with pytest.raises(TransactionNotFoundError):
        store.end_transaction(ids.create_offset_msg_id(store.store_host, half.phys_offset + 3), True)
    with pytest.raises(InvalidTransactionIdError, match="another producer group"):
        store.end_transaction(half.offset_msg_id, True, producer_group="pg-other")
    with pytest.raises(TypeError):
        store.end_transaction(half.offset_msg_id, "yes")
    assert isinstance(TransactionNotFoundError("x"), StoreError)
    assert store.end_transaction(half.offset_msg_id.lower(), True, producer_group=GROUP).topic == TOPIC


def test_a_half_message_forged_inside_a_body_is_no_half_message(store):
    """A producer's body holding the bytes of a half message record: an id pointing into the
    body must not commit what those bytes say."""
    store.put_half(payment("genuine"), GROUP)
    forged = codec.encode_fields(0, 0, 0, 0, 0, 0, store.store_host, 0, store.store_host, 0, 0, b"evil",
                                 HALF.encode(), f"{topics.REAL_TOPIC}\x01Victim\x02{topics.REAL_QID}\x010".encode())
    carrier = store.put(NewMessage(TOPIC, forged))
    record = store.read(carrier.phys_offset)
    inside = carrier.phys_offset + carrier.size - len(record.properties_text().encode()) - 2 - 1 - len(TOPIC) \
        - len(forged)
    assert store.commitlog.read(inside).topic == HALF  # the bytes do decode as a half message
    with pytest.raises(NotAHalfMessageError):
        store.end_transaction(ids.create_offset_msg_id(store.store_host, inside), True)
    assert "Victim" not in store.topics()


# -- a producer's resend ------------------------------------------------------------------------
def test_a_resent_half_message_is_stored_once(store, clock):
    first = store.put_half(payment("resent", unique_key="01AB"), GROUP)
    clock.advance(SECOND)
    again = store.put_half(payment("resent", unique_key="01AB"), GROUP)
    assert again == first and len(queue_of(store, HALF)) == 1
    assert event_kinds(store, "01AB") == ["stored", "duplicate"]
    store.end_transaction(first.offset_msg_id, True)
    assert len(real_copies(store, "01AB")) == 1
    assert store.put(payment("resent", unique_key="01AB")).phys_offset == real_copies(store, "01AB")[0].phys_offset


def test_a_resend_after_a_check_gets_the_half_as_put_back(store, clock):
    first = store.put_half(payment("checked", unique_key="02AB"), GROUP)
    clock.advance(TIMEOUT_MS)
    [check] = store.open_transactions_to_check(TIMEOUT_MS)
    again = store.put_half(payment("checked", unique_key="02AB"), GROUP)
    assert again.offset_msg_id == check.transaction_id != first.offset_msg_id


def test_without_dedupe_a_resend_is_a_second_transaction(tmp_path, clock):
    with MessageStore.open(tmp_path / "s", small_config(dedupe_window_ms=0), clock=clock) as store:
        first = store.put_half(payment("twice", unique_key="03AB"), GROUP)
        clock.advance(1)
        second = store.put_half(payment("twice", unique_key="03AB"), GROUP)
        assert first.phys_offset != second.phys_offset
        store.end_transaction(first.offset_msg_id, False)
        assert store.end_transaction(second.offset_msg_id, True).topic == TOPIC


# -- the broker's checks ------------------------------------------------------------------------
def test_a_check_counts_and_renames_the_transaction(store, clock):
    half = store.put_half(payment("unknown", queue_id=1), GROUP)
    clock.advance(TIMEOUT_MS - 1)
    assert store.open_transactions_to_check(TIMEOUT_MS) == []
    clock.advance(1)
    [check] = store.open_transactions_to_check(TIMEOUT_MS)
    assert isinstance(check, TransactionCheck)
    assert (check.producer_group, check.check_times, check.real_topic, check.unique_key) == (
        GROUP, 1, TOPIC, half.unique_key)
    put_back = store.get_by_offset_id(check.transaction_id)
    assert put_back.topic == HALF and put_back.queue_offset == 1
    assert put_back.properties[topics.TRANSACTION_CHECK_TIMES] == "1" and put_back.body == check.half.body
    assert put_back.born_timestamp == store.read(half.phys_offset).born_timestamp
    assert store.open_transactions_to_check(TIMEOUT_MS) == []  # checked just now
    clock.advance(TIMEOUT_MS)
    [second] = store.open_transactions_to_check(TIMEOUT_MS)
    assert second.check_times == 2
    committed = store.end_transaction(second.transaction_id, True, from_check=True)
    copy = store.read(committed.phys_offset)
    assert copy.prepared_transaction_offset == store.get_by_offset_id(second.transaction_id).phys_offset
    assert copy.properties[topics.TRANSACTION_CHECK_TIMES] == "2" and (copy.topic, copy.queue_id) == (TOPIC, 1)
    assert [op.body for op in queue_of(store, OP)] == [b"2"]  # the half as last put back
    assert event_kinds(store, half.unique_key) == ["stored", "checked", "checked", "committed"]
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS) == []


def test_an_id_a_check_replaced_still_ends_the_transaction_once(store, clock):
    half = store.put_half(payment("late answer"), GROUP)
    clock.advance(TIMEOUT_MS)
    [check] = store.open_transactions_to_check(TIMEOUT_MS)
    assert store.end_transaction(half.offset_msg_id, False) is None  # the producer's own answer, late
    assert [op.body for op in queue_of(store, OP)] == [str(store.get_by_offset_id(check.transaction_id)
                                                             .queue_offset).encode()]
    with pytest.raises(TransactionEndedError):
        store.end_transaction(check.transaction_id, True)
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS) == []


def test_checks_take_the_oldest_first_and_stop_at_the_first_not_due(store, clock):
    a = store.put_half(payment("a"), GROUP)
    clock.advance(3 * SECOND)
    b = store.put_half(payment("b"), GROUP)
    clock.advance(3 * SECOND)
    assert [c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)] == [a.unique_key]
    clock.advance(3 * SECOND)
    assert [c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)] == [b.unique_key]
    clock.advance(TIMEOUT_MS)
    assert [c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)] == [a.unique_key, b.unique_key]


def test_past_max_checks_the_half_is_discarded(store, clock):
    half = store.put_half(payment("silent"), GROUP)
    ids_seen = []
    for times in (1, 2, 3):
        clock.advance(TIMEOUT_MS)
        [check] = store.open_transactions_to_check(TIMEOUT_MS, max_checks=3)
        assert check.check_times == times
        ids_seen.append(check.transaction_id)
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS, max_checks=3) == []
    [moved] = queue_of(store, DISCARDS)
    assert moved.properties_text() == store.get_by_offset_id(ids_seen[-1]).properties_text()
    assert moved.properties[topics.TRANSACTION_CHECK_TIMES] == "3" and moved.unique_key == half.unique_key
    assert queue_of(store, OP) == [] and real_copies(store, half.unique_key) == []
    for transaction_id in (half.offset_msg_id, ids_seen[-1]):
        with pytest.raises(TransactionEndedError):
            store.end_transaction(transaction_id, True)
    assert event_kinds(store, half.unique_key) == ["stored", "checked", "checked", "checked", "discarded"]
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS, max_checks=3) == []


def test_a_half_born_before_the_reserved_time_is_discarded_at_its_check(tmp_path, clock):
    with MessageStore.open(tmp_path / "s", small_config(file_reserved_hours=1), clock=clock) as store:
        store.put_half(payment("ancient", born_timestamp=clock.now_ms() - 2 * 3600 * SECOND), GROUP)
        fresh = store.put_half(payment("fresh"), GROUP)
        clock.advance(TIMEOUT_MS)
        assert [c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)] == [fresh.unique_key]
        assert len(queue_of(store, DISCARDS)) == 1


def test_a_half_too_large_to_put_back_is_discarded(store, clock):
    probe = store.put_half(payment("p", unique_key="AA01"), GROUP)
    store.end_transaction(probe.offset_msg_id, False)
    room = store.commitlog.max_record_size() - probe.size
    big = store.put_half(payment("p", unique_key="AA02", body=b"x" * (len(b'{"payment":"p"}') + room - 10)), GROUP)
    assert big.size == store.commitlog.max_record_size() - 10  # TRANSACTION_CHECK_TIMES does not fit in
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS) == []
    [moved] = queue_of(store, DISCARDS)
    assert moved.unique_key == "AA02"
    [event] = [e for e in store.timeline("AA02") if e.kind == "discarded"]
    assert event.reason.startswith("not put back")


def test_a_check_pass_handles_a_bounded_number_of_halves(store, clock):
    for i in range(MAX_HALVES_PER_CHECK + 5):
        store.put_half(payment(f"p{i}", unique_key=f"{i:08X}"), GROUP)
    clock.advance(TIMEOUT_MS)
    assert len(store.open_transactions_to_check(TIMEOUT_MS)) == MAX_HALVES_PER_CHECK
    assert len(store.open_transactions_to_check(TIMEOUT_MS)) == 5


@pytest.mark.parametrize("timeout_ms, max_checks", [(-1, 15), (1.5, 15), (1000, 0), (1000, "15")])
def test_check_settings_the_store_refuses(store, timeout_ms, max_checks):
    with pytest.raises(InvalidConfigError):
        store.open_transactions_to_check(timeout_ms, max_checks)


# -- after a restart ----------------------------------------------------------------------------
def _open_transactions(store: MessageStore, clock: FakeClock) -> set[str]:
    clock.advance(10 * TIMEOUT_MS)
    return {c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)}


def _transactions_in_every_state(store: MessageStore, clock: FakeClock) -> set[str]:
    """Committed, rolled back, checked then committed, discarded, checked and open, open: the
    unique keys of the last two. A half put before is discarded with the one to discard."""
    halves = {case: store.put_half(payment(case), GROUP) for case in ("commit", "rollback", "checked", "discard")}
    store.end_transaction(halves["commit"].offset_msg_id, True)
    store.end_transaction(halves["rollback"].offset_msg_id, False)
    clock.advance(TIMEOUT_MS)
    checks = {c.unique_key: c for c in store.open_transactions_to_check(TIMEOUT_MS, max_checks=1)}
    store.end_transaction(checks[halves["checked"].unique_key].transaction_id, True, from_check=True)
    clock.advance(TIMEOUT_MS)
    assert store.open_transactions_to_check(TIMEOUT_MS, max_checks=1) == []  # "discard" checked once already
    checked_open = store.put_half(payment("checked-open"), GROUP)
    clock.advance(TIMEOUT_MS)
    assert [c.unique_key for c in store.open_transactions_to_check(TIMEOUT_MS)] == [checked_open.unique_key]
    return {checked_open.unique_key, store.put_half(payment("open"), GROUP).unique_key}


def test_a_reopened_store_finds_every_open_transaction(tmp_path, clock):
    with MessageStore.open(tmp_path / "s", small_config(), clock=clock) as store:
        still_open = _transactions_in_every_state(store, clock)
    progress = read_config(tmp_path / "s" / "config" / "consumerOffset.json")["offsetTable"]
    assert progress[f"{HALF}@{topics.TRANS_CHECK_GROUP}"] == {"0": 7}  # checked-open as put back, open
    assert progress[f"{OP}@{topics.TRANS_CHECK_GROUP}"] == {"0": 3}
    with MessageStore.open(tmp_path / "s", small_config(), clock=clock) as store:
        assert _open_transactions(store, clock) == still_open
        report = store.check()
        assert report.ok, report.problems


def test_after_a_crash_every_open_transaction_is_found(tmp_path, clock):
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    store = MessageStore.open(live, small_config(), clock=clock)
    store.put_half(payment("before the flush"), GROUP)
    store.flush()  # the check's progress saved with this half open: everything after it is replayed
    still_open = _transactions_in_every_state(store, clock)
    store.catch_up()  # the dispatcher idle: the copy is of one moment, as a crash leaves the files
    shutil.copytree(live, crashed)  # the store as a crash would leave it: open, abort marker present
    store.close()
    with MessageStore.open(crashed, small_config(), clock=clock) as reopened:
        assert reopened.abnormal_shutdown
        assert _open_transactions(reopened, clock) == still_open
        assert len(queue_of(reopened, DISCARDS)) == 2  # none discarded twice


def test_a_crash_before_any_flush_finds_every_open_transaction(tmp_path, clock):
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    store = MessageStore.open(live, small_config(), clock=clock)
    still_open = _transactions_in_every_state(store, clock)
    store.catch_up()
    shutil.copytree(live, crashed)
    store.close()
    with MessageStore.open(crashed, small_config(), clock=clock) as reopened:
        assert _open_transactions(reopened, clock) == still_open


# -- as RocketMQ 4.9.8 writes it ------------------------------------------------------------------
def _golden_records() -> list[dict]:
    return rd.read_commitlog(BROKER_GOLDEN_DIR / "store", BROKER_GEOMETRY.commitlog_file_size)["records"]


def _transaction_records(records: list[dict]) -> dict[tuple[str, int, int], dict]:
    return {(r["topic"], r["queue_id"], r["queue_offset"]): r for r in records
            if r["topic"] in (HALF, OP, TOPIC)}


def _sent(golden_half: dict) -> NewMessage:
    props = dict(golden_half["properties"])
    return NewMessage(TOPIC, golden_half["body"], tags=props["TAGS"], keys=[props["KEYS"]],
                      properties={"paymentCase": props["paymentCase"]}, queue_id=int(props[topics.REAL_QID]),
                      born_timestamp=golden_half["born_timestamp"], born_host=golden_half["born_host"],
                      unique_key=props[topics.UNIQ_KEY])


COMPARED = ("topic", "queue_id", "queue_offset", "flag", "sys_flag", "born_host", "store_host", "reconsume_times",
            "body", "properties_string", "tags_code")


def test_the_records_of_the_golden_brokers_transactions(tmp_path, clock):
    """Replay what the real broker did (pay-commit committed, pay-rollback rolled back,
    pay-unknown checked once then committed from the check): every record of the half, op and
    Payments queues is the one RocketMQ wrote, as a reader written from the format spec reads
    it, and the check's progress is the one the broker saved."""
    if not (BROKER_GOLDEN_DIR / "store").is_dir():
        pytest.skip("golden broker store not found")
    golden = _transaction_records(_golden_records())
    halves = [golden[(HALF, 0, offset)] for offset in range(3)]
    root = tmp_path / "replay"
    with MessageStore.open(root, small_config(), clock=clock) as store:
        commit = store.put_half(_sent(halves[0]), GROUP)
        rollback = store.put_half(_sent(halves[1]), GROUP)
        store.end_transaction(commit.offset_msg_id, True)
        unknown = store.put_half(_sent(halves[2]), GROUP)
        store.end_transaction(rollback.offset_msg_id, False)
        clock.advance(TIMEOUT_MS)
        [check] = store.open_transactions_to_check(TIMEOUT_MS)
        assert check.unique_key == unknown.unique_key
        store.end_transaction(check.transaction_id, True, from_check=True)
    ours = _transaction_records(rd.read_commitlog(root, GOLDEN_GEOMETRY.commitlog_file_size)["records"])
    assert sorted(ours) == sorted(golden)
    for place, want in golden.items():
        have = ours[place]
        assert {f: have[f] for f in COMPARED} == {f: want[f] for f in COMPARED}, place
        if place[0] != OP:
            assert have["born_timestamp"] == want["born_timestamp"]
        rd.check_hashmap_order(have["properties_string"])
    our_records = {r["phys_offset"]: r for r in ours.values()}
    golden_records = {r["phys_offset"]: r for r in golden.values()}
    for place in [(TOPIC, 2, 0), (TOPIC, 0, 0)]:  # a commit names its half by commit log offset
        half = our_records[ours[place]["prepared_transaction_offset"]]
        golden_half = golden_records[golden[place]["prepared_transaction_offset"]]
        assert (half["topic"], half["queue_offset"]) == (golden_half["topic"], golden_half["queue_offset"])
    rd.read_store(root, GOLDEN_GEOMETRY.commitlog_file_size, GOLDEN_GEOMETRY.cq_file_size,
                  GOLDEN_GEOMETRY.index_slots, GOLDEN_GEOMETRY.index_entries)
    saved = read_config(root / "config" / "consumerOffset.json")["offsetTable"]
    broker = read_config(BROKER_GOLDEN_DIR / "store" / "config" / "consumerOffset.json")["offsetTable"]
    for topic in (HALF, OP):
        key = f"{topic}@{topics.TRANS_CHECK_GROUP}"
        assert {int(q): o for q, o in saved[key].items()} == {int(q): o for q, o in broker[key].items()}


@pytest.mark.parametrize("forget_progress", [False, True])
def test_the_golden_brokers_transactions_are_all_ended(golden_broker_dir, clock, forget_progress):
    """Opened for writing, the real broker's store has no open transaction: from the check's
    progress it saved, or from the first half message (pay-unknown's first half is ended
    through the copy its check put back)."""
    if forget_progress:
        path = golden_broker_dir / "config" / "consumerOffset.json"
        table = read_config(path)
        for topic in (HALF, OP):
            table["offsetTable"].pop(f"{topic}@{topics.TRANS_CHECK_GROUP}")
        write_config(path, table)
    config = small_config(geometry=BROKER_GEOMETRY, delay_levels=None)
    with MessageStore.open(golden_broker_dir, config, clock=clock) as store:
        clock.set(2**62)
        assert store.open_transactions_to_check(TIMEOUT_MS) == []
        with pytest.raises(TransactionEndedError):
            store.end_transaction("7F00000100002A9F00000000000114F7", True)  # pay-unknown's first half
