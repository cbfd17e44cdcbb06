"""A fixed-size file mapped into memory, created sparse and zero-filled."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from pathlib import Path

import numpy as np

from store.errors import CorruptRecordError, DiskFullError, is_no_space

PAGE = mmap.PAGESIZE
RECORD_READ_BYTES = 2048  # a record read with pread: most fit in one call


def _reserve(fd: int, size: int) -> None:
    # A file the disk cannot hold is refused before any block is taken: a failing fallocate may
    # fill the disk for a moment, and every other writer on it fails meanwhile.
    stats = os.fstatvfs(fd)
    if size > stats.f_bavail * stats.f_frsize:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    try:
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)  # the file system cannot reserve blocks: sparse, as RocketMQ's


def _open_unnamed(directory: Path) -> int | None:
    """An unnamed file in `directory` (O_TMPFILE), or None where the file system has none."""
    if not hasattr(os, "O_TMPFILE"):
        return None
    try:
        return os.open(directory, os.O_RDWR | os.O_TMPFILE, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _give_name(fd: int, path: Path) -> None:
    """Link an unnamed file into its directory (linkat through /proc with AT_SYMLINK_FOLLOW:
    a directory descriptor makes Python call linkat rather than link)."""
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=directory, follow_symlinks=True)
    finally:
        os.close(directory)


def _create_allocated(path: Path, size: int) -> None:
    """Create the file with its blocks reserved, so a full disk fails here, cleanly, and never
    later as a fault on a write through the mapping. The file gets its name only once it has its
    full size, so a crash while creating it leaves no short file behind to refuse the next open."""
    fd = _open_unnamed(path.parent)
    named = fd is None
    if named:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _reserve(fd, size)
        if not named:
            _give_name(fd, path)
    except OSError as exc:
        if named:
            path.unlink(missing_ok=True)
        if is_no_space(exc):
            raise DiskFullError(f"no space left on the disk for a new file of {size} bytes ({path.parent.name}/"
                                f"{path.name}): writes are refused until space is freed, reads go on") from None
        raise
    finally:
        os.close(fd)


class MappedFile:
    """One fixed-size file: commit log segment, consume queue file or index file.

    A private file (read-only stores only) may be written, but only in this process's memory:
    an existing file is mapped copy-on-write, and one created is memory that never reaches the
    disk. A read-only store projects the records its consume queues and index lag behind that way.
    Of a private file, only the span written holds bytes the file has not: the pages outside it
    may be released as a shared mapping's are."""

    def __init__(self, path: Path, size: int, *, writable: bool, create: bool = False, private: bool = False):
        if private and writable:
            raise ValueError("a private mapping is of a file opened read-only")
        self.path = Path(path)
        self.size = size
        self.writable = writable
        self.private = private
        self._fd: int | None = None
        self._dirty_from = size
        self._dirty_to = 0
        self._written_from = size  # the span written since the open (a private file's own bytes)
        self._written_to = 0
        if private and create:
            self.buf = mmap.mmap(-1, size) if size else b""
            self._written_from, self._written_to = 0, size  # memory, not the file's pages: never released
            return
        if create:
            _create_allocated(self.path, size)
        actual = self.path.stat().st_size
        if actual != size:
            raise CorruptRecordError(
                str(self.path), 0,
                f"file is {actual} bytes but the configured size is {size} (check the store geometry)",
            )
        flags = os.O_RDWR if writable else os.O_RDONLY
        fd = os.open(self.path, flags)
        try:
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY if private else mmap.ACCESS_READ
            self.buf = mmap.mmap(fd, size, access=access) if size else b""
        except BaseException:
            os.close(fd)
            raise
        if writable:
            self._fd = fd
        else:
            os.close(fd)

    def write(self, pos: int, data: bytes) -> None:
        end = pos + len(data)
        self.buf[pos:end] = data
        if pos < self._dirty_from:
            self._dirty_from = pos
            self._written_from = min(self._written_from, pos)
        if end > self._dirty_to:
            self._dirty_to = end
            self._written_to = max(self._written_to, end)

    def mark_dirty(self, pos: int, end: int) -> None:
        """Record a write made through another view of the mapping (a numpy array)."""
        self._dirty_from = min(self._dirty_from, pos)
        self._dirty_to = max(self._dirty_to, end)
        self._written_from = min(self._written_from, pos)
        self._written_to = max(self._written_to, end)

    def nonzero_bytes(self, pos: int) -> int:
        """How many bytes from `pos` to the end of the file are not zero (no copy is made)."""
        if pos >= self.size:
            return 0
        return int(np.count_nonzero(np.frombuffer(self.buf, dtype=np.uint8, offset=pos)))

    def zero_from(self, pos: int, end: int | None = None) -> None:
        end = self.size if end is None else end
        chunk = 1 << 20
        zeros = bytes(min(chunk, max(0, end - pos)))
        while pos < end:
            n = min(chunk, end - pos)
            self.write(pos, zeros[:n])
            pos += n

    def take_dirty(self) -> bool:
        """Whether anything was written since the last call; the caller then syncs the file."""
        dirty = self.writable and self._dirty_to > self._dirty_from
        self._dirty_from = self.size
        self._dirty_to = 0
        return dirty

    def sync(self) -> None:
        """Make the file's written pages durable, through the mapping or not. fdatasync lets
        other threads run meanwhile (mmap.flush would hold the interpreter lock)."""
        if self._fd is not None:
            os.fdatasync(self._fd)

    def flush(self) -> None:
        """Make every write so far durable."""
        if self.take_dirty():
            self.sync()

    def read_record(self, pos: int) -> bytes | None:
        """A copy of the size-prefixed record at `pos`, read with pread (nothing is mapped), or
        None when the file has no descriptor or the size does not fit; the caller then reads
        through the mapping, which reports what is wrong."""
        if self._fd is None or pos + 4 > self.size:
            return None
        head = os.pread(self._fd, min(RECORD_READ_BYTES, self.size - pos), pos)
        size = int.from_bytes(head[:4], "big", signed=True)
        if size <= 0 or pos + size > self.size:
            return None
        if size <= len(head):
            return head[:size]
        return head + os.pread(self._fd, size - len(head), pos + len(head))

    def release(self, start: int, end: int) -> None:
        """Unmap this process's pages of [start, end) (whole pages inside it): the bytes stay in the
        page cache, written ones included, and a read maps them again. Meanwhile they do not count
        as the process's memory, which would otherwise grow with every page written or read back.
        A private mapping keeps the pages it wrote: they are their bytes' only copy."""
        if self.private:
            self._release_pages(start, min(end, self._written_from))
            self._release_pages(max(start, self._written_to), end)
        else:
            self._release_pages(start, end)

    def _release_pages(self, start: int, end: int) -> None:
        start = -(-max(start, 0) // PAGE) * PAGE
        end = min(end, self.size) // PAGE * PAGE
        if end <= start or not isinstance(self.buf, mmap.mmap):
            return
        with contextlib.suppress(ValueError):  # closed meanwhile (retention dropped the file): nothing to release
            self.buf.madvise(mmap.MADV_DONTNEED, start, end - start)

    def release_before(self, pos: int) -> None:
        self.release(0, pos)

    def drop_cached(self, start: int, end: int) -> None:
        """Ask the kernel to drop the file's page cache pages of [start, end): those already on
        disk and mapped by no one are freed at once, and the next pages the kernel hands out are
        likely these, recently used, rather than memory first touched (release them first)."""
        end = min(end, self.size)
        if self._fd is None or end <= start:
            return
        with contextlib.suppress(OSError):  # advice only: a file system may ignore it
            os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap) and not self.buf.closed:
            self.flush()
            self.buf.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
