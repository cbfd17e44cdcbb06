"""Index files that fill in the middle of a record's keys: every key has exactly one entry,
after live writes, after a clean reopen and after a reopen that replays the last records."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace

import numpy as np

from store.clock import FakeClock
from store.format.javahash import index_key_hash
from store.format.recordio import index_put
from store.message_store import MessageStore
from store.projections.index import IndexService, index_key
from tests.store.helpers import sample_message, small_config

# Entry 0 is never used: six keys per file, and a record has three (unique key and two keys).
ROLLING = replace(small_config().geometry, index_entries=7, index_slots=5)


def _entries(root) -> Counter:
    """(hash, phys) -> how many index entries, over every index file."""
    index = IndexService(root / "index", ROLLING.index_slots, ROLLING.index_entries, FakeClock(), writable=False)
    try:
        return Counter((h, phys) for f in index.files
                       for h, phys, _, _ in (f.entry(n) for n in range(1, f.used_entries + 1)))
    finally:
        index.close()


def _expected(results, messages) -> Counter:
    want = Counter()
    for r, m in zip(results, messages, strict=True):
        for key in [r.unique_key, *m.keys]:
            want[(index_key_hash(index_key(r.topic, key)), r.phys_offset)] += 1
    return want


def test_each_key_has_one_entry_when_files_fill_mid_record(tmp_path):
    root = tmp_path / "store"
    messages = [sample_message(i) for i in range(11)]
    with MessageStore.open(root, small_config(geometry=ROLLING), clock=FakeClock()) as store:
        results = [store.put(m) for m in messages[:5]] + store.put_many(messages[5:])
        files = len(store.index.files)
    assert files >= 5  # 33 keys, 6 per file: most records span two files
    assert _entries(root) == _expected(results, messages)

    with MessageStore.open(root, small_config(geometry=ROLLING), clock=FakeClock()) as store:
        more = [sample_message(i) for i in range(11, 14)]
        results += [store.put(m) for m in more]
        messages += more
    assert _entries(root) == _expected(results, messages)


def test_a_replayed_record_is_not_indexed_twice(tmp_path):
    """A copy taken while the store was open (no clean close): reopening replays the records
    after the index's end, the newest indexed one included."""
    root, copy = tmp_path / "store", tmp_path / "copy"
    messages = [sample_message(i) for i in range(8)]
    with MessageStore.open(root, small_config(geometry=ROLLING), clock=FakeClock()) as store:
        results = store.put_many(messages)
        store.flush()
        shutil.copytree(root, copy)
    (copy / "lock").unlink(missing_ok=True)
    with MessageStore.open(copy, small_config(geometry=ROLLING), clock=FakeClock()) as store:
        assert store.abnormal_shutdown
        assert [m.phys_offset for m in store.query_by_key("TopicA", "key-7").messages] == [results[7].phys_offset]
    assert _entries(copy) == _expected(results, messages)


def test_a_batch_killed_before_its_header_was_written_leaves_no_broken_chain(tmp_path):
    """The entries and slot heads of a batch whose header update never happened (the writer was
    killed) are not counted; after the repair, the replayed keys chain correctly and every
    older key is still found."""
    keys = [f"k{i}" for i in range(40)]
    index = IndexService(tmp_path, 5, 200, FakeClock(), writable=True)
    for phys, key in enumerate(keys[:30]):
        index.put_keys("T", [key], phys * 100, 1_700_000_000_000)
    newest = index.files[-1]
    hashes = np.array([index_key_hash(index_key("T", k)) for k in keys[30:]], dtype=np.int64)
    index_put(newest.file.buf, newest._layout, newest.slots, newest.entries, newest.index_count,
              newest.begin_timestamp, newest.begin_phys, hashes, np.arange(30, 40, dtype=np.int64) * 100,
              np.full(10, 1_700_000_000_000, dtype=np.int64))  # its header is never written: killed
    index.close()

    index = IndexService(tmp_path, 5, 200, FakeClock(), writable=True)
    index.repair_after_crash()
    for phys, key in enumerate(keys[30:], 30):
        index.put_keys("T", [f"other-{key}"], phys * 100, 1_700_000_000_000)  # the replay writes other keys
    for phys, key in enumerate(keys[:30]):
        assert phys * 100 in set(index.query("T", key)), key
    for phys, key in enumerate(keys[30:], 30):
        assert list(index.query("T", f"other-{key}")) == [phys * 100]
    index.close()
