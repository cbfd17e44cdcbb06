"""The server's put path: produce requests of one event-loop turn share an append, and with sync
flush they are answered once the group commit has synced past them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.services.put_batcher import LOOP_TURN_MESSAGES, PutBatcher
from store.clock import FakeClock
from store.errors import InvalidMessageError
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import sample_message, small_config

WAIT_S = 10


def _message(i: int, **fields) -> NewMessage:
    m = sample_message(i, body_size=64)
    m.unique_key = f"7F0000011F2E00000000{i:012X}"
    for name, value in fields.items():
        setattr(m, name, value)
    return m


async def _until(condition, what: str) -> None:
    """Let the loop run until `condition()` holds (other threads make it true)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def test_the_puts_of_one_loop_turn_share_one_append(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        batcher = PutBatcher(store)

        async def main():
            return await asyncio.gather(*(batcher.put([_message(i)]) for i in range(50)))

        answers = asyncio.run(main())
        assert batcher.appends == 1
        assert [len(a) for a in answers] == [1] * 50
        for i, (result,) in enumerate(answers):
            assert result.unique_key == _message(i).unique_key
            assert store.get_by_offset_id(result.offset_msg_id).body == _message(i).body
        assert store.stats.snapshot().put == 50


def test_a_request_of_many_messages_keeps_its_order(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        batcher = PutBatcher(store)

        async def main():
            return await asyncio.gather(batcher.put([_message(i) for i in range(5)]),
                                        batcher.put([_message(i) for i in range(5, 8)]))

        first, second = asyncio.run(main())
        assert [r.unique_key for r in first] == [_message(i).unique_key for i in range(5)]
        assert [r.unique_key for r in second] == [_message(i).unique_key for i in range(5, 8)]


def test_a_bad_request_fails_alone(tmp_path):
    """All or none per request: the neighbour of a refused request is stored, the refused one not."""
    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        batcher = PutBatcher(store)

        async def main():
            return await asyncio.gather(batcher.put([_message(0)]),
                                        batcher.put([_message(1), _message(2, queue_id=999)]),
                                        batcher.put([_message(3)]), return_exceptions=True)

        good, bad, other = asyncio.run(main())
        assert isinstance(bad, InvalidMessageError) and "queue id 999" in str(bad)
        assert [r.unique_key for r in good + other] == [_message(0).unique_key, _message(3).unique_key]
        assert store.stats.snapshot().put == 2
        assert store.query_by_unique_key(_message(1).topic, _message(1).unique_key).messages == []


def test_a_store_held_by_another_thread_does_not_stop_the_loop(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        batcher = PutBatcher(store)
        holding, release = threading.Event(), threading.Event()

        def hold_the_store():
            with store._lock:
                holding.set()
                release.wait(WAIT_S)

        holder = threading.Thread(target=hold_the_store)
        holder.start()
        holding.wait(WAIT_S)

        async def main():
            put = asyncio.ensure_future(batcher.put([_message(0)]))
            turns = 0
            while turns < 50:  # the loop keeps serving while the put waits on a worker thread
                await asyncio.sleep(0)
                turns += 1
            assert not put.done()
            release.set()
            return await asyncio.wait_for(put, WAIT_S)

        (result,) = asyncio.run(main())
        holder.join(WAIT_S)
        assert store.get_by_offset_id(result.offset_msg_id).body == _message(0).body


def test_a_large_turn_is_appended_off_the_loop(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(), clock=FakeClock()) as store:
        batcher = PutBatcher(store)
        loop_thread = threading.get_ident()
        appended_on: list[int] = []
        put_many = store.put_many

        def recording_put_many(messages):
            appended_on.append(threading.get_ident())
            return put_many(messages)

        store.put_many = recording_put_many
        count = LOOP_TURN_MESSAGES + 1

        async def main():
            return await batcher.put([_message(i) for i in range(count)])

        results = asyncio.run(main())
        assert len(results) == count and appended_on and loop_thread not in appended_on


def test_sync_flush_answers_once_the_commit_covers_the_turn(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(flush="sync"), clock=FakeClock()) as store:
        batcher = PutBatcher(store)
        store.put(_message(100))
        syncs = store.commit_syncs

        async def main():
            with store._flush_lock:  # a sync in progress: the committer cannot start the next one
                puts = [asyncio.ensure_future(batcher.put([_message(i)])) for i in range(20)]
                await _until(lambda: store.stats.snapshot().put == 21, "the appends")
                await asyncio.sleep(0.01)
                assert not any(p.done() for p in puts)  # appended, not yet on disk
            return await asyncio.wait_for(asyncio.gather(*puts), WAIT_S)

        answers = asyncio.run(main())
        assert len(answers) == 20
        assert store.commit_syncs == syncs + 1
        assert batcher.appends == 1


def test_a_failed_sync_fails_every_request_it_covered(tmp_path, monkeypatch):
    from store.log.mapped_file import MappedFile

    with MessageStore.open(tmp_path / "s", small_config(flush="sync"), clock=FakeClock()) as store:
        batcher = PutBatcher(store)
        store.put(_message(100))

        def no_space(self):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(MappedFile, "sync", no_space)

        async def failing():
            return await asyncio.gather(*(batcher.put([_message(i)]) for i in range(3)), return_exceptions=True)

        outcomes = asyncio.run(failing())
        assert all(isinstance(o, OSError) and o.errno == 28 for o in outcomes)
        monkeypatch.undo()

        async def after():
            return await batcher.put([_message(10)])

        (result,) = asyncio.run(after())
        assert store.get_by_offset_id(result.offset_msg_id).body == _message(10).body


def test_a_client_that_went_away_does_not_disturb_the_others(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(flush="sync"), clock=FakeClock()) as store:
        batcher = PutBatcher(store)

        async def main():
            with store._flush_lock:
                puts = [asyncio.ensure_future(batcher.put([_message(i)])) for i in range(3)]
                await _until(lambda: store.stats.snapshot().put == 3, "the appends")
                puts[1].cancel()
            with pytest.raises(asyncio.CancelledError):
                await puts[1]
            return await asyncio.wait_for(asyncio.gather(puts[0], puts[2]), WAIT_S)

        first, third = asyncio.run(main())
        assert first[0].unique_key == _message(0).unique_key and third[0].unique_key == _message(2).unique_key


def test_a_repeat_is_answered_once_its_duplicate_event_is_on_disk(tmp_path):
    """A turn of repeats appends no message, only the DUPLICATE events the trace holds until a
    sync: the answer waits for that sync all the same."""
    with MessageStore.open(tmp_path / "s", small_config(flush="sync", trace=True), clock=FakeClock()) as store:
        batcher = PutBatcher(store)
        (first,) = store.put_many([_message(0)])
        syncs = store.commit_syncs

        async def main():
            with store._flush_lock:
                repeat = asyncio.ensure_future(batcher.put([_message(0)]))
                await _until(lambda: store.stats.snapshot().put == 2, "the repeat")
                await asyncio.sleep(0.01)
                assert not repeat.done()
            return await asyncio.wait_for(repeat, WAIT_S)

        (again,) = asyncio.run(main())
        assert again.offset_msg_id == first.offset_msg_id
        assert store.commit_syncs == syncs + 1
        assert [e.kind.value for e in store.timeline(first.unique_key)] == ["stored", "duplicate"]
