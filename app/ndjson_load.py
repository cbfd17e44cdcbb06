"""`mqlens store load`: messages from NDJSON lines appended in batches of what has arrived.

A reader process (app.ndjson_parse.read_in_process) reads the input in chunks of whatever the
file or pipe holds (so a slow producer on stdin is answered line by line, a file in large
batches) and parses them on the other core; this process appends each batch with one put_many
and hands its result lines, formatted in compiled code, to be written in one write (with sync
flush: once the batch is on disk)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from itertools import starmap
from json.encoder import encode_basestring_ascii as json_string

from app import ndjson_parse
from app._ndjson import result_lines as compiled_result_lines
from app.ndjson_parse import FIELDS, LoadLineError, ReaderError, parse_lines, young_garbage_only
from store.errors import InvalidMessageError
from store.format.hosts import HostAddress
from store.format.ids import create_offset_msg_id
from store.message_store import MessageStore, NewMessage, PutResult

__all__ = ["LoadLineError", "ReaderError", "load", "parse_lines", "parse_load_line", "reference_result_lines",
           "result_lines"]

if tuple(f.name for f in fields(NewMessage))[:len(FIELDS)] != FIELDS:  # messages are made from field tuples
    raise ImportError("NewMessage's fields are not in the order app.ndjson_parse.FIELDS gives")

RESULT_LINE = ('{"line": %d, "topic": %s, "queue_id": %d, "queue_offset": %d, "phys_offset": %d, '
               '"offset_msg_id": "%s%016X", "unique_key": %s, "store_timestamp": %d}')

Batch = tuple[Sequence[int], list[tuple], "str | None"]


def parse_load_line(line: bytes | str, number: int) -> NewMessage:
    """The message of one line; LoadLineError names what is wrong with it."""
    return NewMessage(*ndjson_parse.parse_load_line(line, number))


def result_lines(numbers: Sequence[int], results: list[PutResult]) -> bytes:
    """One JSON object per stored message, in order, each line ending in a newline (results
    may stop short of the numbers: at a refused message)."""
    return compiled_result_lines(numbers, results, _offset_id_prefix, json_string)


def reference_result_lines(numbers: Sequence[int], results: Sequence[PutResult]) -> bytes:
    """result_lines by RESULT_LINE, a format call per message: what the compiled lines must equal."""
    rows = zip(numbers, results, strict=False)
    return "".join(RESULT_LINE % (number, json_string(topic), queue_id, queue_offset, phys, _offset_id_prefix(host),
                                  phys, "null" if unique_key is None else json_string(unique_key), stored_at) + "\n"
                   for number, (topic, queue_id, queue_offset, phys, _, unique_key, stored_at, host) in rows).encode()


def _offset_id_prefix(host: HostAddress) -> str:
    return create_offset_msg_id(host, 0)[:-16]


def load(store: MessageStore, batches: Iterator[Batch], emit: Callable[[bytes], None]) -> int:
    """Append every batch of (line numbers, message fields, error), emitting one result line per
    message in input order. A bad line stops the load once the lines before it are stored and
    emitted. Returns the messages stored."""
    stored = 0
    with young_garbage_only():
        for numbers, fields_of, error in batches:
            messages = list(starmap(NewMessage, fields_of))
            try:
                results = store.put_many(messages) if messages else []
            except InvalidMessageError:  # one of them: store those before it, then report it
                results = []
                for number, message in zip(numbers, messages, strict=True):
                    try:
                        results.append(store.put(message))
                    except InvalidMessageError as exc:
                        emit(result_lines(numbers, results))
                        raise InvalidMessageError(f"line {number}: {exc}") from None
            emit(result_lines(numbers, results))
            stored += len(results)
            if error is not None:
                raise LoadLineError(error)
    return stored
