"""A small file system that can be filled up and freed again, for the disk-full tests.

`TmpfsDisk` is a real tmpfs mounted for the test (where the machine lets the test mount one)
and filled with a filler file. `InjectedDisk` is the fallback where it does not: it makes the
process see a full disk at the points where the store and the operator database meet it (free
space asked by statvfs, config files written by open, SQLite's page limit)."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, text

from store.log import config_file

FILL_CHUNKS = (1 << 20, 4096, 512, 1)


class TmpfsDisk:
    kind = "tmpfs"

    def __init__(self, root: Path):
        self.root = root
        self._filler = root / "filler"

    def fill(self) -> None:
        """Take every free byte; what a running writer needs from now on fails with ENOSPC."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in FILL_CHUNKS:
                block = b"\0" * size
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, block)
        finally:
            os.close(fd)
        stats = os.statvfs(self.root)
        assert stats.f_bavail == 0, "the filler left room"

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def watch_database(self, engine: Engine) -> None:
        """A real full disk needs no help to fail SQLite's writes."""


class InjectedDisk:
    """The same faults without a mount: statvfs reports no free space (the store's guard and its
    new files), config files cannot be opened for writing, SQLite cannot grow its file."""

    kind = "injected"

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self._monkeypatch = monkeypatch
        self._full = False
        self._engines: list[Engine] = []
        real_statvfs, real_fstatvfs, real_open = os.statvfs, os.fstatvfs, builtins.open

        def shrunk(stats: os.statvfs_result) -> os.statvfs_result:
            if not self._full:
                return stats
            values = list(stats)
            values[3] = values[4] = 0  # f_bfree, f_bavail
            return os.statvfs_result(values)

        def fake_open(file, mode="r", *args, **kwargs):
            if self._full and any(flag in mode for flag in "wax+"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
            return real_open(file, mode, *args, **kwargs)

        monkeypatch.setattr(os, "statvfs", lambda path: shrunk(real_statvfs(path)))
        monkeypatch.setattr(os, "fstatvfs", lambda fd: shrunk(real_fstatvfs(fd)))
        monkeypatch.setattr(config_file, "open", fake_open, raising=False)

    def watch_database(self, engine: Engine) -> None:
        self._engines.append(engine)

        @event.listens_for(engine, "connect")
        def limit_pages(connection, _record) -> None:
            if self._full:
                pages = connection.execute("PRAGMA page_count").fetchone()[0]
                connection.execute(f"PRAGMA max_page_count = {pages}")

    def _limit_open_connections(self, full: bool) -> None:
        for engine in self._engines:
            engine.dispose()  # new connections take the limit (or lose it) as they connect
            if full:
                with engine.connect() as connection:
                    connection.execute(text("SELECT 1"))

    def fill(self) -> None:
        self._full = True
        self._limit_open_connections(True)

    def free(self) -> None:
        self._full = False
        self._limit_open_connections(False)


def _mount_tmpfs(target: Path, size_mib: int) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(target)],
                          capture_output=True, text=True, timeout=30)
    return done.returncode == 0


def _unmount(target: Path) -> None:
    done = subprocess.run(["umount", str(target)], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:  # something still holds a file: detach now, freed when it lets go
        subprocess.run(["umount", "-l", str(target)], capture_output=True, text=True, timeout=30, check=True)


@contextlib.contextmanager
def small_disk(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size_mib: int = 64
               ) -> Iterator[TmpfsDisk | InjectedDisk]:
    root = tmp_path / "disk"
    if kind == "injected":
        root.mkdir()
        yield InjectedDisk(root, monkeypatch)
        return
    if not _mount_tmpfs(root, size_mib):
        pytest.skip("this machine does not let the test mount a tmpfs (the injected disk covers the same faults)")
    try:
        yield TmpfsDisk(root)
    finally:
        _unmount(root)
