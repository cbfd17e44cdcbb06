"""A standalone reader for RocketMQ broker store files, written only from the format spec.

It shares no code with mqlens' store package (it imports nothing but the standard library) so that
tests can use it to check what the writer produced. Every function returns plain dicts and lists
and raises AssertionError with a message naming the file and position when a rule of the format
(spec sections 2, 3, 5, 6, 11 and 16) is broken.

Section numbers in comments refer to ``shared/spec/rocketmq-store-format.md``.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

# -- constants (spec 3, 5, 6, 8) -----------------------------------------------------------------

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

FLAG_COMPRESSED = 0x1
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
TRANSACTION_MASK = 0xC
TRANSACTION_PREPARED = 0x4
TRANSACTION_ROLLBACK = 0xC

NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"

CQ_UNIT_SIZE = 20
CQ_PRE_BLANK_SIZE = 0x7FFFFFFF

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20

CHECKPOINT_SIZE = 4096

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

JAVA_LONG_MAX = 2**63 - 1
JAVA_INT_MAX = 2**31 - 1
MAX_MSGS_NUM_BATCH = 64

# fixed part of a record: everything except the two hosts, body, topic and properties (spec 3.2)
RECORD_FIXED_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 2


# -- small helpers ---------------------------------------------------------------------------------

def _fail(message: str) -> None:
    raise AssertionError(message)


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the decimal offset left-padded to 20 digits (spec 2)."""
    return f"{offset:020d}"


def _is_20_digit_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


def _all_zero(data: bytes | memoryview) -> bool:
    return not any(data)


def java_string_hash(text: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed 32-bit int (spec 1)."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def index_key_hash(key: str) -> int:
    """keyHash of an index key: abs(hashCode), and 0 for Integer.MIN_VALUE (spec 6.2)."""
    h = abs(java_string_hash(key))
    return 0 if h > JAVA_INT_MAX else h


def index_key(topic: str, key: str) -> str:
    return topic + "#" + key


def hashmap_bucket(name: str, capacity: int) -> int:
    """The bucket of a key in a Java HashMap of the given table size (spec 3.4)."""
    h = java_string_hash(name) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def parse_delay_levels(text: str = DEFAULT_DELAY_LEVELS) -> dict[int, int]:
    """messageDelayLevel -> {level: delay in ms}; levels are 1-based (spec 8)."""
    table = {}
    for level, item in enumerate(text.split(" "), start=1):
        table[level] = int(item[:-1]) * _DELAY_UNITS[item[-1]]
    return table


DEFAULT_DELAY_TABLE = parse_delay_levels()


def parse_properties(text: str) -> dict[str, str]:
    """string2messageProperties: split on \\u0002, keep chunks name\\u0001value (spec 3.4)."""
    result: dict[str, str] = {}
    for chunk in text.split(PROPERTY_SEPARATOR):
        if len(chunk) < 3:
            continue
        cut = chunk.find(NAME_VALUE_SEPARATOR)
        if cut <= 0 or cut == len(chunk) - 1:
            continue
        result[chunk[:cut]] = chunk[cut + 1:]
    return result


def parse_properties_pairs(text: str) -> list[tuple[str, str]]:
    """The (name, value) pairs of a properties string in stored order, duplicates kept."""
    pairs = []
    for chunk in text.split(PROPERTY_SEPARATOR):
        cut = chunk.find(NAME_VALUE_SEPARATOR)
        if len(chunk) >= 3 and 0 < cut < len(chunk) - 1:
            pairs.append((chunk[:cut], chunk[cut + 1:]))
    return pairs


def hashmap_capacity(entries: int) -> int:
    """Table size of a Java ``new HashMap()`` after inserting ``entries`` keys (16, doubling past 0.75)."""
    capacity = 16
    while entries > capacity * 3 // 4:
        capacity *= 2
    return capacity


def check_hashmap_order(text: str, capacity: int | None = None) -> None:
    """The stored order of a properties string is a Java HashMap iteration order: buckets ascend (3.4)."""
    names = [name for name, _ in parse_properties_pairs(text)]
    if len(set(names)) != len(names):
        _fail(f"properties {text!r}: duplicate names")
    capacity = capacity or hashmap_capacity(len(names))
    buckets = [hashmap_bucket(name, capacity) for name in names]
    if buckets != sorted(buckets):
        _fail(f"properties {text!r}: names {names} are not in HashMap({capacity}) order (buckets {buckets})")


def key_tokens(keys: str | None) -> list[str]:
    """KEYS split on single spaces, empty tokens dropped (Java String.split + length check, spec 6.3)."""
    if not keys:
        return []
    return [token for token in keys.split(" ") if token]


def tags_code(topic: str, properties: dict[str, str], store_timestamp: int,
              delay_table: dict[int, int] = DEFAULT_DELAY_TABLE) -> int:
    """The ConsumeQueue tagsCode of a record (spec 5, 8)."""
    tags = properties.get("TAGS")
    code = java_string_hash(tags) if tags else 0
    if topic == SCHEDULE_TOPIC and "DELAY" in properties:
        level = int(properties["DELAY"])
        max_level = max(delay_table)
        if level > max_level:
            level = max_level
        if level > 0:
            delay = delay_table.get(level)
            code = store_timestamp + (delay if delay is not None else 1000)
    return code


def _format_host(address: bytes, port: int) -> str:
    """IPv4 as a.b.c.d:port; IPv6 as Java prints it: [8 hex groups, no zero compression]:port."""
    if len(address) == 4:
        return ".".join(str(b) for b in address) + f":{port}"
    groups = struct.unpack(">8H", address)
    return "[" + ":".join(f"{g:x}" for g in groups) + f"]:{port}"


def offset_msg_id(store_host_address: bytes, store_port: int, phys_offset: int) -> str:
    """offsetMsgId: host address + port (int) + physical offset (long), upper-case hex (spec 4.1)."""
    return (store_host_address + struct.pack(">iq", store_port, phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> dict:
    raw = bytes.fromhex(msg_id)
    address = raw[:4] if len(msg_id) == 32 else raw[:16]
    port, offset = struct.unpack(">iq", raw[len(address):len(address) + 12])
    return {"address": _format_host(address, port), "phys_offset": offset}


# -- commit log (spec 3) -----------------------------------------------------------------------------

def decode_record(buf: bytes, pos: int, file_from_offset: int = 0) -> dict:
    """Decode the message record at ``pos`` of a segment buffer; ``pos`` must hold a v1/v2 magic."""
    where = f"commitlog {offset_to_file_name(file_from_offset)} position {pos}"
    remaining = len(buf) - pos
    if remaining < 8:
        _fail(f"{where}: only {remaining} bytes left, no room for a record header")
    total_size, magic = struct.unpack_from(">iI", buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        _fail(f"{where}: unknown magic 0x{magic:08X}")
    if total_size <= 0 or total_size > remaining:
        _fail(f"{where}: total size {total_size} does not fit the {remaining} bytes left in the file")
    rec = buf[pos:pos + total_size]
    minimal = RECORD_FIXED_SIZE + 8 + 8 + (1 if magic == MAGIC_V1 else 2)
    if total_size < minimal:
        _fail(f"{where}: total size {total_size} is below the minimal record size {minimal}")
    (body_crc, queue_id, flag, queue_offset, phys_field, sys_flag,
     born_ts) = struct.unpack_from(">iiiqqiq", rec, 8)
    p = 48
    born_len = 16 if sys_flag & FLAG_BORNHOST_V6 else 4
    store_len = 16 if sys_flag & FLAG_STOREHOST_V6 else 4

    def need(n: int, what: str) -> None:
        if p + n > total_size:
            _fail(f"{where}: {what} runs past the record end (total size {total_size})")

    need(born_len + 4 + 8 + store_len + 4 + 4 + 8 + 4, "fixed header")
    born_addr = bytes(rec[p:p + born_len])
    (born_port,) = struct.unpack_from(">i", rec, p + born_len)
    p += born_len + 4
    (store_ts,) = struct.unpack_from(">q", rec, p)
    p += 8
    store_addr = bytes(rec[p:p + store_len])
    (store_port,) = struct.unpack_from(">i", rec, p + store_len)
    p += store_len + 4
    reconsume_times, prepared_offset, body_len = struct.unpack_from(">iqi", rec, p)
    p += 16
    if body_len < 0:
        _fail(f"{where}: negative body length {body_len}")
    need(body_len, "body")
    stored_body = bytes(rec[p:p + body_len])
    p += body_len
    if magic == MAGIC_V1:
        need(1, "topic length")
        (topic_len,) = struct.unpack_from(">b", rec, p)
        p += 1
    else:
        need(2, "topic length")
        (topic_len,) = struct.unpack_from(">h", rec, p)
        p += 2
    if topic_len <= 0:
        _fail(f"{where}: topic length {topic_len} is not positive")
    need(topic_len + 2, "topic")
    topic = bytes(rec[p:p + topic_len]).decode("utf-8")
    p += topic_len
    (props_len,) = struct.unpack_from(">h", rec, p)
    p += 2
    if props_len < 0:
        _fail(f"{where}: negative properties length {props_len}")
    need(props_len, "properties")
    props_text = bytes(rec[p:p + props_len]).decode("utf-8")
    p += props_len
    if p != total_size:
        _fail(f"{where}: fields end at {p} but TOTALSIZE says {total_size}")
    crc = zlib.crc32(stored_body) & 0x7FFFFFFF
    if body_crc != crc:
        _fail(f"{where}: BODYCRC {body_crc} != crc32(body) & 0x7FFFFFFF = {crc}")
    phys = file_from_offset + pos
    body = stored_body
    compression = (sys_flag >> 8) & 0x7
    if sys_flag & FLAG_COMPRESSED and compression in (0, 3):
        try:
            body = zlib.decompress(stored_body)
        except zlib.error as exc:
            _fail(f"{where}: compressed body does not inflate: {exc}")
    properties = parse_properties(props_text)
    return {
        "kind": "MESSAGE",
        "file": offset_to_file_name(file_from_offset),
        "file_position": pos,
        "phys_offset": phys,
        "total_size": total_size,
        "magic": magic,
        "body_crc": body_crc,
        "queue_id": queue_id,
        "flag": flag,
        "queue_offset": queue_offset,
        "phys_offset_field": phys_field,
        "sys_flag": sys_flag,
        "born_timestamp": born_ts,
        "born_host": _format_host(born_addr, born_port),
        "store_timestamp": store_ts,
        "store_host": _format_host(store_addr, store_port),
        "store_host_address": store_addr,
        "store_port": store_port,
        "reconsume_times": reconsume_times,
        "prepared_transaction_offset": prepared_offset,
        "body_length": body_len,
        "stored_body": stored_body,
        "body": body,
        "topic": topic,
        "properties_length": props_len,
        "properties_string": props_text,
        "properties": properties,
        "offset_msg_id": offset_msg_id(store_addr, store_port, phys),
        "uniq_key": properties.get("UNIQ_KEY"),
        "keys": properties.get("KEYS"),
        "tags_code": tags_code(topic, properties, store_ts),
    }


def _list_numeric_files(directory: Path, what: str) -> list[str]:
    names = sorted(os.listdir(directory))
    for name in names:
        if not _is_20_digit_name(name):
            _fail(f"{what}: {directory / name} is not a 20-digit offset file name")
        if not (directory / name).is_file():
            _fail(f"{what}: {directory / name} is not a regular file")
    return names


def _fixed_size_files(directory: Path, file_size: int, what: str) -> list[tuple[str, int, bytes]]:
    """(name, start offset, bytes) of each file, checking that the names are consecutive
    multiples of the file size and that every file is exactly that size (spec 2, 16)."""
    names = _list_numeric_files(directory, what)
    files = []
    for index, name in enumerate(names):
        start = int(name)
        if start % file_size:
            _fail(f"{what} {directory / name}: name is not a multiple of the file size {file_size}")
        if index and start != int(names[index - 1]) + file_size:
            _fail(f"{what} {directory / name}: does not follow {names[index - 1]} (missing file)")
        data = (directory / name).read_bytes()
        if len(data) != file_size:
            _fail(f"{what} {directory / name}: {len(data)} bytes, expected exactly {file_size}")
        files.append((name, start, data))
    return files


def read_commitlog(store_root: str | os.PathLike, file_size: int) -> dict:
    """Walk every commit log segment; returns {"files", "records", "blanks", "end_offset"}.

    Checks (spec 3.1, 3.5, 16): 20-digit names equal to k*file_size and consecutive, every file
    exactly ``file_size`` bytes, each record's PHYSICALOFFSET equals its position, CRCs, every
    record leaves at least 8 bytes in its file, a BLANK ends every file that is followed by
    another, its declared size is the rest of the file and the next file's first record would not
    have fitted, and only zeros follow a BLANK header or the last record.
    """
    directory = Path(store_root) / "commitlog"
    files = _fixed_size_files(directory, file_size, "commitlog")
    names = [name for name, _, _ in files]
    records: list[dict] = []
    blanks: list[dict] = []
    empty_files: list[str] = []
    end_offset = None
    pending_blank: dict | None = None
    for name, start, data in files:
        if end_offset is not None:
            # data ended in an earlier file: this one must be an unused pre-allocated segment
            if not _all_zero(data):
                _fail(f"commitlog {name}: holds data after the end of the log at {end_offset}")
            empty_files.append(name)
            continue
        pos = 0
        file_records: list[dict] = []
        while True:
            if file_size - pos < 8:
                _fail(f"commitlog {name} position {pos}: fewer than 8 bytes left after a record")
            size, magic = struct.unpack_from(">iI", data, pos)
            if magic == BLANK_MAGIC:
                if size != file_size - pos:
                    _fail(f"commitlog {name} position {pos}: BLANK declares {size} bytes, "
                          f"{file_size - pos} remain")
                if not _all_zero(data[pos + 8:]):
                    _fail(f"commitlog {name} position {pos}: non-zero bytes after the BLANK header")
                pending_blank = {"kind": "BLANK", "file": name, "file_position": pos,
                                 "phys_offset": start + pos, "total_size": size}
                blanks.append(pending_blank)
                break
            if size == 0 and magic == 0:
                if not _all_zero(data[pos:]):
                    _fail(f"commitlog {name} position {pos}: data ends here but the tail is not all zeros")
                if pending_blank is not None:
                    _fail(f"commitlog {name}: empty although the previous file ends with a BLANK")
                end_offset = start + pos
                if pos == 0:
                    empty_files.append(name)
                break
            if magic not in (MAGIC_V1, MAGIC_V2):
                _fail(f"commitlog {name} position {pos}: unknown magic 0x{magic:08X} (size {size})")
            rec = decode_record(data, pos, start)
            if rec["phys_offset_field"] != rec["phys_offset"]:
                _fail(f"commitlog {name} position {pos}: PHYSICALOFFSET field {rec['phys_offset_field']} "
                      f"!= position {rec['phys_offset']}")
            if rec["total_size"] + END_FILE_MIN_BLANK_LENGTH > file_size - pos:
                _fail(f"commitlog {name} position {pos}: record of {rec['total_size']} bytes leaves fewer "
                      f"than 8 bytes in the file (a BLANK should have been written)")
            if pending_blank is not None:
                if pos != 0:
                    _fail(f"commitlog {name}: first record after a BLANK is not at position 0")
                if rec["total_size"] + END_FILE_MIN_BLANK_LENGTH <= pending_blank["total_size"]:
                    _fail(f"commitlog {pending_blank['file']} position {pending_blank['file_position']}: "
                          f"BLANK of {pending_blank['total_size']} bytes although the next record "
                          f"({rec['total_size']} bytes + 8) would have fitted")
                pending_blank["next_record_size"] = rec["total_size"]
                pending_blank = None
            file_records.append(rec)
            pos += rec["total_size"]
        records.extend(file_records)
    if pending_blank is not None:
        _fail(f"commitlog {pending_blank['file']}: ends with a BLANK but no next segment holds the message")
    if end_offset is None:
        end_offset = int(names[-1]) + file_size if names else 0
    return {"files": names, "records": records, "blanks": blanks, "empty_files": empty_files,
            "end_offset": end_offset}


def read_record_at(store_root: str | os.PathLike, file_size: int, phys_offset: int) -> dict:
    """Read one record by physical offset (offsetMsgId / CQ lookup)."""
    start = phys_offset - phys_offset % file_size
    data = (Path(store_root) / "commitlog" / offset_to_file_name(start)).read_bytes()
    return decode_record(data, phys_offset - start, start)


# -- consume queues (spec 5) -------------------------------------------------------------------------

def read_consume_queue(queue_dir: str | os.PathLike, file_size: int) -> dict:
    """Read one queue directory ``consumequeue/<topic>/<queueId>``.

    Returns {"files", "min_offset", "max_offset", "units": [{queue_offset, phys_offset, size,
    tags_code}], "pre_blank": n}. File names must be the byte offset of their first unit, files
    consecutive and exactly ``file_size`` bytes; after the first zero unit only zeros may follow.
    """
    queue_dir = Path(queue_dir)
    if file_size % CQ_UNIT_SIZE:
        _fail(f"consume queue file size {file_size} is not a multiple of {CQ_UNIT_SIZE}")
    files = _fixed_size_files(queue_dir, file_size, "consumequeue")
    names = [name for name, _, _ in files]
    units: list[dict] = []
    ended_at = None
    pre_blank = 0
    first_unit = files[0][1] // CQ_UNIT_SIZE if files else 0
    for name, start, data in files:
        path = queue_dir / name
        for pos in range(0, file_size, CQ_UNIT_SIZE):
            queue_offset = (start + pos) // CQ_UNIT_SIZE
            phys, size, code = struct.unpack_from(">qiq", data, pos)
            if ended_at is not None:
                if phys or size or code:
                    _fail(f"{path} position {pos}: unit at queue offset {queue_offset} follows the zero "
                          f"unit at queue offset {ended_at} (hidden data)")
                continue
            if phys < 0 or size <= 0:
                if phys or size or code:
                    _fail(f"{path} position {pos}: invalid unit (phys {phys}, size {size}, tagsCode {code})")
                ended_at = queue_offset
                continue
            if phys == 0 and size == CQ_PRE_BLANK_SIZE and code == 0:
                if units and not units[-1].get("pre_blank"):
                    _fail(f"{path} position {pos}: pre-blank unit after real units")
                pre_blank += 1
            units.append({"queue_offset": queue_offset, "phys_offset": phys, "size": size, "tags_code": code})
    max_offset = ended_at if ended_at is not None else first_unit + len(units)
    return {"files": names, "min_offset": first_unit + pre_blank, "max_offset": max_offset,
            "units": units[pre_blank:], "pre_blank": pre_blank}


def read_consume_queues(store_root: str | os.PathLike, file_size: int) -> dict[tuple[str, int], dict]:
    """Every queue under ``consumequeue/``: {(topic, queue_id): read_consume_queue(...)}."""
    base = Path(store_root) / "consumequeue"
    result: dict[tuple[str, int], dict] = {}
    if not base.is_dir():
        return result
    for topic in sorted(os.listdir(base)):
        topic_dir = base / topic
        if not topic_dir.is_dir():
            _fail(f"consumequeue: {topic_dir} is not a directory")
        for queue in sorted(os.listdir(topic_dir)):
            if not queue.isdigit() or not (topic_dir / queue).is_dir():
                _fail(f"consumequeue: {topic_dir / queue} is not a numeric queue directory")
            result[(topic, int(queue))] = read_consume_queue(topic_dir / queue, file_size)
    return result


# -- index files (spec 6) ------------------------------------------------------------------------------

def index_file_size(slots: int, entries: int) -> int:
    return INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE


def read_index_file(path: str | os.PathLike, slots: int, entries: int) -> dict:
    """Read and check one index file.

    Checks: 17-digit name, exact size, indexCount <= entries, entry 0 and every entry from
    indexCount on are zero, hashSlotCount = occupied slots, slots point at used entries whose key
    hash falls in that slot, each slot holds the newest entry of its chain, prev pointers go
    strictly backwards and stay in the slot, every used entry is on exactly one chain, the header's
    begin/end physical offsets are those of the first/last entry and timestamps are ordered.
    """
    path = Path(path)
    name = path.name
    where = f"index {name}"
    if len(name) != 17 or not name.isdigit():
        _fail(f"{where}: name is not a 17-digit yyyyMMddHHmmssSSS time")
    data = path.read_bytes()
    expected = index_file_size(slots, entries)
    if len(data) != expected:
        _fail(f"{where}: {len(data)} bytes, expected {expected} for {slots} slots and {entries} entries")
    begin_ts, end_ts, begin_phys, end_phys, slot_count, index_count = struct.unpack_from(">qqqqii", data, 0)
    header = {"begin_timestamp": begin_ts, "end_timestamp": end_ts, "begin_phys_offset": begin_phys,
              "end_phys_offset": end_phys, "hash_slot_count": slot_count, "index_count": index_count}
    count = max(index_count, 1)
    if index_count < 0 or index_count > entries:
        _fail(f"{where}: indexCount {index_count} outside [0, {entries}]")
    slot_table = list(struct.unpack_from(f">{slots}i", data, INDEX_HEADER_SIZE))
    entry_base = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE
    if not _all_zero(data[entry_base:entry_base + INDEX_ENTRY_SIZE]):
        _fail(f"{where}: entry 0 is not all zeros (it is never used)")
    if not _all_zero(data[entry_base + count * INDEX_ENTRY_SIZE:]):
        _fail(f"{where}: entries at or after indexCount {index_count} are not all zeros")
    used: list[dict] = []
    for number in range(1, count):
        key_hash, phys, time_diff, prev = struct.unpack_from(">iqii", data, entry_base + number * INDEX_ENTRY_SIZE)
        if key_hash < 0:
            _fail(f"{where} entry {number}: negative key hash {key_hash}")
        if time_diff < 0:
            _fail(f"{where} entry {number}: negative timeDiff {time_diff}")
        if not 0 <= prev < number:
            _fail(f"{where} entry {number}: prev pointer {prev} does not go strictly backwards")
        used.append({"number": number, "key_hash": key_hash, "phys_offset": phys, "time_diff": time_diff,
                     "prev": prev, "slot": key_hash % slots})
    occupied = [s for s, value in enumerate(slot_table) if value != 0]
    if slot_count != len(occupied):
        _fail(f"{where}: hashSlotCount {slot_count} but {len(occupied)} slots are occupied")
    newest_in_slot = {entry["slot"]: entry["number"] for entry in used}
    for s, value in enumerate(slot_table):
        if value == 0 and s in newest_in_slot:
            _fail(f"{where}: slot {s} is empty but entry {newest_in_slot[s]} hashes to it")
    on_chain: dict[int, int] = {}
    chains: dict[int, list[int]] = {}
    for s in occupied:
        head = slot_table[s]
        if not 0 < head < count:
            _fail(f"{where}: slot {s} points at entry {head}, outside the used entries 1..{count - 1}")
        chain = []
        number = head
        while number:
            entry = used[number - 1]
            if entry["slot"] != s:
                _fail(f"{where}: entry {number} (key hash {entry['key_hash']}, slot {entry['slot']}) "
                      f"is on the chain of slot {s}")
            if number in on_chain:
                _fail(f"{where}: entry {number} is on two chains (slots {on_chain[number]} and {s})")
            on_chain[number] = s
            chain.append(number)
            number = entry["prev"]
        newest = newest_in_slot[s]
        if head != newest:
            _fail(f"{where}: slot {s} points at entry {head}, but entry {newest} is the newest in that slot")
        chains[s] = chain
    for entry in used:
        if entry["number"] not in on_chain:
            _fail(f"{where}: entry {entry['number']} is not reachable from its slot {entry['slot']}")
    if used:
        if begin_phys != used[0]["phys_offset"]:
            _fail(f"{where}: beginPhyOffset {begin_phys} != first entry's offset {used[0]['phys_offset']}")
        if end_phys != used[-1]["phys_offset"]:
            _fail(f"{where}: endPhyOffset {end_phys} != last entry's offset {used[-1]['phys_offset']}")
        for a, b in zip(used, used[1:], strict=False):
            if b["phys_offset"] < a["phys_offset"]:
                _fail(f"{where}: entry {b['number']} has a smaller offset than entry {a['number']}")
        expected_last = min(max((end_ts - begin_ts) // 1000, 0), JAVA_INT_MAX)
        if len(used) > 1 and used[-1]["time_diff"] != expected_last:
            _fail(f"{where}: last entry's timeDiff {used[-1]['time_diff']} does not match "
                  f"(endTimestamp - beginTimestamp) / 1000 = {expected_last}")
    return {"name": name, "path": str(path), "header": header, "slots": slot_table, "entries": used,
            "chains": chains}


def read_index_files(store_root: str | os.PathLike, slots: int, entries: int) -> list[dict]:
    """All index files, oldest first (sorted by name). Non-numeric names are skipped as RocketMQ does."""
    directory = Path(store_root) / "index"
    if not directory.is_dir():
        return []
    files = []
    for name in sorted(os.listdir(directory)):
        if not name.isdigit():
            continue
        files.append(read_index_file(directory / name, slots, entries))
    for older, newer in zip(files, files[1:], strict=False):
        if older["header"]["index_count"] < entries:
            _fail(f"index {older['name']}: not full (indexCount {older['header']['index_count']}) "
                  f"although a newer file {newer['name']} exists")
    return files


def _time_matched(header: dict, begin: int, end: int) -> bool:
    file_begin, file_end = header["begin_timestamp"], header["end_timestamp"]
    return ((begin < file_begin and end > file_end) or file_begin <= begin <= file_end
            or file_begin <= end <= file_end)


def _select_phys_offsets(index_file: dict, key_hash: int, slots: int, max_num: int, begin: int, end: int,
                         out: list[int]) -> None:
    header = index_file["header"]
    count = header["index_count"]
    slot_value = index_file["slots"][key_hash % slots]
    if slot_value <= 0 or slot_value > count or count <= 1:
        return
    entries = index_file["entries"]
    number = slot_value
    while len(out) < max_num:
        entry = entries[number - 1]
        if entry["time_diff"] < 0:
            break
        t = header["begin_timestamp"] + entry["time_diff"] * 1000
        if entry["key_hash"] == key_hash and begin <= t <= end:
            out.append(entry["phys_offset"])
        prev = entry["prev"]
        if prev <= 0 or prev > count or prev == number or t < begin:
            break
        number = prev


def query_index(index_files: list[dict], slots: int, topic: str, key: str, begin: int = 0,
                end: int = JAVA_LONG_MAX, max_num: int = MAX_MSGS_NUM_BATCH) -> list[int]:
    """IndexService.queryOffset re-executed: physical offsets of hash matches, newest file first (6.4)."""
    key_hash = index_key_hash(index_key(topic, key))
    max_num = min(max_num, MAX_MSGS_NUM_BATCH)
    found: list[int] = []
    for index_file in reversed(index_files):
        header = index_file["header"]
        if _time_matched(header, begin, end):
            _select_phys_offsets(index_file, key_hash, slots, max_num, begin, end, found)
        if header["begin_timestamp"] < begin or len(found) >= max_num:
            break
    return found


# -- checkpoint (spec 11) -----------------------------------------------------------------------------

def read_checkpoint(store_root: str | os.PathLike) -> dict:
    path = Path(store_root) / "checkpoint"
    data = path.read_bytes()
    if len(data) != CHECKPOINT_SIZE:
        _fail(f"checkpoint: {len(data)} bytes, expected {CHECKPOINT_SIZE}")
    physic, logics, index, flushed, confirm = struct.unpack_from(">5q", data, 0)
    if not _all_zero(data[40:]):
        _fail("checkpoint: bytes after offset 40 are not zero")
    return {"physic_msg_timestamp": physic, "logics_msg_timestamp": logics, "index_msg_timestamp": index,
            "master_flushed_offset": flushed, "confirm_phy_offset": confirm}


# -- whole-store cross checks ----------------------------------------------------------------------------

def is_dispatched(record: dict) -> bool:
    """Transactional PREPARED and ROLLBACK records get no consume queue unit (spec 5)."""
    return record["sys_flag"] & TRANSACTION_MASK not in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK)


def index_keys_of(record: dict) -> list[str]:
    """The index keys a record produces, in the order they are added (spec 6.3)."""
    if record["sys_flag"] & TRANSACTION_MASK == TRANSACTION_ROLLBACK:
        return []
    keys = []
    if record["uniq_key"] is not None:
        keys.append(index_key(record["topic"], record["uniq_key"]))
    keys.extend(index_key(record["topic"], token) for token in key_tokens(record["keys"]))
    return keys


def check_consume_queues_match(commitlog: dict, queues: dict[tuple[str, int], dict]) -> None:
    """Every dispatched record has exactly its unit (phys, size, tagsCode at its queue offset), every
    unit points at a record, and each queue's units are contiguous from its min offset."""
    by_phys = {r["phys_offset"]: r for r in commitlog["records"]}
    expected: dict[tuple[str, int], dict[int, dict]] = {}
    for record in commitlog["records"]:
        if not is_dispatched(record):
            continue
        slot = expected.setdefault((record["topic"], record["queue_id"]), {})
        if record["queue_offset"] in slot:
            _fail(f"records at {slot[record['queue_offset']]['phys_offset']} and {record['phys_offset']} "
                  f"share queue offset {record['queue_offset']} of {record['topic']}/{record['queue_id']}")
        slot[record["queue_offset"]] = record
    missing = sorted(set(expected) - set(queues), key=str)
    if missing:
        _fail(f"no consume queue for {missing}")
    for key, queue in queues.items():
        topic, queue_id = key
        wanted = expected.get(key, {})
        offsets = [u["queue_offset"] for u in queue["units"]]
        if offsets != list(range(queue["min_offset"], queue["min_offset"] + len(offsets))):
            _fail(f"consume queue {topic}/{queue_id}: units are not contiguous: {offsets}")
        for unit in queue["units"]:
            record = by_phys.get(unit["phys_offset"])
            where = f"consume queue {topic}/{queue_id} offset {unit['queue_offset']}"
            if record is None:
                _fail(f"{where}: points at {unit['phys_offset']}, where no record starts")
            if (record["topic"], record["queue_id"], record["queue_offset"]) != (topic, queue_id,
                                                                                 unit["queue_offset"]):
                _fail(f"{where}: points at record {record['phys_offset']} of {record['topic']}/"
                      f"{record['queue_id']} offset {record['queue_offset']}")
            if unit["size"] != record["total_size"]:
                _fail(f"{where}: size {unit['size']} != record size {record['total_size']}")
            if unit["tags_code"] != record["tags_code"]:
                _fail(f"{where}: tagsCode {unit['tags_code']} != expected {record['tags_code']}")
        have = {u["queue_offset"] for u in queue["units"]}
        lost = sorted(set(wanted) - have)
        if lost and max(lost) >= queue["min_offset"]:
            _fail(f"consume queue {topic}/{queue_id}: no unit for queue offsets {lost}")


def check_index_matches(commitlog: dict, index_files: list[dict]) -> None:
    """The index entries, file after file, are exactly the keys of the dispatched records in log order
    (hash, offset), timeDiffs follow the records' store times and headers hold the entries' times."""
    store_ts = {r["phys_offset"]: r["store_timestamp"] for r in commitlog["records"]}
    wanted = [(index_key_hash(k), r["phys_offset"], k) for r in commitlog["records"] for k in index_keys_of(r)]
    have = [(e["key_hash"], e["phys_offset"], f["name"], e["number"]) for f in index_files for e in f["entries"]]
    if len(have) != len(wanted):
        _fail(f"index: {len(have)} entries in use, but the records produce {len(wanted)} keys")
    for (key_hash, phys, key), (got_hash, got_phys, name, number) in zip(wanted, have, strict=True):
        if (key_hash, phys) != (got_hash, got_phys):
            _fail(f"index {name} entry {number}: (hash {got_hash}, offset {got_phys}) but key {key!r} of "
                  f"record {phys} expects (hash {key_hash}, offset {phys})")
    previous_end = 0
    for f in index_files:
        header = f["header"]
        if not f["entries"]:
            continue
        first, last = f["entries"][0], f["entries"][-1]
        if header["begin_timestamp"] != store_ts[first["phys_offset"]]:
            _fail(f"index {f['name']}: beginTimestamp {header['begin_timestamp']} != store time "
                  f"{store_ts[first['phys_offset']]} of the first entry's record")
        if header["end_timestamp"] != store_ts[last["phys_offset"]]:
            _fail(f"index {f['name']}: endTimestamp {header['end_timestamp']} != store time "
                  f"{store_ts[last['phys_offset']]} of the last entry's record")
        for entry in f["entries"]:
            ts = store_ts[entry["phys_offset"]]
            base = previous_end if entry["number"] == 1 else header["begin_timestamp"]
            diff = 0 if base <= 0 else min(max((ts - base) // 1000, 0), JAVA_INT_MAX)
            if entry["time_diff"] != diff:
                _fail(f"index {f['name']} entry {entry['number']}: timeDiff {entry['time_diff']}, expected "
                      f"{diff} (store time {ts}, base {base})")
        previous_end = header["end_timestamp"]


def read_store(store_root: str | os.PathLike, commitlog_file_size: int, cq_file_size: int,
               index_slots: int, index_entries: int) -> dict:
    """Read and cross-check a whole store directory; returns every part as plain data."""
    commitlog = read_commitlog(store_root, commitlog_file_size)
    queues = read_consume_queues(store_root, cq_file_size)
    index_files = read_index_files(store_root, index_slots, index_entries)
    check_consume_queues_match(commitlog, queues)
    check_index_matches(commitlog, index_files)
    return {"commitlog": commitlog, "consume_queues": queues, "index_files": index_files}
