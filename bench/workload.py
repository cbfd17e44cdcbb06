"""The benchmark workload of docs/performance.md, generated deterministically from a seed.

Every system under test regenerates it from the same (messages, seed) pair, so each one appends
exactly the same messages: a 1 KiB random body, TAGS, KEYS of two space-separated keys (one unique
to the message, one shared by 10 messages scattered at random within a window of `key_window`
messages, or over the whole log) and a UNIQ_KEY in RocketMQ's layout (time-ordered, as a producer
makes them), over 4 queues (message i goes to queue i % 4, at queue offset i // 4).

Bodies are 1 KiB windows of a 64 MiB random pool at random offsets: random, incompressible bytes
with O(1) random access for verifying lookups, without holding a gigabyte of bodies in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from store.message_store import NewMessage

TOPIC = "BenchTopic"
QUEUES = 4
BODY_BYTES = 1024
GROUP_SIZE = 10  # messages sharing the second key
TAGS = ("TagA", "TagB", "TagC", "TagD")
POOL_BYTES = 64 << 20
DEFAULT_SEED = 20240611
DEFAULT_KEY_WINDOW = 1000

# UNIQ_KEY layout (MessageClientIDSetter): IPv4 + pid (2) + class loader hash (4) + ms since the
# start of the month (4) + counter (2), as 32 upper-case hex characters.
_UNIQ_PREFIX = bytes([127, 0, 0, 1]) + (0x1F2E).to_bytes(2, "big")
_UNIQ_MS_BASE = 86_400_000  # one day into the month
_UNIQ_PER_MS = 200  # about 200k messages/s


class Fields(NamedTuple):
    """One message, as every system stores it."""

    index: int
    queue_id: int
    queue_offset: int
    tags: str
    key: str  # unique to this message
    shared_key: str  # shared by GROUP_SIZE messages
    unique_key: str
    body: bytes


class Workload:
    def __init__(self, messages: int, seed: int = DEFAULT_SEED, key_window: int = DEFAULT_KEY_WINDOW):
        if messages <= 0 or messages % GROUP_SIZE:
            raise ValueError(f"the message count must be a positive multiple of {GROUP_SIZE}, got {messages}")
        if key_window < 0 or key_window % GROUP_SIZE:
            raise ValueError(f"the key window must be 0 or a positive multiple of {GROUP_SIZE}, got {key_window}")
        self.messages = messages
        self.seed = seed
        self.key_window = key_window if 0 < key_window < messages else 0
        rng = np.random.default_rng(seed)
        self.pool = rng.bytes(POOL_BYTES)
        self._offsets = rng.integers(0, POOL_BYTES - BODY_BYTES, size=messages, dtype=np.int64)
        self._tags = rng.integers(0, len(TAGS), size=messages, dtype=np.int8)
        # Messages are shuffled within consecutive windows of `key_window` messages (the whole log
        # when 0); runs of GROUP_SIZE in that order share a key. So a key's messages are scattered
        # over one window: temporal locality, as when one order's events arrive close together.
        shuffle = rng.random(messages)
        window = np.arange(messages, dtype=np.int64) // (self.key_window or messages)
        self._by_position = np.lexsort((shuffle, window)).astype(np.int64)
        self._position = np.argsort(self._by_position).astype(np.int64)
        self._loader = int(rng.integers(0, 2**32)).to_bytes(4, "big")

    @property
    def groups(self) -> int:
        return self.messages // GROUP_SIZE

    def fingerprint(self) -> str:
        """A digest of everything the workload is generated from, to show two runs used the same data."""
        h = hashlib.sha256()
        for part in (self.pool, self._offsets.tobytes(), self._tags.tobytes(), self._position.tobytes(),
                     self._loader, str(self.messages).encode()):
            h.update(part)
        h.update(str(self.key_window).encode())
        return h.hexdigest()[:16]

    # -- one message ---------------------------------------------------------------------------
    def unique_key(self, i: int) -> str:
        ms = _UNIQ_MS_BASE + i // _UNIQ_PER_MS
        tail = ms.to_bytes(4, "big") + (i & 0xFFFF).to_bytes(2, "big")
        return (_UNIQ_PREFIX + self._loader + tail).hex().upper()

    @staticmethod
    def key(i: int) -> str:
        return f"order-{i:010d}"

    @staticmethod
    def group_key(group: int) -> str:
        return f"customer-{group:09d}"

    def group_of(self, i: int) -> int:
        return int(self._position[i]) // GROUP_SIZE

    def group_members(self, group: int) -> list[int]:
        return sorted(self._by_position[group * GROUP_SIZE:(group + 1) * GROUP_SIZE].tolist())

    def body(self, i: int) -> bytes:
        off = int(self._offsets[i])
        return self.pool[off:off + BODY_BYTES]

    def fields(self, i: int) -> Fields:
        return self.slice(i, i + 1)[0]

    def slice(self, start: int, stop: int) -> list[Fields]:
        pool = self.pool
        offsets = self._offsets[start:stop].tolist()
        tags = self._tags[start:stop].tolist()
        groups = (self._position[start:stop] // GROUP_SIZE).tolist()
        out = []
        for n, i in enumerate(range(start, stop)):
            off = offsets[n]
            out.append(Fields(
                index=i, queue_id=i % QUEUES, queue_offset=i // QUEUES, tags=TAGS[tags[n]],
                key=self.key(i), shared_key=self.group_key(groups[n]), unique_key=self.unique_key(i),
                body=pool[off:off + BODY_BYTES],
            ))
        return out

    def batches(self, batch: int, stop: int | None = None) -> Iterator[list[Fields]]:
        stop = self.messages if stop is None else min(stop, self.messages)
        for start in range(0, stop, batch):
            yield self.slice(start, min(stop, start + batch))

    # -- samples for lookups -------------------------------------------------------------------
    def sample_indices(self, count: int, salt: int) -> list[int]:
        """`count` message indices drawn uniformly (with replacement), the same in every process."""
        rng = np.random.default_rng([self.seed, salt])
        return rng.integers(0, self.messages, size=count).tolist()

    def sample_groups(self, count: int, salt: int) -> list[int]:
        rng = np.random.default_rng([self.seed, salt])
        return rng.integers(0, self.groups, size=count).tolist()


def new_message(f: Fields) -> NewMessage:
    return NewMessage(topic=TOPIC, body=f.body, tags=f.tags, keys=[f.key, f.shared_key],
                      queue_id=f.queue_id, unique_key=f.unique_key)
