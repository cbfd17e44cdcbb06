"""The properties string of a record and the order RocketMQ's broker writes it in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from store.format.javahash import java_string_hash

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767


def parse_properties(text: str) -> dict[str, str]:
    """Parse like MessageDecoder.string2messageProperties: empty names or values are dropped."""
    result: dict[str, str] = {}
    for chunk in text.split(PROPERTY_SEPARATOR):
        if len(chunk) < 3:
            continue
        sep = chunk.find(NAME_VALUE_SEPARATOR)
        if 0 < sep < len(chunk) - 1:
            result[chunk[:sep]] = chunk[sep + 1 :]
    return result


def has_trailing_separator(text: str) -> bool:
    return text.endswith(PROPERTY_SEPARATOR)


def format_properties(properties: Mapping[str, str | None], trailing_separator: bool = False) -> str:
    """Serialize in the mapping's order. RocketMQ 4.9.1-5.1.4 omit the last separator."""
    parts = [
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
        if value is not None
    ]
    text = "".join(parts)
    if not trailing_separator and text:
        text = text[:-1]
    return text


def check_property(name: str, value: str) -> None:
    for part in (name, value):
        if NAME_VALUE_SEPARATOR in part or PROPERTY_SEPARATOR in part:
            raise ValueError(f"property {name!r} contains a reserved separator character")
    if not name or not value:
        raise ValueError("property names and values must not be empty")


def _spread_hash(name: str) -> int:
    h = java_string_hash(name) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(names: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """Iteration order of a java.util.HashMap filled with `names` in this order.

    Buckets are (h ^ h>>>16) & (cap-1); resizes keep insertion order inside a bucket, so the
    final order is a stable sort of the insertion order by bucket under the final capacity.
    """
    ordered = list(dict.fromkeys(names))
    capacity = initial_capacity
    while len(ordered) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1
    return sorted(ordered, key=lambda name: _spread_hash(name) & mask)
