"""Java's String.hashCode and the index key hash RocketMQ derives from it."""

from __future__ import annotations

from functools import lru_cache

_MASK = 0xFFFFFFFF


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
        units = text.encode("utf-16-be", "surrogatepass")  # Java hashes lone surrogates too
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
