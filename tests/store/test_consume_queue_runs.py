"""ConsumeQueue.put_units writes runs of consecutive offsets at once; it must leave exactly the
files put() one unit at a time leaves, whatever the offsets: gaps filled with pre-blank units,
repeats and offsets already written left alone, a first unit anywhere in a file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from store.projections.consume_queue import ConsumeQueue

FILE_SIZE = 20 * 8  # eight units a file, so runs cross files


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())} if directory.exists() else {}


def _queue(directory: Path) -> ConsumeQueue:
    return ConsumeQueue("T", 0, directory, FILE_SIZE, writable=True)


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=1, max_size=4),
       sorted_runs=st.booleans())
def test_put_units_leaves_what_put_one_by_one_leaves(tmp_path_factory, batches, sorted_runs):
    root = tmp_path_factory.mktemp("cq")
    at_once, one_by_one = _queue(root / "at-once"), _queue(root / "one-by-one")
    for n, batch in enumerate(batches):
        offsets = np.array(sorted(batch) if sorted_runs else batch, dtype=np.int64)
        phys = np.arange(len(offsets), dtype=np.int64) * 100 + n * 10_000
        sizes = np.full(len(offsets), 77, dtype=np.int64)
        tags = offsets * 3 + n
        at_once.put_units(offsets, phys, sizes, tags)
        for values in zip(offsets.tolist(), phys.tolist(), sizes.tolist(), tags.tolist(), strict=True):
            one_by_one.put(*values)
        assert (at_once.min_offset, at_once.max_offset) == (one_by_one.min_offset, one_by_one.max_offset)
    at_once.close()
    one_by_one.close()
    assert _files(root / "at-once") == _files(root / "one-by-one")


def test_a_long_run_into_an_empty_queue_is_written_whole(tmp_path):
    queue = _queue(tmp_path / "q")
    offsets = np.arange(13, 13 + 1000, dtype=np.int64)
    queue.put_units(offsets, offsets * 10, np.full(1000, 5, dtype=np.int64), np.zeros(1000, dtype=np.int64))
    assert (queue.min_offset, queue.max_offset) == (13, 1013)
    assert queue.get(500).phys_offset == 5000 and queue.get(13).phys_offset == 130
    queue.close()
