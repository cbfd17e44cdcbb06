"""Acceptance 4: crashes and damaged tails are recovered to the last good record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from store.errors import CorruptRecordError, MessageNotFoundError
from store.log.paths import StorePaths, offset_to_name
from store.message_store import MessageStore
from tests.conftest import GOLDEN_GEOMETRY, GOLDEN_GEOMETRY_FLAGS
from tests.store.helpers import fill, sample_message, small_config

SEGMENT = GOLDEN_GEOMETRY.commitlog_file_size  # small_config's commit log segment size


def _feed(proc: subprocess.Popen, count: int) -> None:
    try:
        for i in range(count):
            line = {"topic": f"Crash{i % 3}", "body": f"payload {i} " * (1 + i % 40), "tags": "T",
                    "keys": [f"crash-{i}"]}
            proc.stdin.write(json.dumps(line) + "\n")
            proc.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the writer was killed


@pytest.mark.parametrize("kill_after", [37, 211])
def test_sigkill_mid_stream_loses_no_acknowledged_message(tmp_path, kill_after):
    store_dir = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", "store", "load",
         "--store", str(store_dir), "--flush", "sync", "-", *GOLDEN_GEOMETRY_FLAGS],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    feeder = threading.Thread(target=_feed, args=(proc, 100_000), daemon=True)
    feeder.start()
    acknowledged = []
    for line in proc.stdout:
        acknowledged.append(json.loads(line))
        if len(acknowledged) == kill_after:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (store_dir / "abort").exists(), "a killed writer leaves its abort marker"

    with MessageStore.open(store_dir, small_config()) as store:
        assert store.abnormal_shutdown
        for ack in acknowledged:
            msg = store.get_by_offset_id(ack["offset_msg_id"])
            assert msg.unique_key == ack["unique_key"]
            assert (msg.topic, msg.queue_id, msg.queue_offset) == (ack["topic"], ack["queue_id"], ack["queue_offset"])
            [found] = store.query_by_unique_key(ack["topic"], ack["unique_key"]).messages
            assert found.phys_offset == ack["phys_offset"]
        report = store.check()
        assert report.ok, report.problems
    assert not (store_dir / "abort").exists()


def _written_store(tmp_path, count=12, body_size=700):
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, small_config()) as store:
        results = fill(store, count, body_size=body_size)
    return store_dir, results


def _segment_and_pos(store_dir, phys):
    return StorePaths(store_dir).commitlog / offset_to_name(phys - phys % SEGMENT), phys % SEGMENT


def _damage(path, pos, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _assert_recovered_to(store_dir, results, survivors):
    (store_dir / "abort").touch()
    with MessageStore.open(store_dir, small_config()) as store:
        assert store.commitlog.end == results[survivors - 1].phys_offset + results[survivors - 1].size
        for r in results[:survivors]:
            assert store.get_by_offset_id(r.offset_msg_id).unique_key == r.unique_key
        for r in results[survivors:]:
            assert store.query_by_unique_key(r.topic, r.unique_key).messages == []
            cq = store.queues.get(r.topic, r.queue_id)
            assert cq.max_offset <= r.queue_offset
        report = store.check()
        assert report.ok, report.problems
        again = store.put(sample_message(99))
        assert again.phys_offset == results[survivors - 1].phys_offset + results[survivors - 1].size
        assert store.check().ok


def test_torn_tail_is_truncated(tmp_path):
    store_dir, results = _written_store(tmp_path)
    last = results[-1]
    path, pos = _segment_and_pos(store_dir, last.phys_offset)
    _damage(path, pos + last.size // 2, bytes(last.size - last.size // 2))
    _assert_recovered_to(store_dir, results, len(results) - 1)


def test_flipped_byte_in_last_record_is_truncated(tmp_path):
    store_dir, results = _written_store(tmp_path)
    last = results[-1]
    path, pos = _segment_and_pos(store_dir, last.phys_offset)
    data = path.read_bytes()
    _damage(path, pos + 120, bytes([data[pos + 120] ^ 0x40]))
    _assert_recovered_to(store_dir, results, len(results) - 1)


def test_half_written_header_is_truncated(tmp_path):
    store_dir, results = _written_store(tmp_path)
    last = results[-1]
    path, pos = _segment_and_pos(store_dir, last.phys_offset)
    _damage(path, pos + 8, bytes(last.size - 8))
    _assert_recovered_to(store_dir, results, len(results) - 1)


def test_leftover_abort_marker_loses_nothing(tmp_path):
    store_dir, results = _written_store(tmp_path)
    _assert_recovered_to(store_dir, results, len(results))


def test_projections_ahead_of_the_log_are_cut_back(tmp_path):
    """A consume queue unit and index entries that point past the recovered end go away."""
    store_dir, results = _written_store(tmp_path)
    last = results[-1]
    path, pos = _segment_and_pos(store_dir, last.phys_offset)
    _damage(path, pos, bytes(last.size))  # the record vanished, its projections did not
    _assert_recovered_to(store_dir, results, len(results) - 1)


def test_corrupt_record_in_the_middle_is_reported_not_skipped(tmp_path):
    store_dir, results = _written_store(tmp_path)
    middle = results[3]
    path, pos = _segment_and_pos(store_dir, middle.phys_offset)
    data = path.read_bytes()
    _damage(path, pos + 100, bytes([data[pos + 100] ^ 0xFF]))
    before = {p: p.read_bytes() for p in (store_dir / "commitlog").iterdir()}
    with pytest.raises(CorruptRecordError) as info:
        MessageStore.open(store_dir, small_config())
    assert info.value.path == str(path) and info.value.pos == pos
    assert "valid records follow" in str(info.value)
    assert {p: p.read_bytes() for p in (store_dir / "commitlog").iterdir()} == before, "nothing was truncated"
    with pytest.raises(CorruptRecordError):
        MessageStore.open(store_dir, small_config(), read_only=True)


def test_corrupt_record_in_an_old_segment_is_reported_by_check(tmp_path):
    """Opening scans the last three segments (as RocketMQ does); check() scans them all."""
    store_dir, results = _written_store(tmp_path, count=40, body_size=2500)
    first_segment = [r for r in results if r.phys_offset < SEGMENT]
    victim = first_segment[len(first_segment) // 2]
    path, pos = _segment_and_pos(store_dir, victim.phys_offset)
    _damage(path, pos + 4, b"\x00\x00\x00\x00")
    with MessageStore.open(store_dir, small_config(), read_only=True) as store:
        assert store.commitlog.segment_count >= 4
        report = store.check()
        assert not report.ok
        assert f"{path} at position {pos}" in report.problems[0]
        with pytest.raises(MessageNotFoundError, match="unknown magic"):
            store.get_by_offset_id(victim.offset_msg_id)
