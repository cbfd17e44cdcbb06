"""`mqlens store load`: batches of what has arrived, one result line per message, no trace
records unless asked."""

from __future__ import annotations

import base64
import io
import json
import os
import select
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app import ndjson_load, ndjson_parse
from store.engine.results import PutResult
from store.errors import InvalidMessageError
from store.format.hosts import HostAddress
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore
from tests.conftest import GOLDEN_GEOMETRY_FLAGS
from tests.store.helpers import small_config


def _lines(count: int, start: int = 0) -> list[str]:
    return [json.dumps({"topic": "LoadT", "body": f"body {i}", "tags": "T", "keys": [f"k-{i}"]})
            for i in range(start, start + count)]


def _load(tmp_path, text: str, *extra: str) -> tuple[int, list[dict], str]:
    source = tmp_path / "in.ndjson"
    source.write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", "store", "load",
         "--store", str(tmp_path / "s"), str(source), *GOLDEN_GEOMETRY_FLAGS, *extra],
        capture_output=True, text=True, timeout=120)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def _records(store_dir) -> list:
    with MessageStore.open(store_dir, small_config(), read_only=True) as store:
        found, phys = [], store.commitlog.min_offset
        while phys < store.commitlog.end:
            try:
                msg = store.read(phys)
            except Exception:  # the end-of-segment filler
                phys += store.geometry.commitlog_file_size - phys % store.geometry.commitlog_file_size
                continue
            found.append(msg)
            phys += msg.size
        return found


def test_three_thousand_messages_make_three_thousand_records(tmp_path):
    code, results, _ = _load(tmp_path, "\n".join(_lines(3000)) + "\n")
    assert code == 0
    assert [r["line"] for r in results] == list(range(1, 3001))
    records = _records(tmp_path / "s")
    assert len(records) == 3000
    assert {m.topic for m in records} == {"LoadT"}
    assert [m.phys_offset for m in records] == [r["phys_offset"] for r in results]


def test_trace_only_when_asked(tmp_path):
    code, results, _ = _load(tmp_path, "\n".join(_lines(20)), "--trace")  # no newline after the last line
    assert code == 0 and len(results) == 20
    assert {m.topic for m in _records(tmp_path / "s")} > {"LoadT"}


def test_blank_lines_keep_their_numbers_and_a_bad_line_stops_after_the_good_ones(tmp_path):
    lines = _lines(3) + ["", *_lines(2, 3), "{not json", *_lines(2, 5)]
    code, results, err = _load(tmp_path, "\n".join(lines) + "\n")
    assert code != 0 and "line 7: not JSON" in err
    assert [r["line"] for r in results] == [1, 2, 3, 5, 6]
    assert len(_records(tmp_path / "s")) == 5


def test_a_message_the_store_refuses_stops_after_those_before_it(tmp_path):
    lines = _lines(4) + [json.dumps({"topic": "LoadT", "body": "x", "keys": ["has space"]}), *_lines(3, 4)]
    code, results, err = _load(tmp_path, "\n".join(lines) + "\n")
    assert code != 0 and "line 5: invalid key" in err
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert len(_records(tmp_path / "s")) == 4


def test_batches_are_what_each_read_returned(tmp_path):
    r, w = os.pipe()
    os.write(w, b'{"a": 1}\n{"b"')
    batches = ndjson_parse.line_batches(r, read_bytes=64)
    assert next(batches) == (1, [b'{"a": 1}'])
    os.write(w, b': 2}\n\n{"c": 3}')
    os.close(w)
    assert next(batches) == (2, [b'{"b": 2}', b""])  # (number of the first line, the lines)
    assert next(batches) == (4, [b'{"c": 3}'])
    assert next(batches, None) is None
    os.close(r)


def test_a_line_longer_than_a_read_is_whole():
    r, w = os.pipe()
    long_line = b'{"topic": "T", "body": "' + b"x" * 300 + b'"}'
    os.write(w, long_line + b"\n" + long_line[:10])
    os.write(w, long_line[10:] + b"\n")
    os.close(w)
    assert list(ndjson_parse.line_batches(r, read_bytes=64)) == [(1, [long_line]), (2, [long_line])]
    os.close(r)


@pytest.mark.parametrize("line, fragment", [
    (b"\xff\xfe", "not JSON"),
    (b'{"topic": "T", "body": "\\ud800"}', "not valid text"),
    (b'{"topic": "T"}', "give 'body'"),
    (b'[1]', "expected an object"),
])
def test_bad_lines_are_named(line, fragment):
    with pytest.raises(ndjson_load.LoadLineError, match=fragment):
        ndjson_load.parse_load_line(line, 7)


def test_load_reports_the_refused_line_number(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config()) as store:
        batch = ndjson_load.parse_lines(1, [b'{"topic": "T", "body": "a"}',
                                            b'{"topic": "T", "body": "b", "keys": ["a b"]}'])
        emitted = []
        with pytest.raises(InvalidMessageError, match="line 2"):
            ndjson_load.load(store, iter([batch]), emitted.append)
        assert [json.loads(line)["line"] for text in emitted for line in text.splitlines()] == [1]


def test_a_given_unique_key_is_kept_and_a_repeat_is_not_stored_twice(tmp_path):
    line = json.dumps({"topic": "LoadT", "body": "once", "unique_key": "7F0000011F2E000000000000000000AB"})
    code, results, _ = _load(tmp_path, f"{line}\n{line}\n")
    assert code == 0
    assert [r["unique_key"] for r in results] == ["7F0000011F2E000000000000000000AB"] * 2
    assert results[0]["phys_offset"] == results[1]["phys_offset"]
    assert len(_records(tmp_path / "s")) == 1
    with pytest.raises(ndjson_load.LoadLineError, match="'unique_key' must be a string"):
        ndjson_load.parse_load_line(b'{"topic": "T", "body": "x", "unique_key": 5}', 1)


AWKWARD_LINES = [
    b'{"topic": "T", "body_base64": "aGVsbG8=", "tags": "A", "keys": ["k1", "k2"], "queue_id": 1, "unique_key": "u"}',
    b'{"topic": "T", "body": "caf\\u00e9", "keys": []}',
    b'{"topic": "T\\u00e9", "body": "x", "tags": null, "unique_key": null, "queue_id": null}',
    b'{"topic": "T", "body": "x", "keys": null}',
    b'{"topic": "T", "body": "x", "keys": "k"}',
    b'{"topic": "T", "body": "x", "keys": ["a", 1]}',
    b'{"topic": "T", "body": "x", "queue_id": true}',
    b'{"topic": "T", "body": "x", "queue_id": 123456789012345678901234567890}',
    b'{"topic": "T", "body": "x", "tags": ["not", "text"]}',
    b'{"topic": "T", "body_base64": null, "body": "x"}',
    b'{"topic": "T", "body_base64": "QUAZ="}',
    b'{"topic": "T", "body_base64": "QUA"}',
    b'{"topic": "T", "body_base64": "QU\\nA="}',
    b'{"topic": "T", "body_base64": "w6k="}',
    b'{"topic": "T", "body": "x", "properties": {"a": 1, "b": 1e400}, "flag": 3, "born_timestamp": 5}',
    b'{"topic": "T", "body": "x", "born_host": "10.0.0.1:9"}',
    b'{"topic": "T", "body": "\\ud800"}',
    b'{"topic": 5, "body": "x"}',
    b'{"topic": "T", "body": 5}',
    b'{"topic": "T", "body": "x", "unique_key": 5}',
    b'{"topic": "T", "body": "x"} trailing',
    b'{"topic": "T", "body": "x", "a": NaN}',
    b'["topic"]',
    b'\xff',
    b'{"topic": "T", "body": "x"}\r',
]


@pytest.mark.parametrize("line", AWKWARD_LINES)
def test_the_fast_reading_means_what_the_reference_reading_means(line):
    """parse_lines reads the common shape itself and everything else by parse_load_line: the
    message, or the error, is the same either way."""
    try:
        expected = ndjson_parse.parse_load_line(line, 3)
    except ndjson_parse.LoadLineError as exc:
        expected = str(exc)
    numbers, messages, error = ndjson_parse.parse_lines(3, [line])
    got = str(error) if error is not None else messages[0]
    assert got == expected
    assert list(numbers) == ([] if error is not None else [3])


def test_a_batch_that_mixes_shapes_reads_each_line_as_the_reference_does():
    """The compiled reading hands each line it cannot read to the reference and picks up after it."""
    common = b'{"topic": "T", "body": "c", "keys": ["k"], "tags": "A"}'
    lines = [common]
    for line in AWKWARD_LINES:
        lines += [line, common, common]
    readable = [line for line in lines if not _refused(line)]
    numbers, messages, error = ndjson_parse.parse_lines(10, readable)
    assert error is None and list(numbers) == list(range(10, 10 + len(readable)))
    assert messages == [ndjson_parse.parse_load_line(line, 1) for line in readable]
    assert len({id(m[2]) for m in messages if m[2] == "A"}) == 1  # one tags object per batch


def _refused(line: bytes) -> bool:
    try:
        ndjson_parse.parse_load_line(line, 1)
    except ndjson_parse.LoadLineError:
        return True
    return False


def test_blank_lines_are_skipped_and_numbered_in_a_parsed_batch():
    line = b'{"topic": "T", "body": "x"}'
    numbers, messages, error = ndjson_parse.parse_lines(10, [line, b"", b"  \t", line, b"{", line])
    assert list(numbers) == [10, 13] and len(messages) == 2
    assert str(error).startswith("line 14: not JSON")


def test_frames_end_with_a_mark_and_a_cut_stream_is_an_error():
    r, w = os.pipe()
    batch = ([1], [("T", b"x", None, [], {}, None, None, None, 0, 0, None)], None)
    ndjson_parse.write_frames(w, iter([batch]))
    os.close(w)
    with os.fdopen(r, "rb") as stream:
        data = stream.read()
    assert list(ndjson_parse.read_frames(io.BytesIO(data))) == [batch]
    for cut in (3, len(data) - 3):  # in a header, in the final mark
        with pytest.raises(ndjson_parse.ReaderError):
            list(ndjson_parse.read_frames(io.BytesIO(data[:cut])))


def test_a_pipe_fed_line_by_line_is_answered_line_by_line(tmp_path):
    """Each line's result comes back before the next line is written."""
    load = subprocess.Popen(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", "store", "load",
         "--store", str(tmp_path / "s"), "-", *GOLDEN_GEOMETRY_FLAGS, "--flush", "sync"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for number, line in enumerate(_lines(5), start=1):
            load.stdin.write(line.encode() + b"\n")
            load.stdin.flush()
            ready, _, _ = select.select([load.stdout], [], [], 60)
            assert ready, f"no result for line {number} while the input stays open"
            assert json.loads(load.stdout.readline())["line"] == number
        load.stdin.close()
        assert load.wait(timeout=60) == 0 and load.stdout.read() == b""
    finally:
        if load.poll() is None:
            load.kill()
        load.wait()
    assert len(_records(tmp_path / "s")) == 5


def test_the_body_comes_back_as_it_was_given(tmp_path):
    body = bytes(range(256)) * 5
    line = json.dumps({"topic": "LoadT", "body_base64": base64.b64encode(body).decode(), "keys": ["k"],
                       "unique_key": "7F0000011F2E0000000000000000ABCD", "queue_id": 2})
    code, results, _ = _load(tmp_path, line + "\n")
    assert code == 0 and results[0]["queue_id"] == 2
    [record] = _records(tmp_path / "s")
    assert record.body == body and record.keys == ["k"] and record.unique_key == "7F0000011F2E0000000000000000ABCD"
    assert results[0]["offset_msg_id"] == record.offset_msg_id and results[0]["phys_offset"] == record.phys_offset


def test_only_a_pipe_is_widened(tmp_path):
    import fcntl

    read_end, write_end = os.pipe()
    try:
        ndjson_parse.widen_pipe(write_end)
        assert fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) >= min(ndjson_parse.PIPE_BYTES, _pipe_max())
    finally:
        os.close(read_end)
        os.close(write_end)
    with open(tmp_path / "out", "wb") as f:
        ndjson_parse.widen_pipe(f.fileno())  # a file is left alone, without an error
        f.write(b"ok")
    assert (tmp_path / "out").read_bytes() == b"ok"


def _pipe_max() -> int:
    with open("/proc/sys/fs/pipe-max-size") as f:
        return int(f.read())


TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["LoadT", "", 'a"b', "back\\slash", "tab\there", "del\x7f", "é", "%DLQ%g"])
HOSTS = st.sampled_from([HostAddress(bytes([127, 0, 0, 1]), 10911), HostAddress(bytes([10, 1, 2, 3]), 1),
                         HostAddress(bytes(range(16)), 65535)])
INT64 = st.integers(-(2**63), 2**63 - 1)
RESULTS = st.lists(st.builds(PutResult, TEXTS, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1),
                             st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1), st.none() | TEXTS, INT64, HOSTS),
                   max_size=20)


@given(results=RESULTS, first=st.integers(1, 2**40), short_by=st.integers(0, 3), as_list=st.booleans())
def test_the_compiled_result_lines_are_the_reference_text(results, first, short_by, as_list):
    numbers = range(first, first + len(results) + short_by)
    numbers = list(numbers) if as_list else numbers
    compiled = ndjson_load.result_lines(numbers, results)
    assert compiled == ndjson_load.reference_result_lines(numbers, results)
    lines = [json.loads(line) for line in compiled.splitlines()]
    assert [(line["topic"], line["unique_key"], line["phys_offset"]) for line in lines] == [
        (r.topic, r.unique_key, r.phys_offset) for r in results]
    assert [line["offset_msg_id"] for line in lines] == [r.offset_msg_id for r in results]


def test_result_lines_refuse_what_is_not_a_put_result():
    host = HostAddress(bytes(4), 1)
    with pytest.raises(TypeError, match="PutResult"):
        ndjson_load.result_lines([1], [("T", 0)])
    with pytest.raises(TypeError, match="topic must be text"):
        ndjson_load.result_lines([1], [PutResult(b"T", 0, 0, 0, 1, None, 0, host)])
    with pytest.raises(TypeError, match="host_prefix"):
        ndjson_load.compiled_result_lines([1], [PutResult("T", 0, 0, 0, 1, None, 0, host)], lambda h: b"x", str)
    with pytest.raises(OverflowError):
        ndjson_load.result_lines([2**64], [PutResult("T", 0, 0, 0, 1, None, 0, host)])


def test_lines_written_in_the_background_keep_their_order_and_a_closed_reader_is_raised():
    r, w = os.pipe()
    with ndjson_parse.BackgroundWriter(w, ahead=2) as writer:
        for i in range(50):
            writer.write(b"%d\n" % i)
    os.close(w)
    with os.fdopen(r, "rb") as got:
        assert got.read().split() == [b"%d" % i for i in range(50)]
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(BrokenPipeError), ndjson_parse.BackgroundWriter(w) as writer:
        writer.write(b"lost\n")
    os.close(w)


def test_a_load_leaves_what_it_wrote_on_disk_but_not_in_the_page_cache(tmp_path):
    """A bulk load writes behind (issue #25): it does not fill the page cache with the log it
    wrote, reusing the same memory page after page instead."""
    from tests.store.test_drop_flushed_pages import EDGE_BYTES, cached_bytes

    body = base64.b64encode(b"x" * 3000).decode()
    text = "".join(json.dumps({"topic": "LoadT", "body_base64": body, "keys": [f"k-{i}"]}) + "\n"
                   for i in range(6000))  # about 18 MiB of log
    geometry = ("--commitlog-file-size", str(64 * 1024 * 1024), "--cq-file-size", "20000", "--index-slots", "1000",
                "--index-entries", "40000")
    code, results, err = _load(tmp_path, text, *geometry)
    assert code == 0, err
    [segment] = (tmp_path / "s" / "commitlog").iterdir()
    end = results[-1]["phys_offset"]
    assert end > 12 * 1024 * 1024
    assert cached_bytes(segment, 0, 8 * 1024 * 1024) <= EDGE_BYTES
    stored = StoreGeometry(64 * 1024 * 1024, 20000, 1000, 40000)
    with MessageStore.open(tmp_path / "s", small_config(geometry=stored), read_only=True) as store:
        assert store.query_by_key("LoadT", "k-5999").messages[0].body == b"x" * 3000
