"""Even out the cost of first-touched memory between the systems under test.

On a virtual machine whose host hands out guest memory lazily (and takes idle memory back), the
first write to a page the guest has not used lately costs several times more than reusing a
page that was just freed. Whichever system runs first would pay that for everyone. So before
each system the harness writes, then deletes, a scratch file as large as that system's data:
every system starts with the same recently-used page cache, and the rate of each warm-up write
is reported, so the effect stays visible."""

from __future__ import annotations

import os
import time
from pathlib import Path

CHUNK = 8 << 20


def warm_page_cache(directory: Path, nbytes: int) -> float:
    """Write `nbytes` to a scratch file in `directory`, delete it and return the write rate (MB/s)."""
    path = Path(directory) / "warmup.scratch"
    chunk = b"\xa5" * CHUNK
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    started = time.perf_counter()
    try:
        written = 0
        while written < nbytes:
            written += os.write(fd, chunk[: min(CHUNK, nbytes - written)])
    finally:
        os.close(fd)
        elapsed = time.perf_counter() - started
        path.unlink(missing_ok=True)
    return nbytes / max(elapsed, 1e-9) / 1e6
