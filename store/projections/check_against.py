"""The store check for a store too large for one process's memory: the commit log is walked
as `check_store` walks it, but its records are let go window by window, and the consume queues
and index are compared with a rebuild of them from the same commit log (the output of
`mqlens pipeline run projections`, laid out like a store), a file or a window at a time. What
the process holds does not grow with the store.

The rebuild is what the store's own dispatch writes for its commit log, so a healthy store holds
the same units and index entries. Only what the rebuild can speak for is compared: units and
entries pointing below the commit log's first offset (their segments went to retention) and at
records after the last one the rebuild holds (written after it ran) are left out. The index
files need not start where the rebuild's do (retention deletes whole files), so entries are
matched by the record they point at and their key's hash, not by their place in a file."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.clock import SystemClock
from store.errors import StoreError
from store.format import codec, topics
from store.format.javahash import index_key_hash
from store.log.paths import StorePaths
from store.projections.check import (
    CheckReport,
    chaining_forward,
    check_commitlog,
    counted_entries,
    decode_at,
    queried_files,
    report_forward_chain,
    unreachable_entries,
)
from store.projections.consume_queue import ConsumeQueue, ConsumeQueues
from store.projections.dispatch import index_keys_of
from store.projections.index import IndexService, index_key

UNIT_ROW = np.dtype([("offset", "<i8"), ("phys", "<i8"), ("size", "<i8"), ("tags", "<i8")])
ENTRY_ROW = np.dtype([("phys", "<i8"), ("hash", "<i8"), ("file", "<i8"), ("number", "<i8")])
MATCHED = ("phys", "hash")  # what makes two index entries the same
QUEUE_WINDOW = 1 << 16  # units of a queue file compared at a time


@dataclass(frozen=True)
class Compared:
    """Which units and entries of the store the rebuild speaks for."""

    min_offset: int  # the commit log's first offset: anything below went to retention
    covered_end: int  # just past the last record the rebuild holds
    log_end: int  # the commit log's end: anything from here on points at no record

    def kept(self, phys: np.ndarray) -> np.ndarray:
        return ((phys >= self.min_offset) & (phys < self.covered_end)) | (phys >= self.log_end)


class Rebuilt:
    """A projections rebuild opened read-only with the store's geometry."""

    def __init__(self, root: Path, geometry):
        paths = StorePaths(root)
        if not paths.consumequeue.is_dir() and not paths.index.is_dir():
            raise StoreError(f"{root} holds no consumequeue or index folder: give the output folder of "
                             "`mqlens pipeline run projections` run over this store's commit log")
        self.queues = ConsumeQueues(paths, geometry.cq_file_size, writable=False)
        self.index = IndexService(paths.index, geometry.index_slots, geometry.index_entries, SystemClock(),
                                  writable=False)

    def covered_end(self) -> int:
        """Just past the last record a unit or an index entry of the rebuild points at."""
        end = 0
        for cq in self.queues:
            last = cq.get(cq.max_offset - 1)
            if last is not None and last.size != 0x7FFFFFFF:
                end = max(end, last.phys_offset + last.size)
        if self.index.files and self.index.files[-1].used_entries:
            end = max(end, self.index.files[-1].end_phys + 1)
        return end

    def close(self) -> None:
        self.queues.close()
        self.index.close()


def check_against(store, rebuilt_root: Path) -> tuple[CheckReport, Compared]:
    report = CheckReport()
    check_commitlog(store, report, keep=False)
    rebuilt = Rebuilt(rebuilt_root, store.geometry)
    try:
        log = store.commitlog
        compared = Compared(log.min_offset, rebuilt.covered_end(), log.end)
        _compare_queues(store, rebuilt, compared, report)
        _compare_index(store, rebuilt, compared, report)
        _report_unreachable(store, report)
    finally:
        rebuilt.close()
    return report, compared


# -- windows of two sorted streams -----------------------------------------------------------------
def _aligned(left: Iterable[np.ndarray], right: Iterable[np.ndarray], key: str,
             dtype: np.dtype) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Pairs of windows of two streams of arrays, each sorted by `key` (but for damage): each pair
    holds every row of both whose key is below a bound no row still to come should be under.
    Each step reads one array, from the stream that holds nothing yet or whose last key is lowest."""
    streams = [iter(left), iter(right)]
    held = [np.zeros(0, dtype=dtype), np.zeros(0, dtype=dtype)]
    going = [True, True]

    def last(side: int):
        return held[side][key][-1] if len(held[side]) else None

    while any(going):
        side = min((s for s in (0, 1) if going[s]), key=lambda s: (last(s) is not None, last(s) or 0))
        chunk = next(streams[side], None)
        if chunk is None:
            going[side] = False
        elif len(chunk):
            held[side] = np.concatenate([held[side], chunk])
        if any(going[s] and last(s) is None for s in (0, 1)):
            continue
        bounds = [last(s) for s in (0, 1) if going[s]]
        if bounds:
            yield _taken_below(held, min(bounds), key)
    yield held[0], held[1]


def _taken_below(held: list[np.ndarray], bound, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The held rows below the bound, wherever they are: a damaged file's rows need not be sorted."""
    taken = []
    for side in (0, 1):
        below = held[side][key] < bound
        taken.append(held[side][below])
        held[side] = held[side][~below]
    return taken[0], taken[1]


# -- consume queues --------------------------------------------------------------------------------
def _unit_rows(cq: ConsumeQueue | None, compared: Compared) -> Iterator[np.ndarray]:
    if cq is None:
        return
    for first, units in cq.unit_arrays():
        for at in range(0, len(units), QUEUE_WINDOW):
            part = units[at : at + QUEUE_WINDOW]
            rows = np.empty(len(part), dtype=UNIT_ROW)
            rows["offset"] = np.arange(first + at, first + at + len(part))
            rows["phys"], rows["size"], rows["tags"] = part["phys"], part["size"], part["tags"]
            yield rows[compared.kept(rows["phys"])]


def _compare_queues(store, rebuilt: Rebuilt, compared: Compared, report: CheckReport) -> None:
    names = sorted({(cq.topic, cq.queue_id) for queues in (store.queues, rebuilt.queues) for cq in queues})
    for topic, queue_id in names:
        ours, theirs = store.queues.get(topic, queue_id), rebuilt.queues.get(topic, queue_id)
        if ours is None:
            report.problem(f"records of {topic}:{queue_id} have no consume queue")
            continue
        report.queue_units += ours.max_offset - ours.min_offset
        for have, want in _aligned(_unit_rows(ours, compared), _unit_rows(theirs, compared), "offset", UNIT_ROW):
            if report.full:
                return
            if len(have) != len(want) or not np.array_equal(have, want):
                _report_units(f"{topic}:{queue_id}", have, want, compared, report)


def _report_units(queue: str, have: np.ndarray, want: np.ndarray, compared: Compared, report: CheckReport) -> None:
    _, at_have, at_want = np.intersect1d(have["offset"], want["offset"], assume_unique=True, return_indices=True)
    problems = []
    for unit, expected in zip(have[at_have], want[at_want], strict=True):
        where = f"queue {queue} offset {int(unit['offset'])}"
        if unit["phys"] != expected["phys"]:
            problems.append((int(unit["offset"]), f"{where} points at {int(unit['phys'])}, its record is at "
                                                  f"{int(expected['phys'])}"))
        elif unit["size"] != expected["size"]:
            problems.append((int(unit["offset"]), f"{where} size {int(unit['size'])} != record size "
                                                  f"{int(expected['size'])}"))
        elif unit["tags"] != expected["tags"]:
            hint = " (the rebuild used another delay level table? give the broker's with --delay-levels to both)" \
                if queue.startswith(topics.SCHEDULE_TOPIC + ":") else ""
            problems.append((int(unit["offset"]), f"{where} has tagsCode {int(unit['tags'])}, its record gives "
                                                  f"{int(expected['tags'])}{hint}"))
    for unit in np.delete(have, at_have):
        beyond = " (past the end of the commit log)" if unit["phys"] >= compared.log_end else ""
        problems.append((int(unit["offset"]), f"queue {queue} offset {int(unit['offset'])} points at "
                                              f"{int(unit['phys'])}{beyond}, which is no record of that queue offset"))
    for unit in np.delete(want, at_want):
        problems.append((int(unit["offset"]), f"record at {int(unit['phys'])} has no unit in {queue} offset "
                                              f"{int(unit['offset'])}"))
    for _, text in sorted(problems):
        report.problem(text)


# -- index -----------------------------------------------------------------------------------------
def _entry_rows(files, compared: Compared, report: CheckReport | None) -> Iterator[np.ndarray]:
    """Each file's counted entries in order, as rows naming their file and number; a store's
    (with `report`) also checked for chains pointing forward, and counted."""
    for number, f in enumerate(files):
        if report is not None:
            report.index_entries += f.used_entries
        for first, entries in counted_entries(f, report or CheckReport()):
            if report is not None:
                for i in np.flatnonzero(chaining_forward(first, entries)).tolist():
                    report_forward_chain(f, first + i, int(entries["prev_index"][i]), report)
            rows = np.empty(len(entries), dtype=ENTRY_ROW)
            rows["phys"], rows["hash"] = entries["phys_offset"], entries["key_hash"]
            rows["file"], rows["number"] = number, np.arange(first, first + len(entries))
            yield rows[compared.kept(rows["phys"])]


def _surplus(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `a` that `b` does not match (as many times as it holds them), and those of `b` that `a` does not."""
    both = np.concatenate([a[list(MATCHED)], b[list(MATCHED)]]).astype([(name, "<i8") for name in MATCHED])
    unique, inverse = np.unique(both, return_inverse=True)
    inverse = inverse.ravel()
    count_a = np.bincount(inverse[: len(a)], minlength=len(unique))
    count_b = np.bincount(inverse[len(a):], minlength=len(unique))
    return _beyond_count(a, inverse[: len(a)], count_b), _beyond_count(b, inverse[len(a):], count_a)


def _beyond_count(rows: np.ndarray, ids: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The rows whose value occurs more often among them than `allowed` says, the later ones."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.r_[0, np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1] if len(ids) else np.zeros(0, int)
    rank = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    extra = np.zeros(len(ids), dtype=bool)
    extra[order] = rank >= allowed[sorted_ids]
    return rows[extra]


def _compare_index(store, rebuilt: Rebuilt, compared: Compared, report: CheckReport) -> None:
    files = store.index.files
    windows = _aligned(_entry_rows(files, compared, report), _entry_rows(rebuilt.index.files, compared, None), "phys",
                       ENTRY_ROW)
    for have, want in windows:
        if report.full:
            return
        if len(have) == len(want) and np.array_equal(have[list(MATCHED)], want[list(MATCHED)]):
            continue
        extra, missing = _surplus(have, want)
        for entry in extra:
            _report_extra_entry(store, files[int(entry["file"])].path.name, entry, compared, report)
        for entry in missing:
            _report_missing_entry(store, entry, report)


def _report_extra_entry(store, name: str, entry, compared: Compared, report: CheckReport) -> None:
    where, phys = f"index {name} entry {int(entry['number'])}", int(entry["phys"])
    msg = None if phys >= compared.log_end else _record_at(store, phys)
    if msg is None:
        report.problem(f"{where} points at {phys}, which is not a record")
    else:
        report.problem(f"{where} hash matches none of the record's keys")


def _report_missing_entry(store, entry, report: CheckReport) -> None:
    phys = int(entry["phys"])
    msg = _record_at(store, phys)
    keys = [] if msg is None else [k for k in index_keys_of(msg)
                                   if np.int32(index_key_hash(index_key(msg.topic, k))) == np.int32(entry["hash"])]
    under = repr(keys[0]) if keys else f"the key of hash {int(entry['hash'])}"
    report.problem(f"record at {phys} is not found in the index under {under}")


def _record_at(store, phys: int) -> codec.StoredMessage | None:
    try:
        msg = decode_at(store, phys)
    except (StoreError, ValueError, IndexError, struct.error):
        return None
    return msg if msg.phys_offset == phys else None


def _report_unreachable(store, report: CheckReport) -> None:
    """Entries a query over all time would not find: in files it does not read, or off their slot's chain."""
    queried = {id(f) for f in queried_files(store)}
    for f in store.index.files:
        if report.full:
            return
        if id(f) not in queried:
            if f.used_entries:
                report.problem(f"index {f.path.name} is not read by a query over all time: its {f.used_entries} "
                               "entries are not found")
            continue
        lost = unreachable_entries(f)
        if lost > 0:
            report.problem(f"index {f.path.name}: {lost} of its {f.used_entries} entries are not found by a query")
