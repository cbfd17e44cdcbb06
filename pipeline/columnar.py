"""A segment range decoded by the store's compiled code straight into Arrow batches of
ARROW_SCHEMA, with the pushed filters applied inside the scan (a row that does not match is
never built). A record the compiled decoder does not take exactly (corrupt, torn, a compressed
body to inflate, very many properties) goes through the Python walk's step, so errors, skipped
ranges and torn tails are reported as the Python reader reports them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from pipeline.records import ARROW_SCHEMA, BATCH_ROWS, RowBuilder
from pipeline.scan_filter import Range, ScanFilter
from pipeline.segments import Segment, WalkReport, first_boundary, mapped, step
from store.format import codec, topics
from store.format.layouts import BLANK
from store.format.recordio import SCAN_BLANK, SCAN_END, SCAN_SLOW, decode_columns, record_layout

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
RECORDS_PER_CALL = 4 * BATCH_ROWS  # records read per compiled call when filters keep few (progress between)

# The order of decode_columns's tables and buffers (the enums of its section in _recordio.c).
_PROPERTY_NAMES = (topics.TAGS, topics.KEYS, topics.UNIQ_KEY, topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_MESSAGE_ID,
                   topics.RESENT_FROM)
_KIND_TOPICS = (topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC, topics.RETRY_PREFIX, topics.DLQ_PREFIX,
                topics.TRACE_TOPIC, *topics.TRANSACTION_HALF_TOPICS, topics.TRANS_OP_HALF_TOPIC)
# Each copy kind's text, from the rule itself: a topic of each kind, and a resent copy.
_KINDS = (*(topics.copy_kind(t) for t in ("", topics.SCHEDULE_TOPIC, topics.RETRY_PREFIX, topics.DLQ_PREFIX,
                                          topics.TRACE_TOPIC)),
          topics.message_copy_kind("", {topics.RESENT_FROM: "-"}),
          *(topics.message_copy_kind(t, {}) for t in (topics.TRANS_HALF_TOPIC, topics.TRANS_OP_HALF_TOPIC)))
_FIXED = ("phys_offset", "size", "queue_id", "queue_offset", "flag", "sys_flag", "born_timestamp",
          "store_timestamp", "reconsume_times")
_TEXTS = ("offset_msg_id", "unique_key", "topic", "born_host", "store_host", "tags", "keys", "property_names",
          "property_values", "body", "copy_kind", "original_id")


def _utf8(values) -> tuple[bytes, ...]:
    return tuple(v.encode("utf-8", "surrogatepass") for v in values)


def _bounds(r: Range) -> tuple[int, int]:
    """The range as int64 bounds; (1, 0) when no int64 is in it."""
    low, high = max(r.low, INT64_MIN), min(r.high, INT64_MAX)
    return (1, 0) if low > high else (int(low), int(high))


@dataclass(frozen=True)
class DecodePlan:
    """What decode_columns needs besides the buffer: names, copy kinds, bodies and filters."""

    with_body: bool
    body_topics: frozenset[str]
    scan: ScanFilter

    def as_tuple(self) -> tuple:
        s = self.scan
        kind_mask = sum(1 << i for i, kind in enumerate(_KINDS) if s.copy_kinds is None or kind in s.copy_kinds)
        return (_utf8(_PROPERTY_NAMES), _utf8(_KIND_TOPICS), _utf8(_KINDS), codec.COMPRESSED_FLAG, self.with_body,
                _utf8(sorted(self.body_topics)), None if s.topics is None else _utf8(sorted(s.topics)),
                _bounds(s.store_timestamp), _bounds(s.phys_offset), _bounds(s.queue_id), kind_mask,
                None if s.tags is None else _utf8(sorted(s.tags)))


def _text_array(kind: pa.DataType, rows: int, text: tuple) -> pa.Array:
    offsets, data, validity, nulls = text
    return pa.Array.from_buffers(kind, rows, [None if validity is None else pa.py_buffer(validity),
                                              pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def to_batch(rows: int, fixed: tuple, texts: tuple, key_lists: bytes, property_maps: bytes) -> pa.RecordBatch:
    """A RecordBatch of ARROW_SCHEMA from decode_columns's buffers (wrapped, not copied)."""
    columns = {}
    for name, data in zip(_FIXED, fixed, strict=True):
        columns[name] = pa.Array.from_buffers(ARROW_SCHEMA.field(name).type, rows, [None, pa.py_buffer(data)])
    text = dict(zip(_TEXTS, texts, strict=True))
    for name in ("offset_msg_id", "unique_key", "topic", "born_host", "store_host", "tags", "copy_kind",
                 "original_id"):
        columns[name] = _text_array(pa.string(), rows, text[name])
    columns["body"] = _text_array(pa.binary(), rows, text["body"])
    keys_type, map_type = ARROW_SCHEMA.field("keys").type, ARROW_SCHEMA.field("properties").type
    key_items = _text_array(pa.string(), len(text["keys"][0]) // 4 - 1, text["keys"])
    columns["keys"] = pa.Array.from_buffers(keys_type, rows, [None, pa.py_buffer(key_lists)], children=[key_items])
    entries = len(text["property_names"][0]) // 4 - 1
    pairs = pa.StructArray.from_arrays(
        [_text_array(pa.string(), entries, text["property_names"]),
         _text_array(pa.string(), entries, text["property_values"])],
        fields=[map_type.key_field, map_type.item_field])
    columns["properties"] = pa.Array.from_buffers(map_type, rows, [None, pa.py_buffer(property_maps)],
                                                  children=[pairs])
    return pa.RecordBatch.from_arrays([columns[name] for name in ARROW_SCHEMA.names], schema=ARROW_SCHEMA)


def read_range(segment: Segment, start: int, end: int, plan: DecodePlan, *, skip_corrupt: bool, is_tail: bool,
               report: WalkReport, progress: Callable[[], None] = lambda: None) -> Iterator[pa.RecordBatch]:
    """Batches of the rows of records starting in [start, end) that pass the plan's filters, in
    order; the report as walk() would leave it. `progress` is called after each compiled run."""
    if segment.size == 0:
        return
    plan_tuple, layout = plan.as_tuple(), record_layout()
    rows = RowBuilder(plan.with_body, plan.body_topics)
    with mapped(segment) as buf:
        size = len(buf)
        stop = min(end, size)
        pos = first_boundary(buf, segment, start, stop)
        while pos is not None and pos < stop and pos + BLANK.size <= size:
            status, pos, records, kept, fixed, texts, key_lists, property_maps = decode_columns(
                buf, pos, stop, layout, segment.base, BATCH_ROWS, RECORDS_PER_CALL, plan_tuple)
            report.records += records
            progress()
            if kept:
                yield to_batch(kept, fixed, texts, key_lists, property_maps)
            if status in (SCAN_END, SCAN_BLANK):
                return
            if status == SCAN_SLOW:
                msg, pos = step(buf, segment, pos, skip_corrupt=skip_corrupt, is_tail=is_tail, report=report)
                if msg is not None and plan.scan.matches(msg):
                    yield pa.RecordBatch.from_pylist([rows.row(msg)], schema=ARROW_SCHEMA)
