"""The server caps glibc's malloc arenas (issue #14: with one arena per pool thread the free space
each kept grew the server's memory through a soak). Each case runs in a fresh interpreter:
arenas, once made, stay for the life of the process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.allocator import _is_glibc

pytestmark = pytest.mark.skipif(not _is_glibc(), reason="the cap is glibc's")

# Eight threads, all alive at once, each allocating outside Python's small-object allocator; then
# glibc's own report of its arenas (malloc_stats prints one "Arena n:" per arena, on stderr).
PROGRAM = """
import ctypes, sys, threading
from app.allocator import limit_malloc_arenas
print(limit_malloc_arenas() if sys.argv[1] == "limit" else "not asked", flush=True)
barrier = threading.Barrier(8)
def work():
    held = [bytes(4096 + n) for n in range(200)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=environment,
                          timeout=60, check=True)
    return done.stdout.strip(), sum(line.startswith("Arena ") for line in done.stderr.splitlines())


def test_threads_share_two_arenas_once_capped():
    answer, count = arenas("limit")
    assert answer == "True"
    assert count <= 2


def test_without_the_cap_each_thread_takes_an_arena():
    answer, count = arenas("no")
    assert answer == "not asked"
    assert count > 2


def test_an_operators_malloc_arena_max_is_left_as_set():
    answer, count = arenas("limit", MALLOC_ARENA_MAX="4")
    assert answer == "False"
    assert 2 < count <= 4


# A heap with most of its chunks freed between ones still in use: glibc keeps those pages
# until trimmed. The trimmer runs on its own thread; the program waits for RSS to fall.
TRIM_PROGRAM = """
import sys, time
from app.allocator import HeapTrimmer
def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
chunks = [bytes(2000 + n % 7) for n in range(100_000)]
kept = chunks[::10]
del chunks
before = anon_kib()
trimmer = HeapTrimmer(interval_s=float(sys.argv[1])).start() if sys.argv[1] != "off" else None
deadline = time.monotonic() + (30 if trimmer else 0)  # a wait for the trim, not a time limit
while anon_kib() > before - 100_000 and time.monotonic() < deadline:
    time.sleep(0.02)
print(before - anon_kib())
if trimmer:
    trimmer.stop()
"""


def freed_kib(interval: str) -> int:
    done = subprocess.run([sys.executable, "-c", TRIM_PROGRAM, interval], capture_output=True, text=True,
                          timeout=60, check=True)
    return int(done.stdout)


def test_the_trimmer_gives_free_pages_between_live_chunks_back():
    assert freed_kib("0.05") >= 100_000  # of about 180 MiB freed, with one chunk in ten still in use


def test_without_it_they_stay():
    assert freed_kib("off") < 20_000
