"""A batch creates every commit log segment it will reach before writing a byte of it (so a full
disk refuses the whole batch). A writer killed midway leaves the later ones empty: recovery must
find the end of the data behind them, and the reopened store must neither fail nor lose an
acknowledged message."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store.log.paths import StorePaths, offset_to_name
from store.message_store import MessageStore
from tests.conftest import GOLDEN_GEOMETRY
from tests.store.helpers import fill, sample_message, small_config

SEGMENT = GOLDEN_GEOMETRY.commitlog_file_size

# Acknowledges a first batch (sync flush), then is killed inside the next, which spans six
# segments, right after its first run of records is written into the current segment.
KILLED_MID_BATCH = """
import json, os, signal, sys
from store.log import commitlog
from store.message_store import MessageStore
from tests.store.helpers import sample_message, small_config

store = MessageStore.open(sys.argv[1], small_config())
for r in store.put_many([sample_message(i, body_size=1500) for i in range(30)]):
    print(json.dumps({"offset_msg_id": r.offset_msg_id, "unique_key": r.unique_key, "phys_offset": r.phys_offset,
                      "size": r.size}))
sys.stdout.flush()
real_encode_run = commitlog.encode_run

def encode_then_die(*args):
    written = real_encode_run(*args)
    os.kill(os.getpid(), signal.SIGKILL)
    return written

commitlog.encode_run = encode_then_die
store.put_many([sample_message(100 + i, body_size=2000) for i in range(90)])
"""


def _segment_names(store_dir) -> list[str]:
    return sorted(p.name for p in StorePaths(store_dir).commitlog.iterdir())


def _assert_reopens_with(store_dir, acknowledged: list[dict], *, exact: bool) -> None:
    """The reopened store holds every acknowledged message and ends where its data ends (just
    after them, or after the complete records of the killed batch), not in an empty segment."""
    acknowledged_end = max(a["phys_offset"] + a["size"] for a in acknowledged)
    with MessageStore.open(store_dir, small_config(), read_only=True) as store:
        end = store.commitlog.end
        assert end == acknowledged_end if exact else acknowledged_end <= end < acknowledged_end + SEGMENT
        assert store.check().ok
    with MessageStore.open(store_dir, small_config()) as store:
        assert store.abnormal_shutdown
        assert store.commitlog.end == end
        for ack in acknowledged:
            assert store.get_by_offset_id(ack["offset_msg_id"]).unique_key == ack["unique_key"]
        assert store.check().ok
        assert store.put(sample_message(999)).phys_offset == end
    assert _segment_names(store_dir)[-1] == offset_to_name(end - end % SEGMENT), "the empty segments are gone"
    with MessageStore.open(store_dir, small_config()) as store:
        assert not store.abnormal_shutdown and store.check().ok


def test_empty_segments_past_the_data_are_not_where_recovery_starts(tmp_path):
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, small_config()) as store:
        results = fill(store, 30, body_size=2500)
    last = _segment_names(store_dir)[-1]
    for n in range(1, 4):  # the state a killed batch leaves: created, nothing written yet
        (StorePaths(store_dir).commitlog / offset_to_name(int(last) + n * SEGMENT)).write_bytes(bytes(SEGMENT))
    (store_dir / "abort").touch()
    acknowledged = [{"offset_msg_id": r.offset_msg_id, "unique_key": r.unique_key, "phys_offset": r.phys_offset,
                     "size": r.size} for r in results]
    _assert_reopens_with(store_dir, acknowledged, exact=True)


def test_writer_killed_inside_a_batch_spanning_segments(tmp_path):
    store_dir = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_BATCH, str(store_dir)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acknowledged = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(acknowledged) == 30
    acknowledged_end = max(a["phys_offset"] + a["size"] for a in acknowledged)
    assert len(_segment_names(store_dir)) >= acknowledged_end // SEGMENT + 5, "the batch had created its segments"
    _assert_reopens_with(store_dir, acknowledged, exact=False)


def test_open_stopped_while_deleting_the_empty_segments_leaves_a_log_that_opens(tmp_path, monkeypatch):
    """Segments past the end go newest first: a recovery cut short leaves no gap in the names."""
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, small_config()) as store:
        results = fill(store, 30, body_size=2500)
    last = _segment_names(store_dir)[-1]
    for n in range(1, 4):
        (StorePaths(store_dir).commitlog / offset_to_name(int(last) + n * SEGMENT)).write_bytes(bytes(SEGMENT))
    (store_dir / "abort").touch()
    real_unlink = Path.unlink
    calls = []

    def unlink_once(path, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            raise OSError("stopped here")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink_once)
    with pytest.raises(OSError, match="stopped here"):
        MessageStore.open(store_dir, small_config())
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert len(_segment_names(store_dir)) == int(last) // SEGMENT + 3
    acknowledged = [{"offset_msg_id": r.offset_msg_id, "unique_key": r.unique_key, "phys_offset": r.phys_offset,
                     "size": r.size} for r in results]
    _assert_reopens_with(store_dir, acknowledged, exact=True)
