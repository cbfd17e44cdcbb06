"""The store check record by record, in plain Python: the reference the compiled check
(store.projections.check) must agree with, problem for problem. It keeps every record decoded
and asks the index once per key: for small stores and tests only."""

from __future__ import annotations

from store.errors import CorruptRecordError
from store.format import codec, topics
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK
from store.format.javahash import index_key_hash
from store.format.layouts import BLANK, MAGIC_BLANK
from store.projections.check import CheckReport
from store.projections.dispatch import index_keys_of, tags_code_of
from store.projections.index import index_key


def check_store_reference(store) -> CheckReport:
    report = CheckReport()
    records = _check_commitlog(store, report)
    _check_queues(store, records, report)
    _check_index(store, records, report)
    return report


def _check_commitlog(store, report: CheckReport) -> dict[int, codec.StoredMessage]:
    log = store.commitlog
    size = log.file_size
    records: dict[int, codec.StoredMessage] = {}
    phys = log.min_offset
    while phys < log.end:
        seg, pos = log.view(phys)
        total, magic = BLANK.unpack_from(seg.buf, pos)
        if magic == MAGIC_BLANK:
            report.blanks += 1
            phys += size - pos
            continue
        try:
            msg = codec.decode(seg.buf, pos, path=str(seg.path), check_crc=True)
        except CorruptRecordError as exc:
            report.problem(str(exc))
            return records
        if msg.phys_offset != phys:
            report.problem(f"record at {phys} says its offset is {msg.phys_offset}")
        if pos + msg.size + BLANK.size > size and pos + msg.size != size:
            report.problem(f"record at {phys} leaves no room for an end-of-file filler")
        records[phys] = msg
        report.records += 1
        phys += msg.size
    return records


def _check_queues(store, records, report: CheckReport) -> None:
    expected: dict[tuple[str, int], dict[int, codec.StoredMessage]] = {}
    for msg in records.values():
        if msg.transaction_type not in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK):
            expected.setdefault((msg.topic, msg.queue_id), {})[msg.queue_offset] = msg
    seen_queues = set()
    for cq in store.queues:
        seen_queues.add((cq.topic, cq.queue_id))
        wanted = expected.get((cq.topic, cq.queue_id), {})
        for unit in cq.units(cq.min_offset, cq.max_offset - cq.min_offset):
            report.queue_units += 1
            msg = records.get(unit.phys_offset)
            if msg is None:
                report.problem(f"queue {cq.topic}:{cq.queue_id} offset {unit.queue_offset} points at "
                               f"{unit.phys_offset}, which is not a record")
                continue
            if (msg.topic, msg.queue_id, msg.queue_offset) != (cq.topic, cq.queue_id, unit.queue_offset):
                report.problem(f"queue {cq.topic}:{cq.queue_id} offset {unit.queue_offset} points at a record "
                               f"of {msg.topic}:{msg.queue_id} offset {msg.queue_offset}")
            if unit.size != msg.size:
                report.problem(f"queue {cq.topic}:{cq.queue_id} offset {unit.queue_offset} size {unit.size} "
                               f"!= record size {msg.size}")
            expected_code = tags_code_of(msg, store.delay_levels)
            if unit.tags_code != expected_code and cq.topic == topics.SCHEDULE_TOPIC:
                report.problem(f"queue {cq.topic}:{cq.queue_id} offset {unit.queue_offset} is due "
                               f"{unit.tags_code - msg.store_timestamp} ms after it was stored, the delay level "
                               f"table in use says {expected_code - msg.store_timestamp} ms (is that the "
                               f"broker's table? give it with --delay-levels)")
            elif unit.tags_code != expected_code:
                report.problem(f"queue {cq.topic}:{cq.queue_id} offset {unit.queue_offset} has tagsCode "
                               f"{unit.tags_code}, its record gives {expected_code}")
            wanted.pop(unit.queue_offset, None)
        for offset in sorted(wanted)[:3]:
            report.problem(f"record at {wanted[offset].phys_offset} has no unit in {cq.topic}:{cq.queue_id} "
                           f"offset {offset}")
    for key in sorted(set(expected) - seen_queues)[:3]:
        report.problem(f"records of {key[0]}:{key[1]} have no consume queue")


def _check_index(store, records, report: CheckReport) -> None:
    for f in store.index.files:
        report.index_entries += f.used_entries
        for number in range(1, f.index_count):
            key_hash, phys, _, prev = f.entry(number)
            msg = records.get(phys)
            if msg is None and phys < store.commitlog.min_offset:
                continue  # its segment was deleted by retention: lookups skip it
            if msg is None:
                report.problem(f"index {f.path.name} entry {number} points at {phys}, which is not a record")
                continue
            hashes = {index_key_hash(index_key(msg.topic, k)) for k in index_keys_of(msg)}
            if key_hash not in hashes:
                report.problem(f"index {f.path.name} entry {number} hash matches none of the record's keys")
            if prev >= number:
                report.problem(f"index {f.path.name} entry {number} chains forward to {prev}")
    for msg in records.values():
        if msg.transaction_type == TRANSACTION_ROLLBACK:
            continue
        for key in index_keys_of(msg):
            if msg.phys_offset not in store.index.query(msg.topic, key):
                report.problem(f"record at {msg.phys_offset} is not found in the index under {key!r}")
                break
