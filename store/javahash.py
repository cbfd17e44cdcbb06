"""Java's String.hashCode and the index key hash RocketMQ derives from it."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

_MASK = 0xFFFFFFFF
_INV31 = pow(31, -1, 1 << 32)


def _to_int32(value: int) -> int:
    value &= _MASK
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def java_string_hash(text: str) -> int:
    """String.hashCode(): h = 31*h + c over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    if text.isascii():
        for byte in text.encode("ascii"):
            h = (31 * h + byte) & _MASK
    else:
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & _MASK
    return _to_int32(h)


def index_key_hash(key: str) -> int:
    """abs(hashCode), with Integer.MIN_VALUE mapped to 0 (IndexFile.indexKeyHashMethod)."""
    h = java_string_hash(key)
    if h == -0x8000_0000:
        return 0
    return -h if h < 0 else h


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """Consume queue tagsCode of an ordinary message: hashCode of the whole TAGS string, 0 if none."""
    if not tags:
        return 0
    return java_string_hash(tags)


@lru_cache(maxsize=64)
def _powers(width: int) -> tuple[np.ndarray, np.ndarray]:
    """31**(width-1-j) for each column j, and 31**-k for each padding length k, modulo 2**32."""
    forward = np.array([pow(31, width - 1 - j, 1 << 32) for j in range(width)], dtype=np.uint32)
    inverse = np.array([pow(_INV31, k, 1 << 32) for k in range(width + 1)], dtype=np.uint32)
    return forward, inverse


def index_key_hashes(keys: list[str]) -> np.ndarray:
    """index_key_hash of many keys at once (int64 array). ASCII keys take a vectorized path:
    with keys zero-padded on the right to a common width W, the polynomial evaluates to
    hashCode * 31**(W-len), and 31 is invertible modulo 2**32."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    joined = "".join(keys)
    if not joined.isascii() or "\0" in joined:  # numpy's bytes_ would drop trailing NULs
        return np.array([index_key_hash(k) for k in keys], dtype=np.int64)
    fixed = np.array(keys, dtype=np.bytes_)
    width = max(1, fixed.dtype.itemsize)
    forward, inverse = _powers(width)
    table = fixed.view(np.uint8).reshape(len(keys), width).astype(np.uint32)
    padded = (table * forward).sum(axis=1, dtype=np.uint32)
    lengths = np.strings.str_len(fixed)
    hashes = (padded * inverse[width - lengths]).view(np.int32).astype(np.int64)
    return np.where(hashes == -(2**31), 0, np.abs(hashes))
