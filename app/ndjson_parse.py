"""Reading `mqlens store load` input: NDJSON lines to message fields, with no store import, so
that it also runs as the load's reader process (`python -m app.ndjson_parse`), parsing ahead on
the other core while the loading process appends.

A message is a tuple of NewMessage's first fields, in order (FIELDS). A line of the common shape
(`topic`, `body_base64` or `body`, and any of `tags`, `keys`, `queue_id`, `unique_key`) is read
by orjson and pybase64; any other line takes `parse_load_line`, the reference reading with the
standard library, so what a line means and the error it gets are the same either way."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import gc
import itertools
import json
import marshal
import os
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from queue import Queue

import orjson
import pybase64

READ_BYTES = 1 << 20
FIELDS = ("topic", "body", "tags", "keys", "properties", "queue_id", "born_timestamp", "born_host", "flag",
          "delay_level", "unique_key")
COMMON_KEYS = frozenset(("topic", "body_base64", "body", "tags", "keys", "queue_id", "unique_key"))
FRAME = struct.Struct("<I")  # the byte length of the marshalled batch that follows
AHEAD_FRAMES = 64  # batches the reader process holds ready beyond what the pipe holds
PIPE_BYTES = 1 << 20
GC_THRESHOLD = 200_000  # objects made (less those dropped) between two young collections


class LoadLineError(ValueError):
    """A line that is not a message; lines before it were stored."""


def parse_load_line(line: bytes | str, number: int) -> tuple:
    """The message fields of one line, by the full rule; LoadLineError names what is wrong."""
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
    return (data["topic"], body, data.get("tags"), keys, {str(k): str(v) for k, v in props.items()},
            data.get("queue_id"), data.get("born_timestamp"), data.get("born_host"), data.get("flag", 0), 0,
            unique_key)


class _Uncommon(Exception):
    """A line beyond the common shape: parse_load_line reads it."""


def parse_lines(first: int, lines: Sequence) -> tuple[Sequence[int], list[tuple], LoadLineError | None]:
    """The line numbers and messages of consecutive lines numbered from `first` (blank lines
    are skipped), and the error of the first line that is not a message (no line after it is
    read)."""
    messages: list[tuple] = []
    add = messages.append
    loads, decode, common_keys = orjson.loads, pybase64.b64decode, COMMON_KEYS
    blank: list[int] = []
    same = {}.setdefault  # one object per topic and tags text: sent once per batch
    number = first - 1
    for line in lines:
        number += 1
        try:
            data = loads(line)
            if type(data) is not dict or not data.keys() <= common_keys:
                raise _Uncommon
            topic = data["topic"]
            body = decode(data["body_base64"], validate=True) if "body_base64" in data else data["body"].encode()
            keys = data.get("keys")
            if keys is None:
                if "keys" in data:
                    raise _Uncommon
                keys = []
            elif type(keys) is not list:
                raise _Uncommon
            else:
                for key in keys:
                    if type(key) is not str:
                        raise _Uncommon
            queue_id = data.get("queue_id")
            unique_key = data.get("unique_key")
            if (type(topic) is not str or (unique_key is not None and type(unique_key) is not str)
                    or (type(queue_id) is not int and (queue_id is not None or "queue_id" in data))):
                raise _Uncommon
            tags = data.get("tags")
            if tags is not None:
                tags = same(tags, tags)
            add((same(topic, topic), body, tags, keys, {}, queue_id, None, None, 0, 0, unique_key))
        except Exception:  # a blank line, an error or an unusual line: by the full rule
            line = bytes(line)
            if not line.strip():
                blank.append(number)
                continue
            try:
                add(parse_load_line(line, number))
            except LoadLineError as exc:
                return _numbers(first, number, blank), messages, exc
    return _numbers(first, number + 1, blank), messages, None


def _numbers(first: int, stop: int, blank: list[int]) -> Sequence[int]:
    if not blank:
        return range(first, stop)
    skipped = set(blank)
    return [n for n in range(first, stop) if n not in skipped]


def line_batches(fd: int, read_bytes: int = READ_BYTES) -> Iterator[tuple[int, list]]:
    """(number of the first line, the complete lines) of what each read returned. A line is a
    view into the chunk read (no copy), or bytes where it spans two reads."""
    pending = b""
    number = 1
    while chunk := os.read(fd, read_bytes):
        find = chunk.find
        lines: list = []
        start = 0
        if pending:
            end = find(b"\n")
            if end < 0:
                pending += chunk
                continue
            lines.append(pending + chunk[:end])
            start = end + 1
        add, view = lines.append, memoryview(chunk)
        while (end := find(b"\n", start)) >= 0:
            add(view[start:end])
            start = end + 1
        pending = chunk[start:]
        if lines:
            yield number, lines
            number += len(lines)
    if pending.strip():
        yield number, [pending]


def parsed_batches(fd: int, read_bytes: int = READ_BYTES) -> Iterator[tuple[Sequence[int], list[tuple], str | None]]:
    """(line numbers, messages, error text) per read, in this process; the last batch may carry
    a LoadLineError's text, and nothing follows it."""
    for first, lines in line_batches(fd, read_bytes):
        numbers, messages, error = parse_lines(first, lines)
        yield list(numbers), messages, None if error is None else str(error)
        if error is not None:
            return


@contextlib.contextmanager
def young_garbage_only() -> Iterator[None]:
    """A load makes and drops a few objects per message, in batches, and no cycles: the
    collector leaves the objects there were before it alone and runs seldom (rather than
    every 700 objects, tracing each batch's messages several times over)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


# -- the reader process ----------------------------------------------------------------------------
def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def frame(obj) -> bytes:
    """`obj` (built-in types only) marshalled behind its length: the two ends are the same
    interpreter, and marshal is quicker than pickle both ways."""
    payload = marshal.dumps(obj)
    return FRAME.pack(len(payload)) + payload


def write_frames(fd: int, batches: Iterator) -> bool:
    """Each batch to `fd` as a frame, from a thread of its own while parsing goes on (up to
    AHEAD_FRAMES batches ahead), then a frame of None that marks the input complete. False when
    the other end stopped reading (the loading process is done with the input)."""
    ready: Queue = Queue(AHEAD_FRAMES)
    failed: list[OSError] = []

    def writer() -> None:
        while (data := ready.get()) is not None:
            if not failed:
                try:
                    write_all(fd, data)
                except OSError as exc:
                    failed.append(exc)

    thread = threading.Thread(target=writer, name="ndjson-writer", daemon=True)
    thread.start()
    try:
        for batch in itertools.chain(batches, [None]):
            ready.put(frame(batch))
            if failed:
                break
    finally:
        ready.put(None)
        thread.join()
    return not failed


class ReaderError(Exception):
    """The reader process stopped before the end of its input (it said why on standard error)."""


def read_frames(stream) -> Iterator:
    """The objects framed into `stream` (a binary file) up to the final None; ReaderError when
    the stream ends before it."""
    while header := stream.read(FRAME.size):
        if len(header) < FRAME.size:
            break
        (size,) = FRAME.unpack(header)
        payload = stream.read(size)
        if len(payload) < size:
            break
        obj = marshal.loads(payload)
        if obj is None:
            return
        yield obj
    raise ReaderError("the input reader process stopped early")


def widen_pipe(fd: int) -> None:
    """When `fd` is a pipe, make its buffer PIPE_BYTES: fewer switches between the processes at
    its two ends (anything else is left as it is)."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


@contextlib.contextmanager
def read_in_process(source: str) -> Iterator[Iterator]:
    """The parsed batches of `source` (a file name, or '-' for standard input) as a reader
    process parses them; the process is ended when the block is left."""
    package_root = str(Path(__file__).resolve().parent.parent)  # the reader runs this same code
    start = (f"import sys; sys.path.insert(0, {package_root!r}); from app.ndjson_parse import main; "
             "sys.exit(main(sys.argv[1:]))")
    reader = subprocess.Popen([sys.executable, "-c", start, source], stdout=subprocess.PIPE)
    try:
        widen_pipe(reader.stdout.fileno())
        yield read_frames(reader.stdout)
    finally:
        if reader.poll() is None:
            reader.kill()
        reader.stdout.close()
        reader.wait()


def main(argv: list[str]) -> int:
    """`python -m app.ndjson_parse FILE|-`: the parsed batches of FILE (or standard input) as
    frames on standard output."""
    try:
        fd = 0 if argv[0] == "-" else os.open(argv[0], os.O_RDONLY)
        with young_garbage_only():
            write_frames(sys.stdout.fileno(), parsed_batches(fd))  # False: the loading process stopped reading
    except OSError as exc:  # reading the input failed
        print(f"mqlens: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the loading process reports it
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
