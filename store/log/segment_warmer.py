"""Faults in commit log pages ahead of the writer, on a thread of its own.

RocketMQ warms its mapped files before it writes them for the same reason: a write that
faults in a fresh page of page cache costs far more than one into a page already there. The
kernel does the work with the interpreter lock released, so it runs beside the writer."""

from __future__ import annotations

import threading
from collections.abc import Callable

from store.format.recordio import populate
from store.log.mapped_file import PAGE, MappedFile

WARM_AHEAD_BYTES = 16 << 20
WARM_STEP_BYTES = 4 << 20


class SegmentWarmer:
    def __init__(self, segment_at: Callable[[int], MappedFile | None], file_size: int,
                 ahead: int = WARM_AHEAD_BYTES, step: int = WARM_STEP_BYTES):
        self._segment_at = segment_at
        self._file_size = file_size
        self._ahead = ahead
        self._step = step
        self._cond = threading.Condition()
        self._writer_end = 0
        self._warmed_to = 0
        self._stopped = False
        self._thread: threading.Thread | None = None

    def advance(self, writer_end: int) -> None:
        """The writer reached `writer_end`: keep the next `ahead` bytes warm."""
        if self._stopped or writer_end + self._ahead - self._step < self._warmed_to:
            return
        with self._cond:
            self._writer_end = writer_end
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mqlens-warmer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _next_range(self) -> tuple[MappedFile, int, int, int] | None:
        """The next piece to warm, or None when there is nothing to do now. Pieces are whole
        pages of their segment (madvise takes nothing else), the last one of a segment excepted."""
        start = max(self._warmed_to, self._writer_end)
        pos = start % self._file_size
        start -= pos % PAGE
        pos -= pos % PAGE
        end = self._writer_end + self._ahead
        if start >= end:
            return None
        seg = self._segment_at(start)
        if seg is None:  # the writer has not created that segment yet
            return None
        length = min(self._step, end - start)
        length = min(length + -length % PAGE, self._file_size - pos)
        return seg, start, pos, length

    def _run(self) -> None:
        while True:
            with self._cond:
                work = None
                while not self._stopped and (work := self._next_range()) is None:
                    self._cond.wait()
                if self._stopped:
                    return
            seg, start, pos, length = work
            try:
                populate(seg.buf, pos, length)
            except (OSError, ValueError, TypeError):  # unsupported, or the segment is gone: writes still work
                self._stopped = True
                return
            with self._cond:
                self._warmed_to = max(self._warmed_to, start + length)
