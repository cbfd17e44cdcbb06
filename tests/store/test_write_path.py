"""The single-send path, the dispatcher thread and the producer dedupe filter."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.broker.dedupe import RecentKeyFilter
from store.clock import FakeClock
from store.format.javahash import index_key_hash as reference_index_key_hash
from store.format.recordio import filter_add, filter_has, index_key_hash
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.store.helpers import sample_message, small_config


def _with_key(i: int, body_size: int = 100) -> NewMessage:
    m = sample_message(i, body_size=body_size)
    m.unique_key = f"7F0000011F2E00000000{i:012X}"
    return m


def _commitlog_bytes(root) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))


def test_single_puts_write_the_bytes_put_many_writes(tmp_path):
    """Across segment ends too: the single path falls back to the batch path for a BLANK."""
    messages = [_with_key(i, body_size=1500 + 37 * i) for i in range(60)]
    with MessageStore.open(tmp_path / "one", small_config(), clock=FakeClock()) as store:
        singles = [store.put(m) for m in messages]
        assert store.commitlog.segment_count >= 3
    with MessageStore.open(tmp_path / "many", small_config(), clock=FakeClock()) as store:
        batched = store.put_many(messages)
    assert singles == batched
    assert _commitlog_bytes(tmp_path / "one") == _commitlog_bytes(tmp_path / "many")


def test_the_dispatcher_thread_projects_without_a_reader(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(flush="async"), clock=FakeClock()) as store:
        results = [store.put(_with_key(i)) for i in range(200)]
        deadline = time.monotonic() + 10
        while store.dispatch_lag_bytes() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert store.dispatch_lag_bytes() == 0
        assert store.dispatch_error is None
        last = results[-1]
        assert store.get_by_queue_offset("TopicA", last.queue_id, last.queue_offset).phys_offset == last.phys_offset


def test_a_reader_sees_a_put_at_once(tmp_path):
    """Read-your-writes: the reader projects what the dispatcher has not reached."""
    with MessageStore.open(tmp_path / "s", small_config(flush="async"), clock=FakeClock()) as store:
        for i in range(50):
            r = store.put(_with_key(i))
            [found] = store.query_by_unique_key("TopicA", r.unique_key).messages
            assert found.phys_offset == r.phys_offset
            assert store.get_by_queue_offset("TopicA", r.queue_id, r.queue_offset).phys_offset == r.phys_offset


def test_a_repeat_is_found_through_the_filter_and_the_index(tmp_path):
    clock = FakeClock()
    with MessageStore.open(tmp_path / "s", small_config(trace=True), clock=clock) as store:
        first = store.put(_with_key(1))
        again = store.put(_with_key(1))
        [batched] = store.put_many([_with_key(1)])
        other = store.put(_with_key(2))
    assert again == batched == first
    assert other.phys_offset > first.phys_offset


def test_the_dedupe_screen_clears_new_keys_and_leaves_the_rest_to_the_full_check():
    f = RecentKeyFilter(window_ms=60_000)
    f.add(index_key_hash("TopicA", "seen"), 1000)

    def message(key, **kwargs):
        return NewMessage(topic="TopicA", body=b"x", unique_key=key, **kwargs)

    batch = [
        message("new-1"),  # 0: certainly new
        message(None),  # 1: no key, nothing to check
        message("seen"),  # 2: the filter may hold it
        message("twice"),  # 3 and 5: a repeat within the batch, both checked
        message("delayed", delay_level=3),  # 4: another topic decides
        message("twice"),
        message("", properties={"UNIQ_KEY": "new-2"}),  # 6: a key from the properties
        message("new-2"),  # 7: the same key as 6
        message("new-3", properties={"a": "b"}),  # 8: properties, checked in full
        message(None, delay_level=2),  # 9: no key
    ]
    hashes, attention = f.screen(batch)
    assert attention == [2, 3, 4, 5, 6, 7, 8]
    assert hashes.tolist() == [index_key_hash("TopicA", "new-1")]
    batch.append(message(5))  # a key this screen does not read: everything takes the full check
    hashes, attention = f.screen(batch)
    assert attention == list(range(len(batch))) and not len(hashes)


def test_put_many_keeps_one_copy_of_each_key_in_and_before_the_batch(tmp_path):
    def message(i, key=None, **kwargs):
        m = sample_message(i)
        m.unique_key = key
        for name, value in kwargs.items():
            setattr(m, name, value)
        return m

    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        [earlier] = store.put_many([message(0, "k0")])
        batch = [message(1, "k1"), message(2), message(3, "k1"), message(4, "", properties={"UNIQ_KEY": "k2"}),
                 message(5, "k2"), message(6, "k0"), message(7, "k3", delay_level=2), message(8, "k3")]
        results = store.put_many(batch)
        end = store.commitlog.end
        again = store.put_many([message(9, "k1"), message(10, "k2"), message(11, "k3", delay_level=1)])
        assert again == [results[0], results[3], results[6]] and store.commitlog.end == end
        [elsewhere] = store.put_many([message(12, "k3")])  # a repeat is looked for where it would go
        assert elsewhere.topic == "TopicA" and store.commitlog.end == end + elsewhere.size
    assert results[2] == results[0] and results[4] == results[3] and results[5] == earlier
    assert results[7] == results[6] and results[6].topic == "SCHEDULE_TOPIC_XXXX"
    assert len({r.phys_offset for r in results} - {earlier.phys_offset}) == 4  # k1, no key, k2, k3


def test_index_key_hash_matches_the_reference_on_awkward_text():
    for topic, key in [("TopicA", "k"), ("T", "é中"), ("x", "😀a"), ("a" * 300, "b\ud800"), ("", ""),
                       ("polygenelubricants", "")]:
        assert index_key_hash(topic, key) == reference_index_key_hash(f"{topic}#{key}")
    with pytest.raises(TypeError):
        index_key_hash("topic", b"bytes")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_index_key_hash_is_the_reference(topic, key):
    assert index_key_hash(topic, key) == reference_index_key_hash(f"{topic}#{key}")


def test_the_filter_never_forgets_a_key_and_rarely_raises_a_false_alarm():
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**31, size=300_000, dtype=np.int64)
    added, unseen = hashes[:100_000], hashes[100_000:]
    f = RecentKeyFilter(window_ms=60_000, generation_keys=40_000)
    for chunk in np.array_split(added, 10):
        f.add_many(chunk, 1000)
    f.add(123, 1000)
    assert f.generations == 3
    assert all(f.might_hold(int(h)) for h in added[::97]) and f.might_hold(123)
    alarms = sum(f.might_hold(int(h)) for h in unseen[:20_000]) / 20_000
    assert alarms < 0.02


def test_filter_generations_leave_only_after_the_window():
    f = RecentKeyFilter(window_ms=1000, generation_keys=10, max_generations=3)
    for t in range(0, 1000, 100):
        f.add(t, t)
    assert f.might_hold(0)
    f.add(5000, 1850)  # the first generation's newest key (900) is still inside the window
    assert f.might_hold(0) and f.generations == 2
    f.add(5001, 2500)  # now it is not
    assert f.generations == 1 and not f.might_hold(0) and f.might_hold(5000)


def test_filter_beyond_its_generations_keeps_every_key():
    f = RecentKeyFilter(window_ms=10_000, generation_keys=5, max_generations=2)
    for h in range(50):
        f.add(h, 1)
    assert f.generations == 2
    assert all(f.might_hold(h) for h in range(50))


def test_filter_functions_refuse_bad_bitmaps():
    with pytest.raises(ValueError):
        filter_add(bytearray(3), 1)
    with pytest.raises(ValueError):
        filter_has([bytearray(12)], 1)
    with pytest.raises(TypeError):
        filter_has(bytearray(8), 1)


def test_sync_puts_in_flight_share_one_sync(tmp_path):
    """Group commit: puts that append while a sync runs are all covered by the next one."""
    with MessageStore.open(tmp_path / "s", small_config(flush="sync"), clock=FakeClock()) as store:
        store.put(_with_key(0))
        syncs = store.commit_syncs
        acknowledged: list = []
        with store._flush_lock:  # a sync in progress: the committer cannot start the next one
            producers = [threading.Thread(target=lambda i=i: acknowledged.append(store.put(_with_key(i))))
                         for i in range(1, 21)]
            for p in producers:
                p.start()
            deadline = time.monotonic() + 10
            while store.stats.snapshot().put < 21 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert store.stats.snapshot().put == 21
            assert acknowledged == []  # appended, but not acknowledged before they are on disk
        for p in producers:
            p.join(10)
        assert len(acknowledged) == 20
        assert store.commit_syncs == syncs + 1


def test_a_failed_group_commit_is_raised_to_its_waiters(tmp_path, monkeypatch):
    from store.log.mapped_file import MappedFile

    with MessageStore.open(tmp_path / "s", small_config(flush="sync"), clock=FakeClock()) as store:
        store.put(_with_key(0))

        def no_space(self):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(MappedFile, "sync", no_space)
        with pytest.raises(OSError):
            store.put(_with_key(1))
        monkeypatch.undo()
        store.put(_with_key(2))  # the next sync covers the segment the failed one left dirty
        assert store.commit_syncs >= 2


def _holding(lock: threading.RLock):
    """A thread that holds `lock` (as the dispatcher does during a pass) until the returned event is set."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return release, thread


def test_appends_go_on_while_the_dispatcher_projects(tmp_path, monkeypatch):
    """The dispatcher thread holds only the projections' lock: single puts and batches are not
    held up by a pass, nor by a backlog past the limit while the dispatcher works on it."""
    monkeypatch.setattr("store.message_store.MAX_DISPATCH_LAG_BYTES", 1000)
    with MessageStore.open(tmp_path / "s", small_config(flush="async"), clock=FakeClock()) as store:
        release, holder = _holding(store._dispatch_lock)
        results: list = []
        writer = threading.Thread(target=lambda: results.extend(
            [store.put(_with_key(i)) for i in range(40)] + store.put_many([_with_key(i) for i in range(40, 80)])))
        writer.start()
        writer.join(10)
        try:
            assert not writer.is_alive(), "an append waited for the dispatcher's pass"
            assert store.commitlog.end - store.dispatcher.dispatched_to > 1000
        finally:
            release.set()
            holder.join(10)
        for r in results:
            [found] = store.query_by_unique_key("TopicA", r.unique_key).messages
            assert found.phys_offset == r.phys_offset
            assert store.get_by_queue_offset("TopicA", r.queue_id, r.queue_offset).phys_offset == r.phys_offset
        assert store.dispatch_lag_bytes() == 0


def test_a_long_poll_leaves_the_projections_to_the_dispatcher(tmp_path):
    """A receive waiting for messages holds neither lock: if it kept the projections' lock, the
    flush thread (store lock, then projections' lock) and the waiting receive would deadlock."""
    outcome: list = []

    def scenario() -> None:
        try:
            with MessageStore.open(tmp_path / "s", small_config(flush="async"), clock=FakeClock()) as store:
                store.put(_with_key(0))
                store.receive("g", "TopicA", 1, 60_000)
                got: list = []
                poll = threading.Thread(
                    target=lambda: got.extend(store.receive("g", "TopicA", 1, 60_000, wait_ms=20_000)), daemon=True)
                poll.start()
                deadline = time.monotonic() + 10
                while store._long_polls == 0 and time.monotonic() < deadline:
                    time.sleep(0.001)
                assert store._dispatch_lock.acquire(timeout=5), "the waiting receive kept the projections' lock"
                store._dispatch_lock.release()
                later = store.put(_with_key(1))
                poll.join(10)
                assert [r.message.phys_offset for r in got] == [later.phys_offset]
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=scenario, daemon=True)
    runner.start()
    runner.join(60)
    assert outcome, "the store deadlocked around a waiting receive"
    if outcome[0] is not None:
        raise outcome[0]


def test_a_dispatcher_kept_from_the_interpreter_still_keeps_up(tmp_path):
    """A producer that never blocks would hold the interpreter for whole switch intervals while the
    dispatcher, which lets go of it inside its pass, waits at every turn: the backlog grew to the
    whole log. A put that finds the backlog past the limit with the dispatcher at work yields."""
    limit = 4 << 20
    lags = []
    with MessageStore.open(tmp_path / "s", StoreConfig(flush="async", trace=False)) as store:
        for i in range(30_000):
            store.put(NewMessage(topic="LagT", body=b"x" * 1024, keys=[f"k{i}"], unique_key=f"U{i:031d}"))
            if i % 500 == 499:
                lags.append(store.commitlog.end - store.dispatcher.dispatched_to)
        written = store.commitlog.end
    assert written > 30 << 20
    assert max(lags) < 4 * limit, f"dispatch fell {max(lags)} bytes behind"
