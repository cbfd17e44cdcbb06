"""The compiled record loops (store/_recordio.c) and what they need from the Python side.

The C code declares no layout of its own: `record_layout()` derives every offset it uses from
store.layouts, and the numpy dtypes here match the structs it fills."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from store.format._recordio import (
    assign_queue_offsets,
    build_items,
    content_scan,
    crc32,
    crc_walk,
    decode_columns,
    dedupe_screen,
    encode_one,
    encode_run,
    filter_add,
    filter_has,
    index_key_hash,
    index_put,
    index_reachable,
    populate,
    put_results,
    recover_walk,
    scan_records,
)
from store.format.codec import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG
from store.format.layouts import (
    BLANK_MIN_LENGTH,
    HOST_V4,
    HOST_V6,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_LEN,
    RECORD_HEAD,
    RECORD_HEAD_FIELDS,
    RECORD_TAIL,
    RECORD_TAIL_FIELDS,
    STORE_TIMESTAMP,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    field_offset,
)

__all__ = [
    "assign_queue_offsets", "build_items", "content_scan", "crc32", "crc_walk", "dedupe_screen", "encode_one",
    "encode_run", "filter_add", "filter_has", "index_key_hash", "index_put", "index_reachable", "populate",
    "put_results", "recover_walk", "scan_records", "record_layout", "SCANNED_RECORD", "SCANNED_KEY",
    "NO_DELAY_LEVEL", "SCAN_END", "SCAN_BLANK", "SCAN_SLOW", "SCAN_FULL", "WALK_END", "WALK_BLANK", "WALK_ZEROS",
    "WALK_BAD", "decode_columns",
]

SCAN_END, SCAN_BLANK, SCAN_SLOW, SCAN_FULL = 0, 1, 2, 3
WALK_END, WALK_BLANK, WALK_ZEROS, WALK_BAD = 0, 1, 2, 3  # how recover_walk stopped
NO_DELAY_LEVEL = -(2**31)

# One scanned record (ScannedRecord in _recordio.c), native byte order.
SCANNED_RECORD = np.dtype([
    ("phys", "=i8"), ("queue_offset", "=i8"), ("store_ts", "=i8"), ("size", "=i4"), ("queue_id", "=i4"),
    ("sys_flag", "=i4"), ("topic_id", "=i4"), ("tags_hash", "=i4"), ("delay_level", "=i4"),
])
# One index key of a scanned record (ScannedKey): record number in the scan, index hash of topic#key.
SCANNED_KEY = np.dtype([("record", "=i4"), ("hash", "=i4")])


@lru_cache(maxsize=1)
def record_layout() -> tuple[int, ...]:
    """The layout tuple the C functions take, in the order of their Layout struct."""
    head = [field_offset(RECORD_HEAD_FIELDS, name) for name in (
        "total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "phys_offset", "sys_flag",
        "born_timestamp")]
    tail = [field_offset(RECORD_TAIL_FIELDS, name) for name in (
        "reconsume_times", "prepared_transaction_offset", "body_length")]
    return (*head, RECORD_HEAD.size, HOST_V4.size, HOST_V6.size, STORE_TIMESTAMP.size, *tail, RECORD_TAIL.size,
            MAGIC_V1, MAGIC_V2, MAGIC_BLANK, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, TOPIC_LEN_V1.size,
            TOPIC_LEN_V2.size, PROPERTIES_LEN.size, BLANK_MIN_LENGTH)
