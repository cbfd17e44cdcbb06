"""`store check --against`: the check of a store too large for one process, comparing its
consume queues and index with a rebuild of them from its commit log. Here the rebuild is the
store's own dispatch of a copy of the commit log (what the projections job writes, byte for
byte, as tests/pipeline shows); the whole-store check is the reference for what is a problem."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import event, given, settings

from store.errors import StoreError
from store.format.layouts import CQ_UNIT, INDEX_HEADER, INDEX_SLOT
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage
from store.projections import check
from store.projections import check_against as against_module
from store.projections.check import MAX_PROBLEMS, check_store
from store.projections.check_against import check_against
from tests.store.helpers import small_config
from tests.store.test_store_check import (
    SLOTS,
    _entry_at,
    _index_file,
    _open,
    _patch,
    _queue_file,
    damaged_stores,
    written,  # noqa: F401 (a fixture)
)


def rebuild(store_dir: Path, target: Path, **config) -> Path:
    """The store's dispatch of a copy of its commit log alone."""
    shutil.copytree(store_dir / "commitlog", target / "commitlog")
    MessageStore.open(target, small_config(**config)).close()
    return target


@pytest.fixture
def rebuilt(written, tmp_path) -> Path:  # noqa: F811
    store_dir, _ = written
    return rebuild(store_dir, tmp_path / "rebuilt")


def checked(store_dir: Path, rebuilt_dir: Path, **config):
    with _open(store_dir, **config) as store:
        report, compared = check_against(store, rebuilt_dir)
        whole = check_store(store)
    return report, whole, compared


def test_a_clean_store_matches_its_rebuild_and_counts_as_the_whole_check(written, rebuilt):  # noqa: F811
    report, whole, compared = checked(written[0], rebuilt)
    assert report.ok and whole.ok
    assert (report.records, report.blanks, report.queue_units, report.index_entries) == (
        whole.records, whole.blanks, whole.queue_units, whole.index_entries)
    with _open(written[0]) as store:
        assert compared.covered_end == store.commitlog.end


@pytest.mark.parametrize("chunk", [None, 3], ids=["files whole", "queue and index read 3 rows at a time"])
def test_wrong_units_missing_queues_and_damaged_entries_are_named(written, rebuilt, chunk, monkeypatch):  # noqa: F811
    """Every damage of the whole check's tests, found the same whether the streams are compared
    a file at a time or a few rows at a time."""
    if chunk is not None:
        monkeypatch.setattr(check, "INDEX_WINDOW", chunk)
        monkeypatch.setattr(against_module, "QUEUE_WINDOW", chunk)
    store_dir, results = written
    other = results[5]
    units = _queue_file(store_dir, "TopicA", 0, 1)
    _patch(units, 0, CQ_UNIT.pack(other.phys_offset, 7, 123))
    _patch(units, CQ_UNIT.size, CQ_UNIT.pack(other.phys_offset + 3, 100, 0))
    _patch(units, 2 * CQ_UNIT.size, CQ_UNIT.pack(10**12, 100, 0))  # far past the commit log
    shutil.rmtree(store_dir / "consumequeue" / "TopicC" / "2")
    index = _index_file(store_dir, 2)
    _patch(index, _entry_at(3), (12345).to_bytes(4, "big"))
    _patch(index, _entry_at(7) + 4, (results[0].phys_offset + 1).to_bytes(8, "big"))
    _patch(index, _entry_at(9) + 16, (30).to_bytes(4, "big"))
    report, whole, _ = checked(store_dir, rebuilt)
    assert not whole.ok
    problems = report.problems
    first = int(units.name) // CQ_UNIT.size
    records = [CQ_UNIT.unpack_from(_queue_file(rebuilt, "TopicA", 0, 1).read_bytes(), n * CQ_UNIT.size)[0]
               for n in range(3)]
    assert [p for p in problems if "TopicA:0" in p] == [
        f"queue TopicA:0 offset {first} points at {other.phys_offset}, its record is at {records[0]}",
        f"queue TopicA:0 offset {first + 1} points at {other.phys_offset + 3}, its record is at {records[1]}",
        f"queue TopicA:0 offset {first + 2} points at {10**12}, its record is at {records[2]}"]
    assert "records of TopicC:2 have no consume queue" in problems
    name = index.name
    assert f"index {name} entry 9 chains forward to 30" in problems
    assert f"index {name} entry 3 hash matches none of the record's keys" in problems
    assert f"index {name} entry 7 points at {results[0].phys_offset + 1}, which is not a record" in problems
    assert sum("is not found in the index under" in p for p in problems) == 2, "\n".join(problems)
    assert any(p.startswith(f"index {name}:") and "entries are not found by a query" in p for p in problems)


def test_an_emptied_slot_table_is_counted_per_file(written, rebuilt):  # noqa: F811
    store_dir, _ = written
    for path in sorted((store_dir / "index").iterdir()):
        _patch(path, INDEX_HEADER.size, bytes(SLOTS * INDEX_SLOT.size))
    report, whole, _ = checked(store_dir, rebuilt)
    assert not whole.ok
    assert len(report.problems) == len(list((store_dir / "index").iterdir()))
    assert all(p.endswith("entries are not found by a query") for p in report.problems)


def test_a_rebuild_with_another_delay_table_is_named_as_the_cause(written, tmp_path):  # noqa: F811
    store_dir, _ = written
    other = rebuild(store_dir, tmp_path / "other", delay_levels="3s 7s 12s")
    report, _, _ = checked(store_dir, other)
    assert report.problems and all("SCHEDULE_TOPIC_XXXX" in p and "--delay-levels" in p for p in report.problems)


def test_records_after_the_rebuild_and_segments_gone_to_retention_are_left_out(tmp_path):
    """The store goes on taking messages after the rebuild, and its oldest segments are deleted:
    units and entries the rebuild cannot speak for are not compared, the rest still is."""
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, small_config()) as store:
        for i in range(300):
            store.put(NewMessage("T", b"x" * 600, keys=[f"k{i}"], queue_id=i % 2))
    early = rebuild(store_dir, tmp_path / "early")
    with MessageStore.open(store_dir, small_config()) as store:
        for i in range(300, 330):
            store.put(NewMessage("T", b"y" * 600, keys=[f"k{i}"], queue_id=i % 2))
        store.commitlog.delete_segments_before(store.commitlog.segments()[2][0])
    with _open(store_dir) as store:
        assert store.commitlog.min_offset > 0
        report, compared = check_against(store, early)
        assert report.ok, report.problems
        assert 0 < compared.covered_end < compared.log_end
    with _open(store_dir) as store:
        cq = store.queues.get("T", 1)
        offset = next(o for o in range(cq.min_offset, cq.max_offset)
                      if compared.min_offset <= cq.get(o).phys_offset < compared.covered_end)
    at = offset * CQ_UNIT.size
    cq_bytes = small_config().geometry.cq_file_size
    _patch(store_dir / "consumequeue" / "T" / "1" / f"{at // cq_bytes * cq_bytes:020d}", at % cq_bytes,
           CQ_UNIT.pack(compared.min_offset + 1, 600, 0))  # a unit the rebuild speaks for
    with _open(store_dir) as store:
        report, _ = check_against(store, early)
    assert report.problems and report.problems[0].startswith(f"queue T:1 offset {offset} points at "
                                                             f"{compared.min_offset + 1}, its record is at ")


def test_a_folder_that_is_no_rebuild_is_refused_in_words(written, tmp_path):  # noqa: F811
    with _open(written[0]) as store, pytest.raises(StoreError, match="holds no consumequeue or index folder"):
        check_against(store, tmp_path / "nothing")


@settings(max_examples=30, deadline=None)
@given(damaged_stores())
def test_generated_damage_to_queues_and_index_is_found_when_the_whole_check_finds_it(tmp_path_factory, drawn):
    messages, damage = drawn
    damage = [d for d in damage if d[0] != "commitlog"]  # the rebuild is made from the commit log
    if not damage:
        return
    store_dir = tmp_path_factory.mktemp("store")
    with MessageStore.open(store_dir, small_config()) as store:
        for message in messages:
            store.put(message)
    rebuilt_dir = rebuild(store_dir, tmp_path_factory.mktemp("rebuilt") / "r")
    for folder, where, mask in damage:
        files = sorted(p for p in (store_dir / folder).rglob("*") if p.is_file())
        path = files[int(where * len(files))]
        data = bytearray(path.read_bytes())
        data[int(where * len(files) % 1 * len(data.rstrip(b"\0")))] ^= mask
        path.write_bytes(bytes(data))
    try:
        store = _open(store_dir)
    except (StoreError, struct.error, ValueError):
        event("refused by the open")
        return
    with store:
        whole = check_store(store)
        report, _ = check_against(store, rebuilt_dir)
    event("problems found" if whole.problems else "consistent")
    assert report.ok == whole.ok, (report.problems, whole.problems)
    assert len(report.problems) <= MAX_PROBLEMS + 1


CHECK_IN_A_PROCESS = """
import json, sys
from pathlib import Path
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig
from store.projections import check, check_against as against
from store.projections.check import check_store
from store.projections.check_against import check_against

check.WALK_WINDOW, check.INDEX_WINDOW, against.QUEUE_WINDOW = 1 << 20, 4096, 4096
# (the store is many windows long)
store_dir, rebuilt, geometry, how = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
with MessageStore.open(store_dir, StoreConfig(geometry=StoreGeometry(**geometry)), read_only=True) as store:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak restarts: the open's own is not the check's
    report = check_against(store, rebuilt)[0] if how == "against" else check_store(store)
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"records": report.records, "problems": report.problems, "peak_kib": int(peak.split()[1])}))
"""
GROWTH_GEOMETRY = StoreGeometry(commitlog_file_size=64 << 20, cq_file_size=6_000_000, index_slots=50_000,
                                index_entries=200_000)


def _peak_kib(store_dir: Path, rebuilt_dir: Path, how: str) -> dict:
    geometry = {name: getattr(GROWTH_GEOMETRY, name) for name in ("commitlog_file_size", "cq_file_size",
                                                                  "index_slots", "index_entries")}
    done = subprocess.run([sys.executable, "-c", CHECK_IN_A_PROCESS, str(store_dir), str(rebuilt_dir),
                           json.dumps(geometry), how], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


def test_memory_does_not_grow_with_the_store(tmp_path):
    """Four times the records: the whole check's peak grows with them, this one's does not."""
    peaks = {}
    for records in (60_000, 240_000):
        store_dir = tmp_path / f"store-{records}"
        with MessageStore.open(store_dir, small_config(geometry=GROWTH_GEOMETRY, flush="async")) as store:
            for start in range(0, records, 2_000):
                store.put_many([NewMessage("G", b"b" * 40, keys=[f"k{n}"], queue_id=n % 4)
                                for n in range(start, start + 2_000)])
        rebuilt_dir = rebuild(store_dir, tmp_path / f"rebuilt-{records}", geometry=GROWTH_GEOMETRY, flush="async")
        for how in ("against", "whole"):
            result = _peak_kib(store_dir, rebuilt_dir, how)
            assert (result["records"], result["problems"]) == (records, [])
            peaks[how, records] = result["peak_kib"]
        shutil.rmtree(store_dir)
        shutil.rmtree(rebuilt_dir)
    whole_growth = peaks["whole", 240_000] - peaks["whole", 60_000]
    against_growth = peaks["against", 240_000] - peaks["against", 60_000]
    assert whole_growth > 10_000, peaks  # the reference does grow: the measure can tell
    assert against_growth < whole_growth / 4, peaks
    assert against_growth < 4 * 1024, peaks
