"""The projections job: consume queues and index files rebuilt in Spark from a commit log are
byte for byte what RocketMQ wrote (golden stores) and what the mqlens store's own dispatch wrote
(generated stores), and they make a bare commit log a whole store again."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from pipeline.delay_table import GuessedDelayTable
from pipeline.jobs import projections
from pipeline.options import SourceOptions
from pipeline.projection_files import plan_index_files
from store.clock import FakeClock
from store.format import topics
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK
from store.format.delay_levels import DEFAULT_DELAY_LEVELS
from store.format.layouts import INDEX_ENTRY, INDEX_HEADER, INDEX_SLOT, RECORD_HEAD_FIELDS, field_offset
from store.log.geometry import StoreGeometry
from store.log.paths import index_name_for, is_index_name, offset_to_name
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import BROKER_DELAY_LEVELS, BROKER_GEOMETRY, GOLDEN_GEOMETRY, GOLDEN_GEOMETRY_FLAGS

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

# Small files everywhere: several commit log segments, queues over many files, index files that
# fill after 40 keys (records have up to four, so a record's keys often straddle two files).
GEOMETRY = StoreGeometry(commitlog_file_size=64 * 1024, cq_file_size=20 * 16, index_slots=32, index_entries=41)
FIRST_DELAYS = "2s 4s 8s 16s 1m 2m"
SECOND_DELAYS = "1s 3s 9s 27s 1m 5m 10m"


def queue_files(root: Path) -> dict[str, bytes]:
    """Consume queue files by path under consumequeue/."""
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def index_files(root: Path) -> list[bytes]:
    """Index file contents, oldest first (names come from the time they were made)."""
    return [p.read_bytes() for p in sorted((root / "index").iterdir()) if is_index_name(p.name)]


def index_entries(data: bytes, geometry: StoreGeometry) -> list[tuple[int, int, int, int]]:
    """The used entries of an index file: (key hash, phys offset, time diff, previous entry)."""
    count = INDEX_HEADER.unpack_from(data, 0)[5]
    start = INDEX_HEADER.size + geometry.index_slots * INDEX_SLOT.size
    return [INDEX_ENTRY.unpack_from(data, start + n * INDEX_ENTRY.size) for n in range(1, count)]


def run(spark, store: Path, geometry: StoreGeometry, out: Path, **options) -> dict[str, int]:
    return projections.main(spark, SourceOptions(store, geometry, **options), out)


def build_store(root: Path) -> None:
    """Originals with tags and keys (several per message, repeated spaces, non-ASCII), delayed and
    timed messages under two delay tables, retries through SCHEDULE_TOPIC_XXXX, dead letters, a
    resend, a send-back and the trace topic, over several commit log segments."""
    clock = FakeClock()
    config = StoreConfig(geometry=GEOMETRY, flush="sync", delay_levels=FIRST_DELAYS, trace=True)
    with MessageStore.open(root, config, clock=clock) as store:
        store.metadata.update_group("g", max_reconsume_times=2)
        for round_no, table in enumerate((FIRST_DELAYS, SECOND_DELAYS)):
            if table != FIRST_DELAYS:
                store.set_delay_levels(table)
            store.put_many([NewMessage("Orders", f"order {round_no}-{n}".encode(), tags=f"t{n % 3}",
                                       keys=[f"o-{n}", f"c-{n % 7}"] + (["键-1", "b"] if n % 5 == 0 else []),
                                       properties={"region": "eu"}) for n in range(120)])
            store.put_many([NewMessage("Payments", b"p" * (n * 37 % 900), tags=None if n % 2 else "标签",
                                       properties={topics.KEYS: "  spaced  key "} if n % 3 == 0 else {},
                                       delay_level=n % 8) for n in range(40)])
            store.put(NewMessage("Payments", b"timed", keys=["timed"],
                                 properties={topics.TIMER_DELIVER_MS: str(clock.now_ms() + 90_000)}))
            for _ in range(3):
                for got in store.receive("g", "Orders", 30, 60_000):
                    store.nack("g", got.receipt_handle, "declined")
                clock.advance(3_600_000)
                store.deliver_due()
            dead = store.get_by_queue_offset(topics.dlq_topic("g"), 0, round_no)
            store.resend_dead_letter(dead.phys_offset, "ops", marks={topics.RESENT_FROM: dead.offset_msg_id})
            store.send_back(store.get_by_queue_offset("Orders", 1, 3).phys_offset, "push-group")
            clock.advance(25_000)
            store.deliver_due()


@pytest.fixture(scope="module")
def built_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("projections") / "store"
    build_store(root)
    return root


@pytest.fixture
def generated(built_store: Path, tmp_path: Path) -> Path:
    """A copy of the generated store (tests may damage it)."""
    copy = tmp_path / "store"
    shutil.copytree(built_store, copy)
    return copy


def test_golden_store_projections_are_rocketmqs_own(spark, golden_store_dir, tmp_path):
    out = tmp_path / "out"
    counts = run(spark, golden_store_dir, GOLDEN_GEOMETRY, out)
    assert queue_files(out) == queue_files(golden_store_dir)
    assert index_files(out) == index_files(golden_store_dir)
    assert counts["records"] == 61 and counts["index_files"] == 3
    assert counts["queues"] == len({p.parent for p in (golden_store_dir / "consumequeue").rglob("*") if p.is_file()})


def test_golden_broker_projections_are_the_brokers_own(spark, golden_broker_dir, tmp_path):
    out = tmp_path / "out"
    run(spark, golden_broker_dir, BROKER_GEOMETRY, out, delay_levels=BROKER_DELAY_LEVELS)
    assert queue_files(out) == queue_files(golden_broker_dir)
    assert index_files(out) == index_files(golden_broker_dir)
    # The broker's delay table is not in its store: with the default one, delayed messages' units differ.
    wrong = tmp_path / "wrong"
    run(spark, golden_broker_dir, BROKER_GEOMETRY, wrong, delay_levels=DEFAULT_DELAY_LEVELS)
    differing = {name for name, data in queue_files(wrong).items() if queue_files(golden_broker_dir)[name] != data}
    assert differing and all(name.startswith(topics.SCHEDULE_TOPIC) for name in differing)


def test_without_a_table_the_brokers_is_inferred_from_its_scheduled_queues(spark, golden_broker_dir, tmp_path):
    source = SourceOptions(golden_broker_dir, BROKER_GEOMETRY)
    table = source.delay_table()
    assert table.source.kind == "inferred" and table.levels.spec.split()[:4] == BROKER_DELAY_LEVELS.split()[:4]
    out = tmp_path / "out"
    projections.main(spark, source, out)
    assert queue_files(out) == queue_files(golden_broker_dir)


def test_a_bare_commit_log_with_scheduled_messages_and_no_table_is_refused(spark, golden_broker_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(golden_broker_dir / "commitlog", bare / "commitlog")
    with pytest.raises(GuessedDelayTable, match=r"scheduled messages .* give the broker's table with --delay-levels"):
        run(spark, bare, BROKER_GEOMETRY, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_generated_store_projections_are_the_stores_own(spark, built_store, tmp_path):
    out = tmp_path / "out"
    counts = run(spark, built_store, GEOMETRY, out)  # delay tables from the store's config/delayLevels.json
    expected_queues = queue_files(built_store)
    assert queue_files(out) == expected_queues
    expected_index = index_files(built_store)
    assert index_files(out) == expected_index
    # What the store makes of it: segments, queues over several files, schedule and timer units,
    # retries, dead letters, trace records; index files that roll over in the middle of a record.
    assert len(list((built_store / "commitlog").iterdir())) >= 3
    topics_seen = {name.split("/")[0] for name in expected_queues}
    assert {"Orders", "Payments", topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC, topics.dlq_topic("g"),
            topics.retry_topic("push-group"), topics.TRACE_TOPIC} <= topics_seen
    assert len([n for n in expected_queues if n.startswith("Orders/1/")]) >= 3
    entries = [index_entries(data, GEOMETRY) for data in expected_index]
    assert len(entries) >= 10 and all(len(e) == GEOMETRY.index_entries - 1 for e in entries[:-1])
    assert any(before[-1][1] == after[0][1] for before, after in zip(entries, entries[1:], strict=False))
    assert counts["index_entries"] == sum(len(e) for e in entries) and counts["index_files"] == len(entries)
    assert counts["queues"] == len({name.rsplit("/", 1)[0] for name in expected_queues})
    # Each file is named after the store time of its first key (the store named them by its clock).
    with MessageStore.open(built_store, StoreConfig(geometry=GEOMETRY), read_only=True) as store:
        firsts = [store.read(file_entries[0][1]).store_timestamp for file_entries in entries]
    names = sorted(p.name for p in (out / "index").iterdir())
    assert names == [p.name for p in plan_index_files(firsts, [(0, 0)] * len(firsts))]
    assert names[0] == index_name_for(firsts[0]) and len(set(names)) == len(names)


def test_index_names_follow_first_keys_and_never_repeat():
    t = 1_700_000_000_123
    plans = plan_index_files([t, t, t - 5000, t + 10], [(0, 0), (100, t), (200, t), (300, t - 5000)])
    assert [p.name for p in plans] == [index_name_for(t), index_name_for(t + 1), index_name_for(t + 2),
                                       index_name_for(t + 10)]
    assert [(p.prev_end_phys, p.prev_end_timestamp) for p in plans] == [(0, 0), (100, t), (200, t), (300, t - 5000)]


def test_a_commit_log_missing_its_oldest_segment_rebuilds_as_the_store_does(spark, built_store, tmp_path):
    """Queues that start past offset 0 (pre-blank units) and index files from the middle of the log."""
    bare = tmp_path / "bare"
    segments = sorted((built_store / "commitlog").iterdir())
    (bare / "commitlog").mkdir(parents=True)
    for segment in segments[1:]:
        shutil.copy(segment, bare / "commitlog" / segment.name)
    shutil.copytree(built_store / "config", bare / "config")
    out = tmp_path / "out"
    run(spark, bare, GEOMETRY, out)
    with MessageStore.open(bare, StoreConfig(geometry=GEOMETRY), clock=FakeClock()):
        pass  # the store replays the commit log into consume queues and index files
    rebuilt = queue_files(bare)
    assert queue_files(out) == rebuilt
    assert index_files(out) == index_files(bare)
    first_units = [data[:20] for name, data in rebuilt.items() if name.startswith("Orders/")]
    assert any(unit[8:12] == (0x7FFFFFFF).to_bytes(4, "big") for unit in first_units)  # pre-blank


def patch_record(store: Path, phys: int, field: str, value: int) -> None:
    """Overwrite a head field of the record at `phys` (head fields are not under the body CRC)."""
    segment = store / "commitlog" / offset_to_name(phys - phys % GEOMETRY.commitlog_file_size)
    fields = dict(RECORD_HEAD_FIELDS)
    at = phys % GEOMETRY.commitlog_file_size + field_offset(RECORD_HEAD_FIELDS, field)
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(int(value).to_bytes(struct.calcsize(">" + fields[field]), "big", signed=True))


def test_halves_rollbacks_and_repeated_queue_offsets_rebuild_as_the_store_does(spark, generated, tmp_path):
    """Transaction halves get no unit (a gap the store fills with pre-blank units), rollbacks no
    unit and no index entry, and a record whose queue offset is not above its queue's earlier
    ones is skipped, as the store's idempotent put skips it."""
    with MessageStore.open(generated, StoreConfig(geometry=GEOMETRY), read_only=True) as store:
        half = store.get_by_queue_offset("Orders", 0, 5)
        rollback = store.get_by_queue_offset("Orders", 0, 6)
        repeated = store.get_by_queue_offset("Orders", 2, 9)
    patch_record(generated, half.phys_offset, "sys_flag", half.sys_flag | TRANSACTION_PREPARED)
    patch_record(generated, rollback.phys_offset, "sys_flag", rollback.sys_flag | TRANSACTION_ROLLBACK)
    patch_record(generated, repeated.phys_offset, "queue_offset", 3)
    out = tmp_path / "out"
    run(spark, generated, GEOMETRY, out)
    bare = tmp_path / "bare"
    shutil.copytree(generated / "commitlog", bare / "commitlog")
    shutil.copytree(generated / "config", bare / "config")
    with MessageStore.open(bare, StoreConfig(geometry=GEOMETRY), clock=FakeClock()) as rebuilt:
        assert rebuilt.queues.get("Orders", 0).get(5).size == 0x7FFFFFFF  # pre-blank
        assert rebuilt.queues.get("Orders", 2).get(9).size == 0x7FFFFFFF
        assert rollback.phys_offset not in rebuilt.index.query("Orders", rollback.keys[0])
        assert half.phys_offset in rebuilt.index.query("Orders", half.keys[0])
    assert queue_files(out) == queue_files(bare)
    assert index_files(out) == index_files(bare)
    assert queue_files(out) != queue_files(generated) and index_files(out) != index_files(generated)


def test_a_bare_commit_log_with_the_jobs_output_is_a_whole_store(spark, golden_broker_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(golden_broker_dir / "commitlog", bare / "commitlog")
    out = tmp_path / "out"
    counts = run(spark, bare, BROKER_GEOMETRY, out, delay_levels=BROKER_DELAY_LEVELS)
    for part in ("consumequeue", "index"):
        (out / part).rename(bare / part)
    config = StoreConfig(geometry=BROKER_GEOMETRY, delay_levels=BROKER_DELAY_LEVELS)
    with (MessageStore.open(bare, config, read_only=True) as rebuilt,
          MessageStore.open(golden_broker_dir, config, read_only=True) as original):
        report = rebuilt.check()
        assert report.ok, report.problems
        assert report.records == counts["records"] and report.index_entries == counts["index_entries"]
        assert report.queue_units == counts["queue_units"]
        assert rebuilt.topics() == original.topics()
        looked_up = 0
        for msg in (original.read(phys) for phys in sorted(original_records(original))):
            for key in msg.keys:
                found = [m.phys_offset for m in rebuilt.query_by_key(msg.topic, key).messages]
                assert found == [m.phys_offset for m in original.query_by_key(msg.topic, key).messages]
                assert msg.phys_offset in found
                looked_up += 1
            if msg.unique_key:
                assert msg.phys_offset in [m.phys_offset for m in
                                           rebuilt.query_by_unique_key(msg.topic, msg.unique_key).messages]
        assert looked_up > 10


def original_records(store: MessageStore) -> list[int]:
    """Physical offsets of the records the store's queues point at."""
    return [unit.phys_offset for queues in store.queues.topics().values() for cq in queues
            for unit in cq.units(cq.min_offset, cq.max_offset - cq.min_offset) if unit.size != 0x7FFFFFFF]


def test_the_output_directory_is_replaced_whole(spark, golden_store_dir, tmp_path):
    out = tmp_path / "out"
    (out / "index").mkdir(parents=True)
    (out / "index" / "20000101000000000").write_bytes(b"stale")
    (out / "leftover").write_text("stale")
    run(spark, golden_store_dir, GOLDEN_GEOMETRY, out)
    assert sorted(p.name for p in out.iterdir()) == ["consumequeue", "index"]
    assert index_files(out) == index_files(golden_store_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["golden-store", "out"]  # nothing staged is left


def test_a_directory_without_a_commit_log_is_refused(spark, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="is not a store: it has no commitlog directory"):
        run(spark, tmp_path, GOLDEN_GEOMETRY, out)
    assert not out.exists()


def test_an_empty_commit_log_gives_empty_projections(spark, tmp_path):
    (tmp_path / "store" / "commitlog").mkdir(parents=True)
    out = tmp_path / "out"
    counts = run(spark, tmp_path / "store", GOLDEN_GEOMETRY, out)
    assert counts == {"records": 0, "queue_units": 0, "queues": 0, "index_entries": 0, "index_files": 0}
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["consumequeue", "index"]


def test_the_output_may_not_go_into_the_store(spark, golden_store_dir):
    with pytest.raises(ValueError, match="outside the store"):
        run(spark, golden_store_dir, GOLDEN_GEOMETRY, golden_store_dir / "projections")


def test_a_corrupt_record_fails_with_its_place_unless_skipped(spark, built_store, generated, tmp_path):
    intact = spark.read.format("rocketmq_commitlog").load(str(built_store)).count()
    first = sorted((generated / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    second = int.from_bytes(data[0:4], "big")  # the second record starts where the first ends
    data[second + 4] ^= 0xFF  # its magic code
    first.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(Exception, match=rf"{first.name} at position {second}: unknown magic code"):
        run(spark, generated, GEOMETRY, out)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    counts = run(spark, generated, GEOMETRY, out, skip_corrupt=True)
    assert 0 < counts["records"] < intact
    assert queue_files(out) and index_files(out)


def test_the_command_line_runs_the_job(spark, golden_store_dir, tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "out"
    assert main(["pipeline", "run", "projections", "--store", str(golden_store_dir), "--out", str(out),
                 *GOLDEN_GEOMETRY_FLAGS]) == 0
    printed = capsys.readouterr().out
    assert ("projections: 61 records, 61 queue units, 21 queues, 129 index entries, 3 index files from "
            f"{golden_store_dir} written to {out} in ") in printed
    assert "; delay levels 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h (" in printed
    assert queue_files(out) == queue_files(golden_store_dir)
    assert index_files(out) == index_files(golden_store_dir)


def test_store_check_against_the_jobs_output(spark, golden_broker_dir, tmp_path, capsys):
    """The check for a store too large for one process: a real broker's store compared with the
    job's rebuild of it is consistent; a unit changed afterwards is named, and so is a rebuild
    made with another delay table than the broker's."""
    from app.cli import main

    out, default_table = tmp_path / "out", tmp_path / "default-table"
    run(spark, golden_broker_dir, BROKER_GEOMETRY, out, delay_levels=BROKER_DELAY_LEVELS)
    run(spark, golden_broker_dir, BROKER_GEOMETRY, default_table, delay_levels=DEFAULT_DELAY_LEVELS)
    flags = ["store", "check", "--store", str(golden_broker_dir), "--delay-levels", BROKER_DELAY_LEVELS,
             *(arg for name in ("commitlog_file_size", "cq_file_size", "index_slots", "index_entries")
               for arg in (f"--{name.replace('_', '-')}", str(getattr(BROKER_GEOMETRY, name))))]
    assert main([*flags, "--against", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"compared with the rebuild in {out}" in printed and "store is consistent" in printed

    assert main([*flags, "--against", str(default_table)]) == 1
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("problem: ")]
    assert problems and all(topics.SCHEDULE_TOPIC in p and "--delay-levels" in p for p in problems)

    queue = golden_broker_dir / "consumequeue" / "Orders" / "0" / offset_to_name(0)
    data = bytearray(queue.read_bytes())
    data[12:20] = (424242).to_bytes(8, "big")  # the first unit's tagsCode
    queue.write_bytes(bytes(data))
    assert main([*flags, "--against", str(out)]) == 1
    assert f"problem: queue Orders:{queue.parent.name} offset 0 has tagsCode 424242, its record gives " in (
        capsys.readouterr().out)

    assert main([*flags, "--against", str(tmp_path / "missing")]) == 2
    assert "--against: " in capsys.readouterr().err
