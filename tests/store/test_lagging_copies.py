"""Copies of a broker's store taken while it ran or after it crashed: consume queues and index
behind the commit log, or a torn last record. Read-only, the store projects the tail in memory
and answers every lookup of a complete record as the intact store does, changing no byte."""

from __future__ import annotations

import shutil

import pytest

from app.services.store_status import opening_notes
from store.errors import MessageNotFoundError
from store.format.layouts import CQ_UNIT, INDEX_HEADER
from store.log.paths import StorePaths
from store.message_store import MessageStore, StoreConfig
from tests.conftest import BROKER_GEOMETRY, file_digests

LAG_RECORDS = 30  # the newest records the copy's queues and index lack


def _open(path):
    return MessageStore.open(path, StoreConfig(geometry=BROKER_GEOMETRY), read_only=True)


def _records(store) -> list:
    found, phys = [], store.commitlog.min_offset
    while phys < store.commitlog.end:
        try:
            msg = store.read(phys)
        except MessageNotFoundError:  # the end-of-file filler: the next segment
            phys = (phys // store.commitlog.file_size + 1) * store.commitlog.file_size
            continue
        found.append(msg)
        phys += msg.size
    return found


def _answers(store, records) -> list:
    """Every lookup of every record: offset id, unique key, each key, queue offset."""
    out = []
    for m in records:
        out.append(("id", m.offset_msg_id, store.get_by_offset_id(m.offset_msg_id).phys_offset))
        if m.unique_key:
            out.append(("uniq", m.unique_key, sorted(x.phys_offset for x in
                                                     store.query_by_unique_key(m.topic, m.unique_key).messages)))
        for key in m.keys:
            out.append(("key", key, sorted(x.phys_offset for x in store.query_by_key(m.topic, key).messages)))
        try:
            by_queue = store.get_by_queue_offset(m.topic, m.queue_id, m.queue_offset).phys_offset
        except MessageNotFoundError:  # not in a queue: a transaction's prepared or rolled back record
            by_queue = None
        out.append(("queue", (m.topic, m.queue_id, m.queue_offset), by_queue))
    return out


@pytest.fixture
def intact(golden_broker_dir):
    """The intact store's records and its answers for a list of them."""
    with _open(golden_broker_dir) as store:
        records = _records(store)
        assert store.projected_in_memory is None
        answers = {m.phys_offset: _answers(store, [m]) for m in records}
    return records, answers


def _cut_projections(root, from_phys: int) -> None:
    """Zero every consume queue unit of a record at or after `from_phys`, and drop the index files
    holding keys of such records (the newest first, as a crash would leave them)."""
    paths = StorePaths(root)
    for topic_dir in paths.consumequeue.iterdir():
        for queue_dir in topic_dir.iterdir():
            for f in sorted(queue_dir.iterdir()):
                data = bytearray(f.read_bytes())
                for pos in range(0, len(data), CQ_UNIT.size):
                    phys, size, _ = CQ_UNIT.unpack_from(data, pos)
                    if size > 0 and phys >= from_phys:
                        data[pos:pos + CQ_UNIT.size] = bytes(CQ_UNIT.size)
                f.write_bytes(bytes(data))
    for f in sorted(paths.index.iterdir(), reverse=True):
        _, _, begin_phys, end_phys, _, _ = INDEX_HEADER.unpack_from(f.read_bytes(), 0)
        if end_phys >= from_phys:
            f.unlink()


def test_a_copy_whose_queues_and_index_lag_answers_as_the_intact_store(golden_broker_dir, tmp_path, intact):
    records, answers = intact
    expected = [a for m in records for a in answers[m.phys_offset]]
    lagging = tmp_path / "lagging"
    shutil.copytree(golden_broker_dir, lagging)
    first_missing = records[-LAG_RECORDS].phys_offset
    _cut_projections(lagging, first_missing)
    before = file_digests(lagging)
    with _open(lagging) as store:
        projected = store.projected_in_memory
        assert projected is not None and projected.records >= LAG_RECORDS
        assert projected.start <= first_missing and projected.end == store.commitlog.end
        assert _answers(store, records) == expected
        assert store.check().problems == []
        [note] = opening_notes(store)
        assert f"{projected.records} records" in note and "nothing was written" in note
    assert file_digests(lagging) == before


def test_a_copy_with_a_torn_last_record_answers_for_every_complete_record(golden_broker_dir, tmp_path, intact):
    records, answers = intact
    torn = tmp_path / "torn"
    shutil.copytree(golden_broker_dir, torn)
    last = records[-1]
    _cut_projections(torn, last.phys_offset)
    segment = sorted((torn / "commitlog").iterdir())[-1]
    pos = last.phys_offset % BROKER_GEOMETRY.commitlog_file_size
    with open(segment, "r+b") as f:  # the writer died inside the record: its second half never landed
        f.seek(pos + last.size // 2)
        f.write(bytes(last.size - last.size // 2))
    before = file_digests(torn)
    complete = records[:-1]
    with _open(torn) as store:
        assert store.commitlog.end == last.phys_offset
        assert store.recovery.truncated_bytes > 0 and store.recovery.reason
        with pytest.raises(MessageNotFoundError):
            store.get_by_offset_id(last.offset_msg_id)
        got = _answers(store, complete)
        notes = opening_notes(store)
    assert any(f"torn or unreadable record at offset {last.phys_offset:,}" in n for n in notes), notes
    assert got == _answers_without([a for m in complete for a in answers[m.phys_offset]], last)
    assert file_digests(torn) == before


def _answers_without(answers: list, torn) -> list:
    """The intact store's answers for complete records, the torn record left out of every result."""
    out = []
    for kind, what, value in answers:
        if kind == "queue" and what == (torn.topic, torn.queue_id, torn.queue_offset):
            continue
        if isinstance(value, list):
            value = [phys for phys in value if phys != torn.phys_offset]
        out.append((kind, what, value))
    return out


def test_a_copy_whose_queues_lag_behind_its_index_indexes_nothing_twice(golden_broker_dir, tmp_path, intact):
    """The replay starts where the queues end, before the index's newest record: the records the
    index holds, the newest one too, are not indexed again."""
    records, answers = intact
    expected = [a for m in records for a in answers[m.phys_offset]]
    lagging = tmp_path / "queues-behind"
    shutil.copytree(golden_broker_dir, lagging)
    paths = StorePaths(lagging)
    for f in paths.consumequeue.glob("*/*/*"):  # only the queues lose their newest units
        data = bytearray(f.read_bytes())
        for pos in range(0, len(data), CQ_UNIT.size):
            phys, size, _ = CQ_UNIT.unpack_from(data, pos)
            if size > 0 and phys >= records[-3].phys_offset:
                data[pos:pos + CQ_UNIT.size] = bytes(CQ_UNIT.size)
        f.write_bytes(bytes(data))
    with _open(lagging) as store:
        projected = store.projected_in_memory
        assert projected is not None and projected.queue_units >= 2 and projected.index_keys == 0
        assert _answers(store, records) == expected
        assert store.check().problems == []
