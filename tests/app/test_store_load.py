"""`mqlens store load`: batches of what has arrived, one result line per message, no trace
records unless asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app import ndjson_load
from store.errors import InvalidMessageError
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
    batches = ndjson_load.line_batches(r, read_bytes=64)
    assert next(batches) == [(1, b'{"a": 1}')]
    os.write(w, b': 2}\n\n{"c": 3}')
    os.close(w)
    assert next(batches) == [(2, b'{"b": 2}')]
    assert next(batches) == [(4, b'{"c": 3}')]
    assert next(batches, None) is None
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
        batch = [(1, b'{"topic": "T", "body": "a"}'), (2, b'{"topic": "T", "body": "b", "keys": ["a b"]}')]
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
