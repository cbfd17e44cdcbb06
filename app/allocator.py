"""The C allocator's settings and upkeep for the long-running server.

glibc gives threads malloc arenas of their own, up to eight per core. A request runs on any of
the thread pool's threads, so each arena grows to the peak its requests reached, and the free
space left behind in one is never reused by the others: the server's memory grows for hours
with no more data live. Two arenas keep threads from waiting on one another and keep that free
space where every thread reuses it."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading

M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h
SERVER_ARENAS = 2

log = logging.getLogger("mqlens.allocator")


def limit_malloc_arenas(arenas: int = SERVER_ARENAS) -> bool:
    """Cap glibc's malloc arenas, before the server starts its threads. Not on other C libraries,
    nor when MALLOC_ARENA_MAX is set (the operator's choice, which glibc has already applied).
    True when the cap was set."""
    libc = _glibc()
    if os.environ.get("MALLOC_ARENA_MAX") or libc is None:
        return False
    if libc.mallopt(M_ARENA_MAX, arenas) != 1:
        log.warning("could not limit the C allocator to %d arenas: memory may grow with the thread count", arenas)
        return False
    return True


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc, through the process's own symbols (no library search), else None."""
    return ctypes.CDLL(None) if _is_glibc() else None


def _is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False


class HeapTrimmer:
    """Hands the C allocator's free pages back to the system every `interval_s` (malloc_trim):
    glibc returns only the top of a heap by itself, and a long-running server's free space lies
    between chunks still in use, so without it the resident memory only ever grows."""

    def __init__(self, interval_s: float = 10.0):
        libc = _glibc()
        self._trim = libc.malloc_trim if libc is not None else None
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HeapTrimmer:
        if self._trim is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mqlens-heap-trim", daemon=True)
            self._thread.start()
        return self

    def trim(self) -> None:
        if self._trim is not None:
            self._trim(0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.trim()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
