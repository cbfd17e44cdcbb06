"""Every fixed binary layout of the store, declared once. All integers are big-endian."""

from __future__ import annotations

import struct

MAGIC_V1 = -626843481  # 0xDAA320A7, 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB, 2-byte topic length (RocketMQ 5.1+)
MAGIC_BLANK = -875286124  # 0xCBD43194, end-of-file filler
BLANK_MIN_LENGTH = 8  # a record must leave room for a BLANK behind it

# Commit log record head, up to and including SYSFLAG and BORNTIMESTAMP, by field name.
RECORD_HEAD_FIELDS = (
    ("total_size", "i"),  # TOTALSIZE: whole record length
    ("magic", "i"),  # MAGICCODE
    ("body_crc", "i"),  # BODYCRC: crc32 of the stored body & 0x7FFFFFFF
    ("queue_id", "i"),  # QUEUEID
    ("flag", "i"),  # FLAG: producer flag, opaque
    ("queue_offset", "q"),  # QUEUEOFFSET: unit index in the consume queue
    ("phys_offset", "q"),  # PHYSICALOFFSET: commit log offset of this record
    ("sys_flag", "i"),  # SYSFLAG
    ("born_timestamp", "q"),  # BORNTIMESTAMP (ms)
)
RECORD_HEAD = struct.Struct(">" + "".join(code for _, code in RECORD_HEAD_FIELDS))
# The head fields dispatch needs: TOTALSIZE .. SYSFLAG (see RECORD_HEAD).
DISPATCH_HEAD = struct.Struct(">ii4xi4xqqi")  # total, magic, (crc), queue id, (flag), queue offset, phys, sysflag
# After the born host: STORETIMESTAMP. After the store host: the tail below.
STORE_TIMESTAMP = struct.Struct(">q")
RECORD_TAIL_FIELDS = (
    ("reconsume_times", "i"),  # RECONSUMETIMES
    ("prepared_transaction_offset", "q"),  # PREPARED TRANSACTION OFFSET
    ("body_length", "i"),  # BODY LENGTH
)
RECORD_TAIL = struct.Struct(">" + "".join(code for _, code in RECORD_TAIL_FIELDS))
BODY_LENGTH = struct.Struct(">i")  # the last field of RECORD_TAIL
HOST_V4 = struct.Struct(">4si")  # address, port
HOST_V6 = struct.Struct(">16si")  # address, port
TOPIC_LEN_V1 = struct.Struct(">b")
TOPIC_LEN_V2 = struct.Struct(">h")
PROPERTIES_LEN = struct.Struct(">h")
BLANK = struct.Struct(">ii")  # TOTALSIZE (bytes to end of file), MAGIC_BLANK
INT32 = struct.Struct(">i")

# Consume queue unit.
CQ_UNIT = struct.Struct(
    ">q"  # commit log physical offset
    "i"  # record size
    "q"  # tagsCode: tag hash, or deliver time for SCHEDULE_TOPIC_XXXX
)

# Dead-letter index unit (store.projections.dead_letters): one per dead letter, in queue order.
DEAD_LETTER_UNIT = struct.Struct(
    ">q"  # queue offset in the dead-letter queue
    "q"  # commit log physical offset
    "q"  # store timestamp (ms)
    "q"  # tagsCode: the tag's hash
    "i"  # record size
    "i"  # reason: its line number in the queue's reasons file
    "i"  # store host: its line number in the queue's hosts file
)

# Index file.
INDEX_HEADER = struct.Struct(
    ">q"  # beginTimestamp
    "q"  # endTimestamp
    "q"  # beginPhyOffset
    "q"  # endPhyOffset
    "i"  # hashSlotCount: slots taken
    "i"  # indexCount: next entry number (entry 0 unused)
)
INDEX_SLOT = struct.Struct(">i")  # newest entry number in the slot's chain, 0 = empty
INDEX_ENTRY_FIELDS = (
    ("key_hash", "i"),  # keyHash
    ("phys_offset", "q"),  # commit log physical offset
    ("time_diff", "i"),  # timeDiff in seconds from beginTimestamp
    ("prev_index", "i"),  # previous entry number in the chain
)
INDEX_ENTRY = struct.Struct(">" + "".join(code for _, code in INDEX_ENTRY_FIELDS))

# Checkpoint file: one page of big-endian longs.
CHECKPOINT_SIZE = 4096
CHECKPOINT = struct.Struct(
    ">q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
)

# Message ids.
OFFSET_ID_TAIL = struct.Struct(">iq")  # store host port, physical offset
UNIQ_KEY_TAIL = struct.Struct(">hiih")  # pid, class-loader hash, ms since month start, counter
UNIQ_KEY_FIXED = struct.Struct(">hi")  # pid, class-loader hash: fixed per process
UNIQ_KEY_VARYING = struct.Struct(">ih")  # ms since month start, counter


def record_fixed_part(born_v6: bool, store_v6: bool) -> struct.Struct:
    """RECORD_HEAD + born host + STORE_TIMESTAMP + store host + RECORD_TAIL as one struct."""
    born = HOST_V6 if born_v6 else HOST_V4
    store = HOST_V6 if store_v6 else HOST_V4
    parts = (RECORD_HEAD, born, STORE_TIMESTAMP, store, RECORD_TAIL)
    return struct.Struct(">" + "".join(p.format.lstrip(">") for p in parts))


RECORD_FIXED = {(b, s): record_fixed_part(b, s) for b in (False, True) for s in (False, True)}


def field_offset(fields: tuple[tuple[str, str], ...], name: str) -> int:
    """Byte offset of a named field within a layout declared as (name, struct code) pairs."""
    codes = ""
    for field_name, code in fields:
        if field_name == name:
            return struct.calcsize(">" + codes)
        codes += code
    raise KeyError(name)
