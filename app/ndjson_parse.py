"""Reading `mqlens store load` input: NDJSON lines to message fields, with no store import, so
that it also runs as the load's reader process (`python -m app.ndjson_parse`), parsing ahead on
the other core while the loading process appends.

A message is a tuple of NewMessage's first fields, in order (FIELDS). A line of the common shape
(`topic`, `body_base64` or `body`, and any of `tags`, `keys`, `queue_id`, `unique_key`: an
object orjson reads, with text where text is expected, a list of texts for `keys` and an
integer `queue_id`) is read in compiled code with orjson and pybase64; any other line takes
`parse_load_line`, the reference reading with the standard library, so what a line means and
the error it gets are the same either way."""

from __future__ import annotations

import base64
import contextlib
import ctypes
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

from app._ndjson import read_common, split_lines

READ_BYTES = 1 << 19
FIELDS = ("topic", "body", "tags", "keys", "properties", "queue_id", "born_timestamp", "born_host", "flag",
          "delay_level", "unique_key")
FRAME = struct.Struct("<I")  # the byte length of the marshalled batch that follows
AHEAD_FRAMES = 64  # batches the reader process holds ready beyond what the pipe holds
PIPE_BYTES = 1 << 20
GC_THRESHOLD = 200_000  # objects made (less those dropped) between two young collections
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEEP_FREED_BYTES = 256 << 20
LARGEST_HEAP_ALLOCATION = 16 << 20


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


def parse_lines(first: int, lines: list) -> tuple[Sequence[int], list[tuple], LoadLineError | None]:
    """The line numbers and messages of consecutive lines numbered from `first` (blank lines
    are skipped), and the error of the first line that is not a message (no line after it is
    read). A line of the common shape is read in compiled code (read_common), any other by
    parse_load_line."""
    messages: list[tuple] = []
    blank: list[int] = []
    same: dict = {}  # one object per topic and tags text: sent once per batch
    at, end = 0, len(lines)
    while (at := read_common(lines, at, messages, same, orjson.loads, pybase64.b64decode)) < end:
        number, line = first + at, bytes(lines[at])
        at += 1
        if not line.strip():
            blank.append(number)
            continue
        try:
            messages.append(parse_load_line(line, number))
        except LoadLineError as exc:
            return _numbers(first, number, blank), messages, exc
    return _numbers(first, first + end, blank), messages, None


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
        lines: list = []
        start = 0
        if pending:
            end = chunk.find(b"\n")
            if end < 0:
                pending += chunk
                continue
            lines.append(pending + chunk[:end])
            start = end + 1
        start += split_lines(memoryview(chunk)[start:], lines)
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


def keep_freed_memory() -> None:
    """A load allocates and frees a buffer of a megabyte or so per read, per frame and per batch
    of result lines. By default glibc maps each one afresh and unmaps it when freed (or trims
    the heap below it), so every buffer's pages are faulted in and zeroed again; keeping freed
    memory in the heap for reuse takes a fifth off the reader's time. Only on glibc; a process
    that loads and exits keeps at most KEEP_FREED_BYTES it does not use."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, LARGEST_HEAP_ALLOCATION)
        libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
    except (OSError, AttributeError):  # another C library: its defaults stay
        pass


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


class BackgroundWriter:
    """Writes to `fd` in the order given from a thread of its own (a write waits only while
    `ahead` writes are queued), so the caller goes on while the other end drains the pipe.
    A failed write (the other end stopped reading) drops the rest and is raised by the next
    `write` or by leaving the block; leaving the block first writes everything queued."""

    def __init__(self, fd: int, ahead: int = AHEAD_FRAMES) -> None:
        self._fd = fd
        self._ready: Queue = Queue(ahead)
        self._failed: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="ndjson-writer", daemon=True)

    def __enter__(self) -> BackgroundWriter:
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._ready.put(None)
        self._thread.join()
        if exc is None and self._failed is not None:
            raise self._failed

    def write(self, data: bytes) -> None:
        if self._failed is not None:
            raise self._failed
        if data:
            self._ready.put(data)

    def _run(self) -> None:
        while (data := self._ready.get()) is not None:
            if self._failed is None:
                try:
                    write_all(self._fd, data)
                except OSError as exc:
                    self._failed = exc


def write_frames(fd: int, batches: Iterator) -> bool:
    """Each batch to `fd` as a frame, written while parsing goes on (up to AHEAD_FRAMES batches
    ahead), then a frame of None that marks the input complete. False when the other end
    stopped reading (the loading process is done with the input)."""
    try:
        with BackgroundWriter(fd) as writer:
            for batch in itertools.chain(batches, [None]):
                writer.write(frame(batch))
    except OSError:
        return False
    return True


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
        keep_freed_memory()
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
