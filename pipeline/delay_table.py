"""The delay level table a job computes scheduled messages' due times with, and where it came
from: given (--delay-levels), the store's own (config/delayLevels.json), inferred from the
SCHEDULE_TOPIC_XXXX consume queues the broker wrote (as opening the store and `store check` do),
else RocketMQ's default, which is a guess: a job refuses to use it on a commit log that holds
scheduled messages."""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path

from pipeline.segments import segment_files
from store.broker.delay_inference import (
    DEFAULT_TABLE_TEXT,
    FILE_TABLE_TEXT,
    DelayTableSource,
    infer_delay_table,
)
from store.errors import StoreError
from store.format import codec, topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.log.delay_levels_file import read_delay_levels
from store.log.paths import StorePaths
from store.projections.consume_queue import ConsumeQueue

GIVEN_TEXT = "given with --delay-levels"


class GuessedDelayTable(ValueError):
    """Scheduled messages would get due times from a table nobody chose."""


@dataclass(frozen=True)
class ChosenDelayTable:
    levels: DelayLevels
    source: DelayTableSource

    @property
    def guessed(self) -> bool:
        return self.source.kind == "default"

    def describe(self) -> str:
        return f"delay levels {self.levels.spec} ({self.source.text})"

    def refuse_guess(self, scheduled_records: int) -> None:
        """Raise when the table is RocketMQ's default and the commit log holds scheduled messages."""
        if self.guessed and scheduled_records:
            raise GuessedDelayTable(
                f"the commit log holds {scheduled_records:,} scheduled messages ({topics.SCHEDULE_TOPIC}) but "
                "the store has no delay level table of its own and no scheduled consume queue to infer one from: "
                "give the broker's table with --delay-levels (messageDelayLevel in its broker.conf)")


def choose_delay_table(store_dir: Path, cq_file_size: int, given: str | None) -> ChosenDelayTable:
    if given is not None:
        return ChosenDelayTable(DelayLevels(given), DelayTableSource("given", GIVEN_TEXT))
    paths = StorePaths(Path(store_dir))
    saved = read_delay_levels(paths.config)
    if saved is not None:
        return ChosenDelayTable(saved, DelayTableSource("file", FILE_TABLE_TEXT))
    with ExitStack() as stack:
        queues = [stack.enter_context(closing(q)) for q in _schedule_queues(paths, cq_file_size)]
        inferred = infer_delay_table(queues, stack.enter_context(_store_time_reader(store_dir))) if queues else None
    if inferred is not None:
        return ChosenDelayTable(DelayLevels(inferred.spec), inferred.source)
    return ChosenDelayTable(DelayLevels(DEFAULT_DELAY_LEVELS), DelayTableSource("default", DEFAULT_TABLE_TEXT))


def _schedule_queues(paths: StorePaths, cq_file_size: int) -> list[ConsumeQueue]:
    """The store's SCHEDULE_TOPIC_XXXX queues that can be read: their files are of the given
    size, or of the size they all have (a job may be run without the store's geometry)."""
    root = paths.consumequeue / topics.SCHEDULE_TOPIC
    if not root.is_dir():
        return []
    queues = []
    for name in sorted(os.listdir(root)):
        files = sorted((root / name).iterdir()) if name.isdigit() and (root / name).is_dir() else []
        sizes = {f.stat().st_size for f in files}
        size = cq_file_size if cq_file_size in sizes or len(sizes) != 1 else sizes.pop()
        try:
            queues.append(ConsumeQueue(topics.SCHEDULE_TOPIC, int(name), root / name, size, writable=False,
                                       private=True))
        except (StoreError, ValueError):
            continue
    return queues


class _store_time_reader:
    """store_time_at(phys) over the segment files, each mapped once when first asked."""

    def __init__(self, store_dir: Path):
        self._segments = segment_files(store_dir)
        self._bases = [s.base for s in self._segments]
        self._maps: dict[int, mmap.mmap] = {}

    def __enter__(self) -> Callable[[int], int | None]:
        return self.store_time_at

    def store_time_at(self, phys: int) -> int | None:
        i = bisect.bisect_right(self._bases, phys) - 1
        if i < 0 or self._segments[i].size == 0:
            return None
        segment = self._segments[i]
        buf = self._maps.get(i)
        if buf is None:
            with open(segment.path, "rb") as file:
                buf = self._maps[i] = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return codec.decode_for_dispatch(buf, phys - segment.base).store_timestamp
        except (StoreError, ValueError, struct.error):
            return None

    def __exit__(self, *exc) -> None:
        for buf in self._maps.values():
            buf.close()
