"""The compiled record walk of commit log recovery against the pure-Python walk it must agree
with exactly, on real segment files: clean logs, BLANK fillers, both magics, torn tails, corrupt
records in the middle, records naming another offset and arbitrary bytes in the text fields."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import CorruptRecordError
from store.format import codec
from store.format.hosts import HostAddress
from store.format.layouts import BLANK, MAGIC_V1, MAGIC_V2
from store.format.recordio import WALK_BAD, WALK_END, WALK_ZEROS, record_layout, recover_walk
from store.log import tail_walk
from store.log.commitlog import CommitLog
from store.log.paths import offset_to_name
from store.log.tail_walk import WalkEnd, walk_compiled, walk_reference
from tests.store.test_roundtrips import stored_messages

FILE_SIZE = 2048
HOST = HostAddress.parse("10.0.0.7:10911")


def record(phys: int, *, topic: bytes = b"TopicA", props: bytes = b"KEYS\x01k\x02", body: bytes = b"body",
           magic: int = MAGIC_V1) -> bytes:
    return codec.encode_fields(1, 0, 7, phys, 0, 1_700_000_000_000, HOST, 1_700_000_000_001, HOST, 0, 0, body,
                               topic, props, magic)


def lay_out(records: list, file_size: int = FILE_SIZE) -> tuple[bytearray, list[int]]:
    """The log bytes of `records` (each a function of its offset giving its bytes), BLANK fillers
    where one does not fit, and where each record starts."""
    log, starts = bytearray(), []
    for make in records:
        data = make(len(log))
        pos = len(log) % file_size
        if pos and pos + len(data) + BLANK.size > file_size:
            log += codec.encode_blank(file_size - pos).ljust(file_size - pos, b"\0")
            data = make(len(log))
        assert len(data) + BLANK.size <= file_size
        starts.append(len(log))
        log += data
    return log, starts


def write_log(directory: Path, log: bytes, file_size: int = FILE_SIZE, extra_segments: int = 0) -> CommitLog:
    directory.mkdir(parents=True, exist_ok=True)
    count = -(-len(log) // file_size) + extra_segments
    for i in range(max(count, 1)):
        piece = log[i * file_size : (i + 1) * file_size]
        (directory / offset_to_name(i * file_size)).write_bytes(piece.ljust(file_size, b"\0"))
    return CommitLog(directory, file_size, writable=False)


def outcome(log: CommitLog, start: int | None, compiled: bool):
    try:
        return log.recover(start, count_tail=True, compiled=compiled)
    except CorruptRecordError as exc:
        return str(exc)


def compiled_alone(log: CommitLog, phys: int) -> WalkEnd:
    """walk_compiled without the Python decoder's second look: the compiled check must be exact,
    not only safe, or records it refuses cost a Python decode each."""
    while (seg := log._segment_for(phys)) is not None:
        base = phys - phys % log.file_size
        status, pos = recover_walk(seg.buf, phys - base, base, record_layout())
        phys = base + pos
        if status in (WALK_ZEROS, WALK_BAD):
            return WalkEnd(phys, status == WALK_BAD)
        phys = base + log.file_size
    return WalkEnd(phys, False)


def assert_walks_agree(log: CommitLog, starts: list[int]) -> WalkEnd:
    for start in {0, *starts[-3:]}:
        reference = walk_reference(log._segment_for, log.file_size, start)
        assert walk_compiled(log._segment_for, log.file_size, start) == reference, start
        assert compiled_alone(log, start) == reference, start
    for start in (None, 0):
        assert outcome(log, start, True) == outcome(log, start, False)
    return walk_reference(log._segment_for, log.file_size, 0)


def walked(tmp_path: Path, log: bytes, starts: list[int], **kwargs) -> WalkEnd:
    commitlog = write_log(tmp_path / "commitlog", log, **kwargs)
    try:
        return assert_walks_agree(commitlog, starts)
    finally:
        commitlog.close()


def test_clean_log_across_segments_with_fillers_and_both_magics(tmp_path):
    makes = [lambda p, i=i: record(p, body=b"x" * (50 + 37 * i), magic=(MAGIC_V1, MAGIC_V2)[i % 2])
             for i in range(40)]
    log, starts = lay_out(makes)
    assert len(log) > 5 * FILE_SIZE
    assert walked(tmp_path, log, starts) == WalkEnd(len(log), False)


def test_empty_log_and_trailing_empty_segments(tmp_path):
    assert walked(tmp_path / "a", b"", [0]) == WalkEnd(0, False)
    log, starts = lay_out([lambda p: record(p)] * 3)
    assert walked(tmp_path / "b", log, starts, extra_segments=4) == WalkEnd(len(log), False)


def test_torn_last_record_cut_at_every_byte(tmp_path):
    log, starts = lay_out([lambda p, i=i: record(p, body=bytes([i]) * 90) for i in range(30)])
    last = starts[-1]
    for cut in range(last, len(log)):
        torn = log[:cut] + bytes(len(log) - cut)
        # zeroed properties still decode (the CRC covers the body only): the record then stays
        assert walked(tmp_path / str(cut), torn, starts).end in (last, len(log)), cut


def test_every_byte_of_the_last_record_flipped(tmp_path):
    log, starts = lay_out([lambda p, i=i: record(p, body=bytes([i]) * 40) for i in range(12)])
    last = starts[-1]
    for at in range(last, len(log)):
        damaged = bytearray(log)
        damaged[at] ^= 0x21
        walked(tmp_path / str(at), bytes(damaged), starts)


def test_corrupt_record_in_the_middle_raises_in_both(tmp_path):
    log, starts = lay_out([lambda p, i=i: record(p, body=bytes([65 + i]) * 300) for i in range(20)])
    damaged = bytearray(log)
    damaged[starts[9] + 100] ^= 0xFF  # a byte of its body: the CRC no longer matches
    commitlog = write_log(tmp_path / "commitlog", bytes(damaged))
    try:
        message = outcome(commitlog, 0, True)
        assert message == outcome(commitlog, 0, False)
        assert isinstance(message, str) and "body CRC mismatch" in message and "valid records follow" in message
    finally:
        commitlog.close()


def test_record_naming_another_offset_stops_both(tmp_path):
    log, starts = lay_out([lambda p: record(p)] * 6 + [lambda p: record(p + 1)])
    assert walked(tmp_path, log, starts) == WalkEnd(starts[-1], True)


def test_text_fields_in_utf8_pass_and_broken_utf8_stops(tmp_path):
    good = [lambda p: record(p, topic="主题".encode(), props="KEYS\x01ключ\x02".encode(), magic=MAGIC_V2),
            lambda p: record(p, props="TAGS\x01\U0001f600\x02".encode())]
    log, starts = lay_out(good)
    assert walked(tmp_path / "good", log, starts) == WalkEnd(len(log), False)
    for n, text in enumerate([b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xff"]):
        log, starts = lay_out([lambda p: record(p), lambda p, t=text: record(p, props=b"KEYS\x01" + t)])
        assert walked(tmp_path / f"bad{n}", log, starts) == WalkEnd(starts[-1], True)


def test_record_ending_within_a_blank_of_the_segment_end(tmp_path):
    """No BLANK fits behind it: both walks go on in the next segment."""
    overhead = len(record(0, body=b""))
    body = b"y" * (FILE_SIZE - overhead - 3)
    log = bytearray(record(0, body=body))
    assert FILE_SIZE - len(log) < BLANK.size
    log = log.ljust(FILE_SIZE, b"\0") + record(FILE_SIZE)
    assert walked(tmp_path, bytes(log), [0, FILE_SIZE]) == WalkEnd(len(log), False)


damage = st.one_of(
    st.tuples(st.just("none"), st.just(0.0), st.just(b"")),
    st.tuples(st.just("torn"), st.floats(0, 1), st.just(b"")),
    st.tuples(st.just("overwrite"), st.floats(0, 1), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("zeros"), st.floats(0, 1), st.binary(min_size=1, max_size=64).map(bytes)),
)


@settings(max_examples=250, deadline=None)
@given(messages=st.lists(stored_messages(), min_size=1, max_size=8), misplaced=st.sets(st.integers(0, 7)),
       harm=damage, file_size=st.sampled_from([1024, 2048, 4096]))
def test_generated_logs_walk_alike(messages, misplaced, harm, file_size):
    makes = []
    for i, msg in enumerate(messages):
        def make(phys, msg=msg, shift=int(i in misplaced)):
            msg.phys_offset = phys + shift
            return codec.encode(msg)
        if len(make(0)) + BLANK.size <= file_size:
            makes.append(make)
    log, starts = lay_out(makes, file_size)
    kind, where, data = harm
    at = int(where * len(log))
    if kind == "torn":
        log[at:] = bytes(len(log) - at)
    elif kind == "overwrite":
        log[at : at + len(data)] = data
    elif kind == "zeros":
        log[at : at + len(data)] = bytes(len(data))
    with tempfile.TemporaryDirectory() as directory:
        commitlog = write_log(Path(directory) / "commitlog", bytes(log), file_size)
        try:
            assert_walks_agree(commitlog, starts)
        finally:
            commitlog.close()


@pytest.mark.parametrize("start", [0, 1, FILE_SIZE - 3])
def test_walk_from_inside_a_record_or_the_segment_end(tmp_path, start):
    log, starts = lay_out([lambda p: record(p, body=b"z" * 500)] * 8)
    commitlog = write_log(tmp_path / "commitlog", log)
    try:
        reference = walk_reference(commitlog._segment_for, FILE_SIZE, start)
        assert walk_compiled(commitlog._segment_for, FILE_SIZE, start) == reference
        assert compiled_alone(commitlog, start) == reference
    finally:
        commitlog.close()


@settings(max_examples=400, deadline=None)
@given(topic=st.binary(min_size=1, max_size=20), props=st.binary(max_size=40))
def test_arbitrary_bytes_in_topic_and_properties(topic, props):
    """The compiled UTF-8 check accepts exactly what the Python decoder does."""
    log = bytearray(record(0, topic=topic, props=props, magic=MAGIC_V2))
    with tempfile.TemporaryDirectory() as directory:
        commitlog = write_log(Path(directory) / "commitlog", bytes(log))
        try:
            assert_walks_agree(commitlog, [0])
        finally:
            commitlog.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="outside"):
        recover_walk(bytes(64), 65, 0, record_layout())
    with pytest.raises(ValueError, match="outside"):
        recover_walk(bytes(64), -1, 0, record_layout())
    with pytest.raises(TypeError):
        recover_walk(bytes(64), 0, 0, (1, 2))
    assert recover_walk(bytes(64), 60, 0, record_layout()) == (WALK_END, 60)


@pytest.mark.parametrize("window", [8, 97, 1000])
def test_walks_in_small_windows_agree(tmp_path, monkeypatch, window):
    """The compiled walk goes a window at a time (releasing what it read): a record cut by a
    window's end, or a window ending within a BLANK's bytes, is walked on, not taken for an end."""
    monkeypatch.setattr(tail_walk, "WALK_WINDOW", window)
    makes = [lambda p, i=i: record(p, body=b"x" * (50 + 37 * i), magic=(MAGIC_V1, MAGIC_V2)[i % 2])
             for i in range(40)]
    log, starts = lay_out(makes)
    assert walked(tmp_path, log, starts) == WalkEnd(len(log), False)
    flipped = bytearray(log)
    flipped[starts[-2] + 30] ^= 0xFF  # a torn tail in the last segment
    assert walked(tmp_path / "torn", bytes(flipped), starts).end == starts[-2]
