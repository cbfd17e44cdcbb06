"""What the store's dispatch makes of each commit log record, computed on Arrow batches of the
data source with the store's own rules: whether the record gets a consume queue unit and its
tagsCode (store.dispatch.tags_code_of), and the hashes of its index keys in the order the
dispatch puts them (store.dispatch.index_keys_of, store.index.index_key, store.javahash)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK, DispatchView
from store.format.delay_levels import DelayLevels
from store.format.javahash import index_key_hash
from store.projections.dispatch import index_keys_of, tags_code_of
from store.projections.index import index_key

# The data source's columns a projection reads (pipeline.records.SCHEMA_DDL).
SOURCE_COLUMNS = ("phys_offset", "size", "topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp",
                  "properties")
PASSED_THROUGH = ("phys_offset", "size", "topic", "queue_id", "queue_offset", "store_timestamp")

# One row per record. tags_code is null for a record that gets no queue unit; key_hashes is empty
# for a record the index leaves out.
PROJECTED_DDL = (
    "phys_offset BIGINT, size INT, topic STRING, queue_id INT, queue_offset BIGINT, store_timestamp BIGINT, "
    "in_queue BOOLEAN, tags_code BIGINT, key_hashes ARRAY<INT>"
)
PROJECTED_SCHEMA = pa.schema([
    ("phys_offset", pa.int64()), ("size", pa.int32()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("store_timestamp", pa.int64()), ("in_queue", pa.bool_()),
    ("tags_code", pa.int64()), ("key_hashes", pa.list_(pa.int32())),
])


def goes_to_queue(sys_flags: np.ndarray) -> np.ndarray:
    """Dispatch writes a consume queue unit for every record but transaction halves and rollbacks."""
    kind = sys_flags & TRANSACTION_TYPE_MASK
    return (kind != TRANSACTION_PREPARED) & (kind != TRANSACTION_ROLLBACK)


def goes_to_index(sys_flags: np.ndarray) -> np.ndarray:
    """Dispatch indexes the keys of every record but transaction rollbacks."""
    return (sys_flags & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK


def project_batch(batch: pa.RecordBatch, delay_levels: DelayLevels) -> pa.RecordBatch:
    sys_flags = batch.column("sys_flag").to_numpy(zero_copy_only=False)
    in_queue = goes_to_queue(sys_flags)
    indexed = goes_to_index(sys_flags)
    columns = {name: batch.column(name).to_pylist() for name in SOURCE_COLUMNS if name != "sys_flag"}
    tags_codes: list[int | None] = []
    key_hashes: list[list[int]] = []
    for i, properties in enumerate(columns["properties"]):
        view = DispatchView(columns["size"][i], columns["queue_id"][i], columns["queue_offset"][i],
                            columns["phys_offset"][i], int(sys_flags[i]), columns["store_timestamp"][i],
                            columns["topic"][i], dict(properties))
        tags_codes.append(tags_code_of(view, delay_levels) if in_queue[i] else None)
        key_hashes.append([index_key_hash(index_key(view.topic, key)) for key in index_keys_of(view)]
                          if indexed[i] else [])
    arrays = [batch.column(name) for name in PASSED_THROUGH]
    arrays += [pa.array(in_queue, pa.bool_()), pa.array(tags_codes, pa.int64()),
               pa.array(key_hashes, pa.list_(pa.int32()))]
    return pa.RecordBatch.from_arrays(arrays, schema=PROJECTED_SCHEMA)


def project(batches: Iterator[pa.RecordBatch], delay_levels: DelayLevels) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: data source batches (SOURCE_COLUMNS) to PROJECTED_SCHEMA batches."""
    for batch in batches:
        if batch.num_rows:
            yield project_batch(batch, delay_levels)
