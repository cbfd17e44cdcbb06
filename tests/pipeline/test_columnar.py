"""The compiled columnar decoder against the Python reference reader: the same Arrow table
(schema included), the same walk report and the same errors, on generated and hand-made
segments, damaged ones, any split, and every filter the data source pushes into the scan."""

from __future__ import annotations

import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual
from pyspark.testing import assertDataFrameEqual

from pipeline.columnar import DecodePlan, read_range
from pipeline.records import ARROW_SCHEMA, RowBuilder
from pipeline.scan_filter import Range, ScanFilter
from pipeline.segments import Segment, WalkReport, segment_files, walk
from pipeline.source import CommitLogReader
from store.format import codec, topics
from store.format.hosts import HostAddress
from store.format.layouts import BLANK, MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from store.format.recordio import SCAN_BLANK, SCAN_END, SCAN_FULL, SCAN_SLOW, decode_columns, record_layout
from tests.pipeline.stores import build_retry_store

BASE = 3 * 1024 * 1024  # the commit log offset of the hand-made segments' first byte
TOPICS = ["Orders", "Tópico-ü", topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC, topics.retry_topic("g"),
          topics.dlq_topic("g"), topics.TRACE_TOPIC, topics.TRANS_HALF_TOPIC, topics.TRANS_OP_HALF_TOPIC,
          "t" * 200]
KINDS = ["original", "scheduled", "retry", "dead_letter", "trace", "resent", "nothing-such"]
TAGS = ["paid", "späť", "a b", ""]
NAMES = [topics.TAGS, topics.KEYS, topics.UNIQ_KEY, topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_MESSAGE_ID,
         topics.RESENT_FROM, "région", "X"]
VALUES = st.one_of(st.sampled_from(TAGS[:3] + ["k1 k2", " k1  k2 ", "AB12", "漢字 🙂", "x"]),
                   st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                           max_size=8))
HOSTS = st.one_of(
    st.builds(HostAddress, st.binary(min_size=4, max_size=4), st.integers(-(2**31), 2**31 - 1)),
    st.builds(HostAddress, st.binary(min_size=16, max_size=16), st.integers(-(2**31), 2**31 - 1)),
    st.sampled_from([HostAddress.parse("10.0.0.1:10911"), HostAddress.parse("[::1]:9876"),
                     HostAddress.parse("[fe80::1:ab:0:0:7]:0")]),
)


@st.composite
def properties_text(draw) -> str:
    """A record's properties as written, repeats and odd chunks included; sometimes very many."""
    if draw(st.integers(0, 20)) == 0:
        return "\x02".join(f"p{n}\x01v{n}" for n in range(draw(st.integers(60, 80))))
    pairs = draw(st.lists(st.tuples(st.sampled_from(NAMES), VALUES), max_size=7))
    text = "\x02".join(f"{n}\x01{v}" for n, v in pairs)
    return text + draw(st.sampled_from(["", "\x02", "\x02\x02ab", "\x02\x01x", "\x02q\x01", "\x02é\x01"]))


@st.composite
def records(draw) -> dict:
    topic = draw(st.sampled_from(TOPICS))
    compressed = draw(st.integers(0, 6)) == 0
    body = draw(st.one_of(st.just(b""), st.binary(max_size=200)))
    if compressed and draw(st.booleans()):
        body = zlib.compress(body)
    return {
        "topic": topic, "properties": draw(properties_text()), "body": body,
        "queue_id": draw(st.integers(-2, 5)), "queue_offset": draw(st.integers(0, 2**40)),
        "flag": draw(st.integers(-(2**31), 2**31 - 1)), "born_timestamp": draw(st.integers(-(2**63), 2**63 - 1)),
        "store_timestamp": draw(st.integers(0, 100)), "born_host": draw(HOSTS), "store_host": draw(HOSTS),
        "reconsume_times": draw(st.integers(-(2**31), 2**31 - 1)),
        "sys_flag": draw(st.sampled_from([0, 0x2, 0x4, 0x8, 0xC])) | (codec.COMPRESSED_FLAG if compressed else 0),
        "magic": MAGIC_V2 if len(topic.encode()) > 127 else draw(st.sampled_from([MAGIC_V1, MAGIC_V2])),
    }


def encode(r: dict, phys: int) -> bytes:
    return codec.encode_fields(r["queue_id"], r["flag"], r["queue_offset"], phys, r["sys_flag"], r["born_timestamp"],
                               r["born_host"], r["store_timestamp"], r["store_host"], r["reconsume_times"], 7,
                               r["body"], r["topic"].encode(), r["properties"].encode(), r["magic"])


def segment_bytes(recs: list[dict], tail: str = "") -> bytes:
    out = bytearray()
    for r in recs:
        out += encode(r, BASE + len(out))
    if tail == "blank":
        out += BLANK.pack(64, MAGIC_BLANK) + bytes(56)
    elif tail == "zeros":
        out += bytes(40)
    return bytes(out)


def write_segment(directory: Path, data: bytes) -> Segment:
    path = directory / f"{BASE:020d}"
    path.write_bytes(data)
    return Segment(path, BASE, len(data))


def reference(segment: Segment, start: int, end: int, plan: DecodePlan, **walk_options) -> tuple:
    """The Python reader's outcome: (table, report) or the error it raised."""
    report, rows = WalkReport(), RowBuilder(plan.with_body, plan.body_topics)
    try:
        found = [rows.row(m) for m in walk(segment, start, end, report=report, **walk_options) if plan.scan.matches(m)]
    except Exception as exc:  # noqa: BLE001 (the compiled reader must raise the very same)
        return "error", type(exc), str(exc)
    return pa.Table.from_pylist(found, schema=ARROW_SCHEMA), report.as_dict()


def compiled(segment: Segment, start: int, end: int, plan: DecodePlan, **walk_options) -> tuple:
    report = WalkReport()
    try:
        batches = list(read_range(segment, start, end, plan, report=report, **walk_options))
    except Exception as exc:  # noqa: BLE001
        return "error", type(exc), str(exc)
    for batch in batches:
        batch.validate(full=True)
        assert batch.schema == ARROW_SCHEMA
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA), report.as_dict()


def assert_same(segment: Segment, plan: DecodePlan, start: int = 0, end: int | None = None, **walk_options) -> tuple:
    end = segment.size if end is None else end
    options = {"skip_corrupt": False, "is_tail": False, **walk_options}
    expected, got = reference(segment, start, end, plan, **options), compiled(segment, start, end, plan, **options)
    if expected[0] == "error" or got[0] == "error":
        assert got == expected
    else:
        assert got[0].schema == expected[0].schema == ARROW_SCHEMA
        assert got[0].equals(expected[0]), (got[0].to_pylist()[:3], expected[0].to_pylist()[:3])
        assert got[1] == expected[1]
    return expected


@st.composite
def scan_filters(draw) -> ScanFilter:
    def maybe(values):
        return draw(st.one_of(st.none(), st.frozensets(st.sampled_from(values), max_size=3)))

    def bounds(low, high):
        lo, hi = draw(st.integers(low, high)), draw(st.integers(low, high))
        return draw(st.sampled_from([Range(), Range(lo, hi), Range(lo), Range(high=hi)]))

    return ScanFilter(topics=maybe(TOPICS), copy_kinds=maybe(KINDS), tags=maybe(TAGS),
                      store_timestamp=bounds(0, 100), phys_offset=bounds(BASE, BASE + 4000),
                      queue_id=bounds(-2, 5))


plans = st.builds(DecodePlan, st.booleans(), st.frozensets(st.sampled_from(TOPICS), max_size=2),
                  st.one_of(st.just(ScanFilter()), scan_filters()))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records(), min_size=1, max_size=12), st.sampled_from(["", "blank", "zeros"]), plans)
def test_compiled_batches_equal_the_python_rows(recs, tail, plan):
    raw = segment_bytes(recs, tail)
    with tempfile.TemporaryDirectory() as directory:
        assert_same(write_segment(Path(directory), raw), plan)
    declined = [r for r in recs if r["properties"].count("\x01") > 64
                or (r["sys_flag"] & codec.COMPRESSED_FLAG and (plan.with_body or r["topic"] in plan.body_topics))]
    if not declined:  # the compiled decoder took every record itself
        status, _, read, *_ = decode_columns(raw, 0, len(raw), record_layout(), BASE, 100, 100, plan.as_tuple())
        assert (status, read) == (SCAN_BLANK if tail else SCAN_END, len(recs))


@settings(max_examples=250, deadline=None)
@given(st.lists(records(), min_size=2, max_size=8), st.data())
def test_damage_and_splits_give_the_same_rows_reports_and_errors(recs, data):
    raw = bytearray(segment_bytes(recs, data.draw(st.sampled_from(["", "blank", "zeros"]))))
    for _ in range(data.draw(st.integers(0, 2))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(1, len(raw)))]  # a torn tail
    start = data.draw(st.sampled_from([0, 0, data.draw(st.integers(0, len(raw)))]))
    end = data.draw(st.sampled_from([len(raw), data.draw(st.integers(start, len(raw)))]))
    plan = data.draw(plans)
    with tempfile.TemporaryDirectory() as directory:
        assert_same(write_segment(Path(directory), bytes(raw)), plan, start, end,
                    skip_corrupt=data.draw(st.booleans()), is_tail=data.draw(st.booleans()))


def test_a_torn_tail_and_skipped_ranges_are_reported_as_the_python_walk_reports_them(tmp_path):
    recs = [{"topic": "Orders", "properties": f"KEYS\x01k{n}\x02TAGS\x01paid", "body": b"b" * n, "queue_id": 0,
             "queue_offset": n, "flag": 0, "born_timestamp": 1, "store_timestamp": 2,
             "born_host": HostAddress.parse("10.0.0.1:1"), "store_host": HostAddress.parse("10.0.0.2:2"),
             "reconsume_times": 0, "sys_flag": 0, "magic": MAGIC_V1} for n in range(20)]
    raw = bytearray(segment_bytes(recs))
    second = int.from_bytes(raw[0:4], "big")
    raw[second + 30] ^= 0x55  # the second record's queue offset: its CRC still holds, its phys does not move
    raw[second + 4] ^= 0xFF  # and its magic
    segment = write_segment(tmp_path, bytes(raw[:-10]))
    plan = DecodePlan(True, frozenset(), ScanFilter())
    table, report = assert_same(segment, plan, skip_corrupt=True, is_tail=True)
    assert table.num_rows == 18 and len(report["skipped"]) == 1 and report["torn_tail_at"] is not None
    error = assert_same(segment, plan)
    assert error[0] == "error" and "unknown magic code" in error[2]


def test_a_generated_store_decodes_the_same_in_every_segment(tmp_path):
    root = build_retry_store(tmp_path / "store")
    segments = segment_files(root)
    assert len(segments) > 1  # a filler between segments
    kinds = set()
    for body in (False, True):
        for segment in segments:
            table, _ = assert_same(segment, DecodePlan(body, frozenset({topics.TRACE_TOPIC}), ScanFilter()),
                                   is_tail=segment is segments[-1])
            kinds |= set(table.column("copy_kind").to_pylist())
    assert kinds >= {"original", "retry", "dead_letter", "scheduled", "trace", "resent"}


def test_decode_columns_statuses_and_hostile_arguments(tmp_path):
    recs = [{"topic": "Orders", "properties": "TAGS\x01x", "body": b"x", "queue_id": 1, "queue_offset": n,
             "flag": 0, "born_timestamp": 1, "store_timestamp": 2, "born_host": HostAddress.parse("10.0.0.1:1"),
             "store_host": HostAddress.parse("10.0.0.2:2"), "reconsume_times": 0, "sys_flag": 0,
             "magic": MAGIC_V1} for n in range(5)]
    raw = segment_bytes(recs, "blank")
    size = len(encode(recs[0], BASE))
    plan = DecodePlan(False, frozenset(), ScanFilter()).as_tuple()

    def run(buf, pos=0, stop=None, max_rows=100, max_records=100, base=BASE, plan_tuple=plan):
        return decode_columns(buf, pos, len(buf) if stop is None else stop, record_layout(), base, max_rows,
                              max_records, plan_tuple)[:4]

    assert run(raw) == (SCAN_BLANK, 5 * size, 5, 5)
    assert run(raw, stop=2 * size) == (SCAN_END, 2 * size, 2, 2)
    assert run(raw, max_rows=3) == (SCAN_FULL, 3 * size, 3, 3)
    assert run(raw, max_records=2) == (SCAN_FULL, 2 * size, 2, 2)
    assert run(raw, base=0) == (SCAN_SLOW, 0, 0, 0)  # a record not holding its own offset
    assert run(raw[: 3 * size - 1]) == (SCAN_SLOW, 2 * size, 2, 2)  # cut short
    assert run(raw[:4]) == (SCAN_END, 0, 0, 0)
    only_queue_2 = DecodePlan(False, frozenset(), ScanFilter(queue_id=Range(2, 2))).as_tuple()
    assert run(raw, plan_tuple=only_queue_2) == (SCAN_BLANK, 5 * size, 5, 0)
    with pytest.raises(ValueError):
        run(raw, max_rows=0)
    with pytest.raises(ValueError):
        run(raw, pos=-1)
    with pytest.raises(TypeError):
        run(raw, plan_tuple=(1, 2))
    with pytest.raises(TypeError):
        run(raw, plan_tuple=(*plan[:6], ("Orders",), *plan[7:]))  # topics as str, not bytes
    with pytest.raises(ValueError):
        run(raw, plan_tuple=(plan[0][:3], *plan[1:]))


def test_calls_in_several_threads_at_once_give_what_one_call_gives(tmp_path):
    """A call that finds the kept buffers taken by a call running meanwhile decodes into its own."""
    recs = [{"topic": "Orders", "properties": f"KEYS\x01k{n} s\x02TAGS\x01t{n % 3}", "body": b"b" * (n % 50),
             "queue_id": n % 4, "queue_offset": n, "flag": 0, "born_timestamp": 1, "store_timestamp": n,
             "born_host": HostAddress.parse("10.0.0.1:1"), "store_host": HostAddress.parse("[::2]:2"),
             "reconsume_times": 0, "sys_flag": 0, "magic": MAGIC_V1} for n in range(3000)]
    segment = write_segment(tmp_path, segment_bytes(recs))
    plan = DecodePlan(True, frozenset(), ScanFilter())
    expected, _ = reference(segment, 0, segment.size, plan, skip_corrupt=False, is_tail=False)

    def read(_):
        return compiled(segment, 0, segment.size, plan, skip_corrupt=False, is_tail=False)[0]

    with ThreadPoolExecutor(4) as pool:
        tables = list(pool.map(read, range(12)))
    assert all(t.equals(expected) for t in tables)


def test_bounds_beyond_int64_select_nothing_or_everything():
    huge = DecodePlan(False, frozenset(), ScanFilter(phys_offset=Range(2**70), queue_id=Range(high=-(2**70))))
    beyond = huge.as_tuple()
    assert beyond[8] == (1, 0) and beyond[9] == (1, 0)
    assert DecodePlan(False, frozenset(), ScanFilter()).as_tuple()[7] == (-(2**63), 2**63 - 1)


def test_the_reader_takes_queue_id_copy_kind_and_tags_filters_and_leaves_the_rest():
    reader = CommitLogReader({"path": "/nowhere", "pushdown": "true"})
    kept = [EqualTo(("topic",), 1), In(("tags",), ("a", None)), LessThanOrEqual(("queue_id",), 1.5)]
    taken = [EqualTo(("copy_kind",), "retry"), In(("tags",), ("a", "b")), GreaterThan(("queue_id",), 1),
             LessThanOrEqual(("queue_id",), 3), In(("copy_kind",), ("retry", "original"))]
    assert reader.pushFilters(kept + taken) == kept
    assert reader.filter.copy_kinds == {"retry"} and reader.filter.tags == {"a", "b"}
    assert (reader.filter.queue_id.low, reader.filter.queue_id.high) == (2, 3)
    with pytest.raises(ValueError, match="decoder is one of"):
        CommitLogReader({"path": "/nowhere", "decoder": "fast"})


@pytest.fixture(scope="module")
def retry_store(tmp_path_factory) -> Path:
    return build_retry_store(tmp_path_factory.mktemp("columnar") / "store")


def test_spark_reads_the_same_with_either_decoder(spark, retry_store):
    compiled_df = spark.read.format("rocketmq_commitlog").option("body", "true").load(str(retry_store))
    python_df = (spark.read.format("rocketmq_commitlog").option("body", "true").option("decoder", "python")
                 .load(str(retry_store)))
    assert compiled_df.count() > 100
    assertDataFrameEqual(compiled_df, python_df)


@pytest.mark.parametrize("condition", [
    "queue_id = 1",
    "queue_id >= 1 and queue_id < 3",
    "copy_kind = 'dead_letter'",
    "copy_kind in ('retry', 'scheduled', 'resent')",
    "tags = 'paid'",
    "tags in ('paid', 'nope')",
    "topic = 'Orders' and copy_kind = 'original' and queue_id <= 2 and tags = 'refund'",
    "copy_kind = 'no such kind'",
])
def test_pushed_filters_are_exact_on_every_pushed_column(spark, retry_store, condition):
    everything = spark.read.format("rocketmq_commitlog").load(str(retry_store)).cache()
    pushed = spark.read.format("rocketmq_commitlog").option("pushdown", "true").load(str(retry_store)).filter(condition)
    assertDataFrameEqual(pushed, everything.filter(condition))
