"""Sync flush with group commit (RocketMQ's GroupCommitService): a change returns once the
commit log is on disk past its bytes; a committer thread syncs whatever was appended when it
starts a round and then wakes every waiter, so changes in flight share one fdatasync."""

from __future__ import annotations

import threading

from store.log.commitlog import CommitLog

WAIT_S = 0.5  # a waiter asks the committer again after this


class GroupCommitter:
    def __init__(self, commitlog: CommitLog, store_lock: threading.RLock, flush_lock: threading.RLock):
        self.commitlog = commitlog
        self._store_lock = store_lock  # appends hold it; held here only to collect what to sync
        self._flush_lock = flush_lock  # one sync of the store's files at a time, taken first
        self.durable_to = commitlog.end  # the commit log is on disk up to here
        self.syncs = 0
        self._round_done = threading.Condition(threading.Lock())
        self._wanted = threading.Event()
        self._failure: tuple[int, BaseException] | None = None  # the last failed round's reach
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="mqlens-commit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the committer; later waits sync by themselves."""
        self._stopped = True
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_durable(self) -> None:
        """Return once the commit log is on disk up to its end as the caller's change left it.
        Raises the error of the sync that should have covered it."""
        target = self.commitlog.end
        if self.durable_to >= target:
            return
        if not self._store_lock._is_owned():  # not nested in a change holding the lock
            with self._round_done:
                while self.durable_to < target and not self._stopped:
                    failure = self._failure
                    if failure is not None and failure[0] >= target:
                        raise failure[1]
                    self._wanted.set()
                    self._round_done.wait(WAIT_S)
        if self.durable_to < target:  # nested, or the committer has stopped: sync here
            with self._store_lock:
                reach, segments = self.commitlog.end, self.commitlog.dirty_files()
            self.sync(reach, segments)

    def covered(self, reach: int) -> None:
        """Another path (a full flush) made the commit log durable up to `reach`."""
        self.durable_to = max(self.durable_to, reach)

    def sync(self, reach: int, segments: list) -> None:
        """Sync commit log segments written up to `reach`; on failure they stay marked dirty."""
        try:
            for seg in segments:
                seg.sync()
        except BaseException:
            for seg in segments:
                seg.mark_dirty(0, seg.size)
            raise
        self.syncs += 1
        self.covered(reach)

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopped:
                return
            self._wanted.clear()
            failure = None
            with self._flush_lock:
                with self._store_lock:  # only to collect what to sync: appends go on during the sync
                    reach, segments = self.commitlog.end, self.commitlog.dirty_files()
                try:
                    if reach > self.durable_to:
                        self.sync(reach, segments)
                except Exception as exc:  # the waiters this round covered raise it
                    failure = (reach, exc)
            with self._round_done:
                self._failure = failure
                self._round_done.notify_all()
