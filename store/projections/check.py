"""Full consistency check: every record against its CRC, its queue unit and its index keys.

Each structure is walked once. The commit log goes segment by segment through the compiled CRC
walk and scanner, which keep a few packed numbers per record (no object per record); then each
consume queue and each index file is read as arrays and compared with those, a file or a window
at a time, its pages released once read: what stays is the packed numbers. A record is decoded
in Python only where the compiled code declines it or a problem needs its text. The findings,
and their order, are those of store.projections.check_reference, the plain per-record check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from store.errors import CorruptRecordError
from store.format import codec, topics
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK
from store.format.delivery_time import timer_deliver_ms
from store.format.javahash import index_key_hash
from store.format.layouts import BLANK, MAGIC_BLANK
from store.format.recordio import SCAN_SLOW, crc_walk, record_layout
from store.projections.dispatch import BatchScanner, index_keys_of
from store.projections.index import index_key

MAX_PROBLEMS = 100
WALK_WINDOW = 32 << 20  # commit log bytes walked between releases of their pages
INDEX_WINDOW = 1 << 18  # index entries (or slots) compared between releases of their pages
ANY_TIME = 2**63 - 1
LOW_32 = 0xFFFFFFFF


@dataclass
class CheckReport:
    records: int = 0
    blanks: int = 0
    queue_units: int = 0
    index_entries: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def full(self) -> bool:
        """No further problem would be listed."""
        return len(self.problems) > MAX_PROBLEMS

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
        elif len(self.problems) == MAX_PROBLEMS:
            self.problems.append("... more problems not listed")


@dataclass
class LogRecords:
    """The readable records of the commit log in its order, as packed fields."""

    fields: np.ndarray  # SCANNED_RECORD (only `phys` after keep_only_phys); `phys`: the offset a record states
    at: np.ndarray  # int64: where each record sits
    keys: np.ndarray  # SCANNED_KEY: index hashes of topic#key, `record` numbering rows of `fields`
    topic_ids: dict[bytes, int]
    topic_names: list[bytes]
    tags_codes: np.ndarray | None = None  # int64: the tagsCode each record's unit must hold

    def rows_at(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each offset, the row of the record sitting there (any row where none does) and whether one does."""
        if not len(self.at):
            return np.zeros(len(phys), dtype=np.int64), np.zeros(len(phys), dtype=bool)
        rows = np.minimum(np.searchsorted(self.at, phys), len(self.at) - 1)
        return rows, self.at[rows] == phys

    def topic(self, row: int) -> str:
        return self.topic_names[int(self.fields["topic_id"][row])].decode("utf-8")

    def keep_only_phys(self) -> None:
        """Let go of every field but `phys`, and of the tags codes: the index pass reads no other."""
        phys = np.empty(len(self.fields), dtype=[("phys", "=i8")])
        phys["phys"] = self.fields["phys"]
        self.fields = phys
        self.tags_codes = None


def check_store(store) -> CheckReport:
    report = CheckReport()
    log = check_commitlog(store, report)
    log.tags_codes = _expected_tags_codes(store, log)
    _check_queues(store, log, report)
    indexed = IndexedKeys.of(log)
    log.keep_only_phys()
    _check_index(store, log, indexed, report)
    return report


def decode_at(store, at: int) -> codec.StoredMessage:
    seg, pos = store.commitlog.view(at)
    return codec.decode(seg.buf, pos, path=str(seg.path), check_crc=False)


def _member(sorted_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    if not len(sorted_codes):
        return np.zeros(len(codes), dtype=bool)
    found = np.minimum(np.searchsorted(sorted_codes, codes), len(sorted_codes) - 1)
    return sorted_codes[found] == codes


# -- commit log --------------------------------------------------------------------------------------
class Runs:
    """Where the records read lie: runs of records one after the other, as (offset of the
    first, how many, end), in log order."""

    def __init__(self):
        self.runs: list[list[int]] = []

    def add(self, start: int, count: int, end: int) -> None:
        if not count:
            return
        if self.runs and self.runs[-1][2] == start:
            self.runs[-1][1:] = [self.runs[-1][1] + count, end]
        else:
            self.runs.append([start, count, end])


def check_commitlog(store, report: CheckReport, keep: bool = True) -> LogRecords | None:
    """Every record's CRC and place. Returns the records as packed fields; with `keep` False,
    each window's records are checked and let go (records counted, nothing returned)."""
    log = store.commitlog
    size = log.file_size
    scanner = BatchScanner()
    runs = Runs()
    corrupt = None
    verified_to = -1  # where the last CRC walk stopped
    released_to = (-1, 0)  # (segment base, offset within it) before which this walk released the pages
    phys = log.min_offset
    while phys < log.end and corrupt is None:
        seg, pos = log.view(phys)
        base = phys - pos
        limit = min(size, log.end - base)
        if phys >= verified_to:
            verified_to = base + crc_walk(seg.buf, pos, limit, record_layout(), pos + WALK_WINDOW)
        status = SCAN_SLOW
        if verified_to > phys:
            before = scanner.count
            status, pos = scanner.scan(seg.buf, pos, verified_to - base, verified_to - phys)
            runs.add(phys, scanner.count - before, base + pos)
        if status == SCAN_SLOW and pos < limit:
            pos, corrupt = _read_one(seg, pos, scanner, runs, base, report)
        released = released_to[1] if released_to[0] == base else 0
        if pos - released >= WALK_WINDOW or pos >= limit or corrupt is not None:
            seg.release(released, pos)  # read: its pages need not stay in this process
            released_to = (base, pos)
            if not keep:
                _check_places(_packed(scanner, runs), size, report)
                scanner, runs = BatchScanner(), Runs()
        phys = base + pos
    log_records = _packed(scanner, runs)
    _check_places(log_records, size, report)
    if corrupt is not None:
        report.problem(corrupt)
    return log_records if keep else None


def _read_one(seg, pos: int, scanner: BatchScanner, runs: Runs, base: int,
              report: CheckReport) -> tuple[int, str | None]:
    """The record or filler at `pos` read as the reference reads it. Returns where the next one
    starts, and the problem that ends the walk, if any."""
    if seg.size - pos < BLANK.size:
        return seg.size, None  # not even a filler fits: the reference's read fails here
    _, magic = BLANK.unpack_from(seg.buf, pos)
    if magic == MAGIC_BLANK:
        report.blanks += 1
        return seg.size, None
    try:
        msg = codec.decode(seg.buf, pos, path=str(seg.path), check_crc=True)
    except CorruptRecordError as exc:
        return pos, str(exc)
    scanner.add_decoded(msg)
    runs.add(base + pos, 1, base + pos + msg.size)
    return pos + msg.size, None


def _packed(scanner: BatchScanner, runs: Runs) -> LogRecords:
    batch = scanner.batch()
    sizes = batch.records["size"]
    at = np.empty(len(sizes), dtype=np.int64)
    row = 0
    for start, count, _ in runs.runs:
        run = at[row : row + count]
        np.cumsum(sizes[row : row + count], dtype=np.int64, out=run)
        run -= sizes[row : row + count]
        run += start
        row += count
    return LogRecords(batch.records, at, batch.keys, batch.topic_ids, batch.topic_names)


def _check_places(log: LogRecords, file_size: int, report: CheckReport) -> None:
    report.records += len(log.at)
    stated = log.fields["phys"]
    within = log.at % file_size
    end = within + log.fields["size"]
    misplaced = stated != log.at
    no_room = (end + BLANK.size > file_size) & (end != file_size)
    for row in np.flatnonzero(misplaced | no_room).tolist():
        if report.full:
            return
        if misplaced[row]:
            report.problem(f"record at {int(log.at[row])} says its offset is {int(stated[row])}")
        if no_room[row]:
            report.problem(f"record at {int(log.at[row])} leaves no room for an end-of-file filler")


def _expected_tags_codes(store, log: LogRecords) -> np.ndarray:
    """tagsCode of each record as dispatch computes it: deliver times for scheduled and timer records."""
    fields = log.fields
    codes = fields["tags_hash"].astype(np.int64)
    schedule_id = log.topic_ids.get(topics.SCHEDULE_TOPIC.encode())
    if schedule_id is not None:
        levels = fields["delay_level"]
        scheduled = (fields["topic_id"] == schedule_id) & (levels > 0)
        if scheduled.any():
            codes[scheduled] = store.delay_levels.deliver_times(levels[scheduled], fields["store_ts"][scheduled],
                                                                fields["phys"][scheduled])
    timer_id = log.topic_ids.get(topics.TIMER_TOPIC.encode())
    if timer_id is not None:
        for row in np.flatnonzero(fields["topic_id"] == timer_id).tolist():
            msg = decode_at(store, int(log.at[row]))  # the scanner does not read TIMER_DELIVER_MS
            codes[row] = timer_deliver_ms(msg.properties, msg.store_timestamp)
    return codes


# -- consume queues --------------------------------------------------------------------------------
@dataclass
class QueueRecords:
    """The rows of the records meant for consume queues, ordered by queue, queue offset and log order."""

    rows: np.ndarray
    queue_keys: np.ndarray  # topic id << 32 | queue id, of each row

    def of(self, queue_key: int) -> np.ndarray:
        first, stop = np.searchsorted(self.queue_keys, [queue_key, queue_key + 1])
        return self.rows[first:stop]


def _queue_key(topic_ids, queue_ids) -> np.ndarray:
    return (np.asarray(topic_ids, dtype=np.int64) << 32) | (np.asarray(queue_ids, dtype=np.int64) & LOW_32)


def _queued(log: LogRecords) -> QueueRecords:
    fields = log.fields
    ttype = fields["sys_flag"] & TRANSACTION_TYPE_MASK
    rows = np.flatnonzero((ttype != TRANSACTION_PREPARED) & (ttype != TRANSACTION_ROLLBACK))
    keys = _queue_key(fields["topic_id"][rows], fields["queue_id"][rows])
    order = np.lexsort((rows, fields["queue_offset"][rows], keys))
    return QueueRecords(rows[order], keys[order])


def _check_queues(store, log: LogRecords, report: CheckReport) -> None:
    queued = _queued(log)
    with_queue = set()
    for cq in store.queues:
        topic_id = log.topic_ids.get(cq.topic.encode("utf-8"))
        queue_key = None if topic_id is None else int(_queue_key(topic_id, cq.queue_id))
        with_queue.add(queue_key)
        stop = cq.min_offset
        astray = [np.zeros(0, dtype=np.int64)]  # offsets of units pointing at no record: not taken as the record's
        for first, units in cq.unit_arrays():
            report.queue_units += len(units)
            astray.append(_check_units(cq, first, units, topic_id, log, report))
            stop = first + len(units)
        if queue_key is not None:
            _report_missing_units(cq, queued.of(queue_key), stop, np.concatenate(astray), log, report)
    keys = queued.queue_keys
    missing = set(keys[np.r_[True, keys[1:] != keys[:-1]]].tolist() if len(keys) else []) - with_queue
    named = sorted((log.topic_names[key >> 32].decode("utf-8"), int(np.int32(key & LOW_32))) for key in missing)
    for topic, queue_id in named[:3]:
        report.problem(f"records of {topic}:{queue_id} have no consume queue")


def _check_units(cq, first: int, units: np.ndarray, topic_id: int | None, log: LogRecords,
                 report: CheckReport) -> np.ndarray:
    """Report the units of one file that disagree with their records. Returns the queue offsets
    of those pointing at no record."""
    phys = units["phys"].astype(np.int64)
    rows, found = log.rows_at(phys)
    offsets = np.arange(first, first + len(units), dtype=np.int64)
    if not len(log.at):
        _report_no_records(cq, first, phys, report)
        return offsets
    fields = log.fields[rows]
    other = (fields["topic_id"] != (-1 if topic_id is None else topic_id)) | (fields["queue_id"] != cq.queue_id) | (
        fields["queue_offset"] != offsets)
    sizes = units["size"].astype(np.int64)
    tags = units["tags"].astype(np.int64)
    expected = log.tags_codes[rows]
    wrong_size = sizes != fields["size"]
    wrong_tags = tags != expected
    for i in np.flatnonzero(~found | other | wrong_size | wrong_tags).tolist():
        if report.full:
            break
        where = f"queue {cq.topic}:{cq.queue_id} offset {first + i}"
        if not found[i]:
            report.problem(f"{where} points at {int(phys[i])}, which is not a record")
            continue
        record = fields[i]
        tag, code = int(tags[i]), int(expected[i])
        if other[i]:
            report.problem(f"{where} points at a record of {log.topic(rows[i])}:{int(record['queue_id'])} offset "
                           f"{int(record['queue_offset'])}")
        if wrong_size[i]:
            report.problem(f"{where} size {int(sizes[i])} != record size {int(record['size'])}")
        if wrong_tags[i] and cq.topic == topics.SCHEDULE_TOPIC:
            stored = int(record["store_ts"])
            report.problem(f"{where} is due {tag - stored} ms after it was stored, the delay level table in use "
                           f"says {code - stored} ms (is that the broker's table? give it with --delay-levels)")
        elif wrong_tags[i]:
            report.problem(f"{where} has tagsCode {tag}, its record gives {code}")
    return offsets[~found]


def _report_no_records(cq, first: int, phys: np.ndarray, report: CheckReport) -> None:
    for i in range(min(len(phys), MAX_PROBLEMS + 1)):
        report.problem(f"queue {cq.topic}:{cq.queue_id} offset {first + i} points at {int(phys[i])}, which is not "
                       "a record")


def _report_missing_units(cq, rows: np.ndarray, stop: int, astray: np.ndarray, log: LogRecords,
                          report: CheckReport) -> None:
    """The records of this queue at offsets no unit (pointing at a record) takes, the three
    lowest offsets; the last record of an offset stands for it."""
    offsets = log.fields["queue_offset"][rows]
    last_of_offset = np.r_[offsets[1:] != offsets[:-1], True] if len(rows) else np.zeros(0, dtype=bool)
    outside = last_of_offset & ((offsets < cq.min_offset) | (offsets >= stop))
    if len(astray):
        outside |= last_of_offset & np.isin(offsets, astray)
    for row in rows[outside][:3].tolist():
        report.problem(f"record at {int(log.fields['phys'][row])} has no unit in {cq.topic}:{cq.queue_id} "
                       f"offset {int(log.fields['queue_offset'][row])}")


# -- index -----------------------------------------------------------------------------------------
@dataclass
class IndexedKeys:
    """The keys dispatch indexes (all but rolled back records'), in commit log order: a healthy
    index holds them entry after entry, file after file."""

    log: LogRecords
    picked: np.ndarray | None  # positions in log.keys of the indexed keys; None: all of them

    @classmethod
    def of(cls, log: LogRecords) -> IndexedKeys:
        keys = log.keys
        rolled_back = (log.fields["sys_flag"][keys["record"]] & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK
        return cls(log, np.flatnonzero(~rolled_back) if rolled_back.any() else None)

    def __len__(self) -> int:
        return len(self.log.keys) if self.picked is None else len(self.picked)

    def keys(self, first: int = 0, stop: int | None = None) -> np.ndarray:
        """SCANNED_KEY rows of the indexed keys from `first` to `stop`."""
        if self.picked is None:
            return self.log.keys[first:stop]
        return self.log.keys[self.picked[first:stop]]

    def are(self, first: int, entries: np.ndarray) -> bool:
        """Whether these entries are the keys from the `first` on, in order, pointing where their records sit."""
        stop = first + len(entries)
        if stop > len(self):
            return False
        keys = self.keys(first, stop)
        return np.array_equal(entries["key_hash"], keys["hash"]) and (
            np.array_equal(entries["phys_offset"], self.log.at[keys["record"]]))


def _check_index(store, log: LogRecords, indexed: IndexedKeys, report: CheckReport) -> None:
    own_keys = None
    as_dispatched = 0  # how many keys the files hold in dispatch's order, when all do so far; -1 once one does not
    for f in store.index.files:
        report.index_entries += f.used_entries
        for first, entries in counted_entries(f, report):
            if as_dispatched >= 0 and indexed.are(as_dispatched, entries):
                as_dispatched += len(entries)
                for i in np.flatnonzero(chaining_forward(first, entries)).tolist():
                    report_forward_chain(f, first + i, int(entries["prev_index"][i]), report)
                continue
            as_dispatched = -1
            if own_keys is None:
                own_keys = np.sort((log.keys["record"].astype(np.int64) << 32) | (
                    log.keys["hash"].astype(np.int64) & LOW_32))
            _check_entries(f, first, entries, log, own_keys, store.commitlog.min_offset, report)
    if as_dispatched == len(indexed) and np.array_equal(log.fields["phys"], log.at) and _all_reachable(store):
        return  # every key has its entry, each found by a query
    _report_unfindable_keys(store, log, indexed, report)


def counted_entries(f, report: CheckReport) -> Iterator[tuple[int, np.ndarray]]:
    """The entries the file's header counts, those inside the file when it counts more, a
    window at a time: (number of its first entry, entries viewing the file). The pages of each
    window are released once the caller asks for the next."""
    room = f.entries - 1  # entry 0 is never used
    if f.used_entries > room:
        report.problem(f"index {f.path.name} counts {f.used_entries} entries, more than the {room} it has room for")
    stop = min(f.used_entries, room) + 1
    for first in range(1, stop, INDEX_WINDOW):
        yield first, f.numbered_from(first, min(first + INDEX_WINDOW, stop))
        f.file.release(0, f.file.size)


def _check_entries(f, first: int, entries: np.ndarray, log: LogRecords, own_keys: np.ndarray, min_offset: int,
                   report: CheckReport) -> None:
    phys = entries["phys_offset"].astype(np.int64)
    rows, found = log.rows_at(phys)
    not_record = ~found & (phys >= min_offset)  # below: its segment was deleted by retention
    foreign = found & ~_member(own_keys, (rows << 32) | (entries["key_hash"].astype(np.int64) & LOW_32))
    forward = found & chaining_forward(first, entries)
    for i in np.flatnonzero(not_record | foreign | forward).tolist():
        if report.full:
            return
        if not_record[i]:
            report.problem(f"index {f.path.name} entry {first + i} points at {int(phys[i])}, which is not a record")
            continue
        if foreign[i]:
            report.problem(f"index {f.path.name} entry {first + i} hash matches none of the record's keys")
        if forward[i]:
            report_forward_chain(f, first + i, int(entries["prev_index"][i]), report)


def chaining_forward(first: int, entries: np.ndarray) -> np.ndarray:
    return entries["prev_index"] >= np.arange(first, first + len(entries))


def report_forward_chain(f, number: int, prev: int, report: CheckReport) -> None:
    report.problem(f"index {f.path.name} entry {number} chains forward to {prev}")


def queried_files(store) -> Iterator:
    """The index files a query over all time reads, newest first (IndexService.query)."""
    for f in reversed(store.index.files):
        if f.time_matches(0, ANY_TIME):
            yield f
        if f.begin_timestamp < 0:
            return


def _all_reachable(store) -> bool:
    """Whether a query over all time reads every index file and finds each counted entry."""
    files = list(queried_files(store))
    if len(files) != len(store.index.files):
        return False
    return all(not unreachable_entries(f) for f in files)


def unreachable_entries(f) -> int:
    """How many of the file's counted entries a query from time 0 on does not reach: none when
    its chains are laid out as put_many builds them, else counted by walking them."""
    if f.chains_as_put(INDEX_WINDOW):
        return 0
    flags = f.reachable_flags()
    f.file.release(0, f.file.size)
    return f.used_entries - int(np.count_nonzero(flags[1 : f.used_entries + 1]))


def _report_unfindable_keys(store, log: LogRecords, indexed: IndexedKeys, report: CheckReport) -> None:
    """Records a query by one of their keys would not return."""
    stated = log.fields["phys"]
    if np.any(stated[1:] < stated[:-1]):
        stated = np.sort(stated)

    def codes(phys: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rank = np.minimum(np.searchsorted(stated, phys), max(len(stated) - 1, 0))
        known = stated[rank] == phys if len(stated) else np.zeros(len(phys), dtype=bool)
        return (rank.astype(np.int64) << 32) | (hashes.astype(np.int64) & LOW_32), known

    parts = [np.zeros(0, dtype=np.int64)]
    for f in queried_files(store):
        entries = f.entries_numbered(f.reachable())
        found, known = codes(entries["phys_offset"].astype(np.int64), entries["key_hash"])
        parts.append(found[known])
        del entries
        f.file.release(0, f.file.size)
    findable = np.sort(np.concatenate(parts))
    keys = indexed.keys()
    wanted, _ = codes(log.fields["phys"][keys["record"]], keys["hash"])
    lost = keys["record"][~_member(findable, wanted)]
    for row in lost[np.r_[True, lost[1:] != lost[:-1]]].tolist() if len(lost) else []:
        if report.full:
            return
        _report_first_lost_key(store, log, row, findable, codes, report)


def _report_first_lost_key(store, log: LogRecords, row: int, findable: np.ndarray, codes,
                           report: CheckReport) -> None:
    msg = decode_at(store, int(log.at[row]))
    for key in index_keys_of(msg):
        wanted, _ = codes(np.array([msg.phys_offset]), np.array([index_key_hash(index_key(msg.topic, key))]))
        if not _member(findable, wanted)[0]:
            report.problem(f"record at {msg.phys_offset} is not found in the index under {key!r}")
            return
