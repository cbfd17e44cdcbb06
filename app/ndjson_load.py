"""`mqlens store load`: messages from NDJSON lines appended in batches of what has arrived.

Input is read in chunks of whatever the file or pipe holds (so a slow producer on stdin is
answered line by line, a file in large batches); each batch is appended with one put_many and
its result lines are printed afterwards (with sync flush: once the batch is on disk)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator

from store.errors import InvalidMessageError
from store.message_store import MessageStore, NewMessage, PutResult

READ_BYTES = 1 << 20


class LoadLineError(ValueError):
    """A line that is not a message; lines before it were stored."""


def parse_load_line(line: bytes | str, number: int) -> NewMessage:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise LoadLineError(f"line {number}: not JSON ({getattr(exc, 'msg', 'not UTF-8 text')})") from None
    if not isinstance(data, dict) or not isinstance(data.get("topic"), str):
        raise LoadLineError(f"line {number}: expected an object with a 'topic'")
    if "body_base64" in data:
        try:
            body = base64.b64decode(data["body_base64"], validate=True)
        except (ValueError, TypeError):
            raise LoadLineError(f"line {number}: body_base64 is not valid base64") from None
    elif isinstance(data.get("body"), str):
        try:
            body = data["body"].encode("utf-8")
        except UnicodeEncodeError:
            raise LoadLineError(f"line {number}: 'body' is not valid text (a lone surrogate)") from None
    else:
        raise LoadLineError(f"line {number}: give 'body' (text) or 'body_base64'")
    keys = data.get("keys", [])
    props = data.get("properties", {})
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise LoadLineError(f"line {number}: 'keys' must be a list of strings")
    if not isinstance(props, dict):
        raise LoadLineError(f"line {number}: 'properties' must be an object")
    unique_key = data.get("unique_key")
    if unique_key is not None and not isinstance(unique_key, str):
        raise LoadLineError(f"line {number}: 'unique_key' must be a string")
    for name in ("queue_id", "born_timestamp", "flag"):
        if name in data and (not isinstance(data[name], int) or isinstance(data[name], bool)):
            raise LoadLineError(f"line {number}: '{name}' must be an integer")
    return NewMessage(
        topic=data["topic"], body=body, tags=data.get("tags"), keys=keys,
        properties={str(k): str(v) for k, v in props.items()}, queue_id=data.get("queue_id"),
        born_timestamp=data.get("born_timestamp"), born_host=data.get("born_host"), flag=data.get("flag", 0),
        unique_key=unique_key,
    )


def line_batches(fd: int, read_bytes: int = READ_BYTES) -> Iterator[list[tuple[int, bytes]]]:
    """(line number, line) of the non-blank lines, in batches of what each read returned."""
    pending = b""
    number = 0
    while chunk := os.read(fd, read_bytes):
        *complete, pending = (pending + chunk).split(b"\n")
        batch = []
        for raw in complete:
            number += 1
            if raw.strip():
                batch.append((number, raw))
        if batch:
            yield batch
    if pending.strip():
        yield [(number + 1, pending)]


def result_line(number: int, result: PutResult) -> str:
    return json.dumps({
        "line": number, "topic": result.topic, "queue_id": result.queue_id, "queue_offset": result.queue_offset,
        "phys_offset": result.phys_offset, "offset_msg_id": result.offset_msg_id,
        "unique_key": result.unique_key, "store_timestamp": result.store_timestamp,
    })


def load(store: MessageStore, batches: Iterator[list[tuple[int, bytes]]], emit: Callable[[str], None]) -> int:
    """Append every batch, emitting one result line per message in input order. A bad line stops
    the load once the lines before it are stored and emitted. Returns the messages stored."""
    stored = 0
    for batch in batches:
        messages, bad = [], None
        for number, line in batch:
            try:
                messages.append(parse_load_line(line, number))
            except LoadLineError as exc:
                bad = exc
                break
        numbers = [number for number, _ in batch[:len(messages)]]
        try:
            results = store.put_many(messages) if messages else []
        except InvalidMessageError:  # one of them: store those before it, then report it
            results = []
            for number, message in zip(numbers, messages, strict=True):
                try:
                    results.append(store.put(message))
                except InvalidMessageError as exc:
                    _emit_all(emit, numbers, results)
                    raise InvalidMessageError(f"line {number}: {exc}") from None
        _emit_all(emit, numbers, results)
        stored += len(results)
        if bad is not None:
            raise bad
    return stored


def _emit_all(emit: Callable[[str], None], numbers: list[int], results: list[PutResult]) -> None:
    emit("\n".join(result_line(n, r) for n, r in zip(numbers, results, strict=False)))
