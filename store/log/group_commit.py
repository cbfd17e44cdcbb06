"""Sync flush with group commit (RocketMQ's GroupCommitService): a change returns once the
commit log is on disk past its bytes; a committer thread syncs whatever was appended when it
starts a round and then wakes every waiter, so changes in flight share one fdatasync. What the
store holds back until a sync (the lifecycle trace's events) is appended when a round starts, so
it is on disk when the changes that handed it over return, and shares their sync."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from store.log.commitlog import CommitLog

Done = Callable[[BaseException | None], None]

WAIT_S = 0.5  # a waiter asks the committer again after this


class Held(Protocol):
    """What a store holds back from the commit log until a sync (the lifecycle trace's events)."""

    queued: int  # items handed over so far (it only grows)

    def write(self) -> None:
        """Append every held item (store lock held)."""


class GroupCommitter:
    def __init__(self, commitlog: CommitLog, store_lock: threading.RLock, flush_lock: threading.RLock,
                 held: Held | None = None):
        self.commitlog = commitlog
        self._held = held
        self.durable_items = 0  # the first durable_items held items handed over are on disk
        self._store_lock = store_lock  # appends hold it; held here only to collect what to sync
        self._flush_lock = flush_lock  # one sync of the store's files at a time, taken first
        self.durable_to = commitlog.end  # the commit log is on disk up to here
        self.syncs = 0
        self._round_done = threading.Condition(threading.Lock())
        self._wanted = threading.Event()
        self._failure: tuple[int, BaseException] | None = None  # the last failed round's reach
        self._stopped = False
        self._callbacks: list[tuple[int, int, Done]] = []  # (reach, held items, done) not yet durable
        self._thread = threading.Thread(target=self._loop, name="mqlens-commit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the committer; later waits sync by themselves."""
        self._stopped = True
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._round_done:
            left, self._callbacks = self._callbacks, []
        if left:
            try:
                with self._store_lock:
                    reach, segments, items = self._collect()
                self.sync(reach, segments, items)
            except Exception as exc:
                self._answer(left, exc)
            else:
                self._answer(left, None)

    def when_durable(self, done: Done, items: int = 0) -> None:
        """Call `done(None)` once the commit log is on disk up to its end as the caller's change
        left it, with the first `items` held items, or `done(error)` with the error of the sync
        that should have covered it. Called from the committer thread (at once when already
        durable): `done` must not block."""
        target = self.commitlog.end
        with self._round_done:
            if not self._covers(target, items) and not self._stopped:
                self._callbacks.append((target, items, done))
                self._wanted.set()
                return
        try:
            self.wait_durable(items)
        except Exception as exc:
            done(exc)
        else:
            done(None)

    def wait_durable(self, items: int = 0) -> None:
        """Return once the commit log is on disk up to its end as the caller's change left it,
        and the first `items` held items with it. Raises the error of the sync that should have
        covered it."""
        target = self.commitlog.end
        if self._covers(target, items):
            return
        if not self._store_lock._is_owned():  # not nested in a change holding the lock
            with self._round_done:
                while not self._covers(target, items) and not self._stopped:
                    failure = self._failure
                    if failure is not None and failure[0] >= target:
                        raise failure[1]
                    self._wanted.set()
                    self._round_done.wait(WAIT_S)
        if not self._covers(target, items):  # nested, or the committer has stopped: sync here
            with self._store_lock:
                reach, segments, held = self._collect()
            self.sync(reach, segments, held)

    def _covers(self, target: int, items: int) -> bool:
        return self.durable_to >= target and self.durable_items >= items

    def _collect(self) -> tuple[int, list, int]:
        """(store lock held) Append the held items, then what a sync covers: the commit log's
        end, its dirty segments and how many held items were handed over."""
        items = 0
        if self._held is not None:
            items = self._held.queued
            self._held.write()
        return self.commitlog.end, self.commitlog.dirty_files(), items

    def covered(self, reach: int, items: int = 0) -> None:
        """Another path (a full flush) made the commit log durable up to `reach`, with the first
        `items` held items."""
        self.durable_to = max(self.durable_to, reach)
        self.durable_items = max(self.durable_items, items)

    def sync(self, reach: int, segments: list, items: int = 0) -> None:
        """Sync commit log segments written up to `reach` (and the first `items` held items); on
        failure they stay marked dirty."""
        try:
            for seg in segments:
                seg.sync()
        except BaseException:
            for seg in segments:
                seg.mark_dirty(0, seg.size)
            raise
        self.syncs += 1
        self.covered(reach, items)

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopped:
                return
            self._wanted.clear()
            failure = None
            with self._flush_lock:
                reach = self.commitlog.end
                try:
                    with self._store_lock:  # only to collect what to sync: appends go on during the sync
                        reach, segments, items = self._collect()
                    if reach > self.durable_to:
                        self.sync(reach, segments, items)
                    else:
                        self.covered(reach, items)
                except Exception as exc:  # the waiters this round covered raise it
                    failure = (reach, exc)
            with self._round_done:
                self._failure = failure
                self._round_done.notify_all()
                durable, failed, waiting = self._sort_callbacks(failure)
                self._callbacks = waiting
            self._answer(durable, None)
            if failed:
                self._answer(failed, failure[1])

    def _sort_callbacks(self, failure: tuple[int, BaseException] | None) -> tuple[list, list, list]:
        """The callbacks now durable, those the failed round should have covered, the rest."""
        durable, failed, waiting = [], [], []
        for callback in self._callbacks:
            target, items, _ = callback
            if self._covers(target, items):
                durable.append(callback)
            elif failure is not None and target <= failure[0]:
                failed.append(callback)
            else:
                waiting.append(callback)
        return durable, failed, waiting

    @staticmethod
    def _answer(callbacks: list[tuple[int, int, Done]], error: BaseException | None) -> None:
        for _, _, done in callbacks:
            done(error)
