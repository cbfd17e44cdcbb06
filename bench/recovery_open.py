"""The store opening a bare commit log (no consume queues, no index), and the part of it that
recovers the log's tail: the CRC-checked walk of the last three segments.

    .venv/bin/python -m bench.recovery_open                                   # 100,000 messages, ~0.1 GB
    .venv/bin/python -m bench.recovery_open --messages 1000000 --segment-mib 1024   # ~1.2 GB

The store is generated once; each round copies its commit log alone into a new directory (not
timed) and opens it with MessageStore (recovery, then dispatch of every record into consume
queues and index files, then close), and times the walk alone on the same log, compiled and
with the pure-Python reference. The best of the rounds is printed."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.pipeline_projections import build_store
from store.log.commitlog import CommitLog
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig


def timed_open(store: Path, target: Path, geometry: StoreGeometry) -> float:
    shutil.copytree(store / "commitlog", target / "commitlog")
    began = time.perf_counter()
    with MessageStore.open(target, StoreConfig(geometry=geometry, flush="async")):
        pass
    seconds = time.perf_counter() - began
    shutil.rmtree(target)
    return seconds


def timed_walk(store: Path, geometry: StoreGeometry, compiled: bool | None) -> tuple[float, int, int]:
    """Seconds, the end found and the bytes walked (from the start of the third-last segment)."""
    log = CommitLog(store / "commitlog", geometry.commitlog_file_size, writable=False)
    try:
        began = time.perf_counter()
        result = log.recover(compiled=compiled) if compiled is not None else log.recover()
        seconds = time.perf_counter() - began
        first = max(0, log.segment_count - 3) * geometry.commitlog_file_size + log.min_offset
        return seconds, result.end, result.end - first
    finally:
        log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    geometry = StoreGeometry(commitlog_file_size=args.segment_mib * 1024 * 1024)
    work = Path(tempfile.mkdtemp(prefix="mqlens-bench-"))
    try:
        store = work / "store"
        build_store(store, args.messages, geometry)
        os.sync()
        opens = [timed_open(store, work / "opened", geometry) for _ in range(args.rounds)]
        walks = {}
        for name, compiled in (("compiled", True), ("python", False)):
            try:
                walks[name] = min(timed_walk(store, geometry, compiled) for _ in range(args.rounds))
            except TypeError:  # a store without the compiled walk: its one walk is Python's
                walks[name] = min(timed_walk(store, geometry, None) for _ in range(args.rounds))
        _, log_end, walked = walks["python"]
        print(f"{args.messages:,} messages, {log_end / 1e6:.0f} MB of commit log in {args.segment_mib} MiB segments, "
              f"the last {walked / 1e6:.0f} MB walked by recovery")
        print(f"open of the bare commit log: {min(opens):.3f} s (rounds: {', '.join(f'{s:.3f}' for s in opens)})")
        for name, (seconds, end, _) in walks.items():
            print(f"tail walk, {name}: {seconds:.3f} s, {walked / seconds / 1e6:,.0f} MB/s, "
                  f"{seconds / min(opens):.0%} of the open")
            if end != log_end:
                raise SystemExit(f"the {name} walk ended at {end}, the Python one at {log_end}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
