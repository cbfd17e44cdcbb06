"""Taking a lock that short critical sections hold, without a convoy."""

from __future__ import annotations

import threading
import time

SPINS = 20


def take_soon(lock: threading.RLock | threading.Lock, wait_ms: int | None) -> bool:
    """Acquire `lock`, waiting at most `wait_ms` (None: as long as it takes). A thread that finds
    it taken first yields the interpreter a few times: its holder is most likely a thread the
    interpreter switched away from in the middle of a short critical section, and parking on the
    lock would hand it from thread to thread with two context switches per section."""
    if lock.acquire(False):
        return True
    for _ in range(SPINS):
        time.sleep(0)
        if lock.acquire(False):
            return True
    return lock.acquire(timeout=-1 if wait_ms is None else wait_ms / 1000)
