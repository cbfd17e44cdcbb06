"""The content-search job finds exactly what the console's bounded search finds (the same
compiled scan and matcher), over every split of a store, within a window and topics; its
options are checked before Spark starts; a corrupt record fails in words unless skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.jobs import content_search
from pipeline.options import SourceOptions
from pipeline.segments import segment_files, walk
from store.clock import FakeClock
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from store.search import walk as search_walk
from store.search.matching import ContentQuery

GEOMETRY = StoreGeometry(commitlog_file_size=32 * 1024)
WORDS = ("apple", "banana", "cherry", "durian")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Several segments, three topics, an hour of store times; words in bodies and properties,
    some bodies compressed by size."""
    root = tmp_path_factory.mktemp("search") / "store"
    clock = FakeClock()
    with MessageStore.open(root, StoreConfig(geometry=GEOMETRY, flush="sync"), clock=clock) as s:
        for minute in range(60):
            clock.advance(60_000)
            s.put_many([NewMessage(f"T{n % 3}", f"order {minute}-{n} of {WORDS[(minute + n) % 4]}".encode(),
                                   keys=[f"k-{minute}-{n}"], properties={"note": WORDS[n % 4] * (1 + n % 2)})
                        for n in range(12)])
    assert len(segment_files(root)) > 3
    return root


def console_hits(store: Path, query: ContentQuery) -> list[tuple]:
    segments = [search_walk.Segment(s.base, s.path) for s in segment_files(store)]
    end = segments[-1].base + segment_files(store)[-1].size
    found = [e for e in search_walk.walk(segments, GEOMETRY.commitlog_file_size, end, query, max_hits=10**6,
                                         max_bytes=10**12) if isinstance(e, search_walk.Found)]
    return [(f.message.phys_offset, f.match.where, f.match.property_name, f.match.snippet) for f in found]


def job_hits(spark, store: Path, out: Path, query: ContentQuery, **source) -> list[tuple]:
    counts = content_search.main(spark, SourceOptions(store, GEOMETRY, split_bytes=10_000, **source), out, query)
    rows = spark.read.parquet(str(out)).orderBy("phys_offset").collect()
    assert counts["hits"] == len(rows)
    return [(r.phys_offset, r.matched_in, r.property_name, r.snippet) for r in rows]


@pytest.mark.parametrize("query", [
    ContentQuery("banana"),
    ContentQuery("banana", in_properties=False),
    ContentQuery("bananabanana", in_body=False),
    ContentQuery(r"order 1\d-\d+ of (apple|durian)", regex=True),
    ContentQuery("of", topics=("T1",)),
], ids=["both", "body", "property", "regex", "topic"])
def test_the_job_finds_what_the_console_finds(spark, store, tmp_path, query):
    expected = console_hits(store, query)
    assert len(expected) > 5
    assert job_hits(spark, store, tmp_path / "out", query) == expected


def test_a_window_reads_only_its_segments_and_finds_its_hits(spark, store, tmp_path):
    times = sorted({m.store_timestamp for s in segment_files(store) for m in walk(s)})
    query = ContentQuery("apple", begin_ms=times[20], end_ms=times[30])
    expected = console_hits(store, query)
    assert expected and job_hits(spark, store, tmp_path / "out", query) == expected
    splits = content_search.splits_in_window(SourceOptions(store, GEOMETRY), query)
    assert 0 < len({s.segment.path for s in splits}) < len(segment_files(store))


def test_a_corrupt_record_fails_in_words_unless_skipped(spark, store, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    first = segment_files(damaged)[0]
    data = bytearray(first.path.read_bytes())
    at = data.index(b"order 0-5 of")
    data[at - 60: at] = b"\xff" * 60  # the record's tail fields no longer parse
    first.path.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"{first.path.name} at position"):
        content_search.main(spark, SourceOptions(damaged, GEOMETRY), tmp_path / "out", ContentQuery("order"))
    skipped = job_hits(spark, damaged, tmp_path / "out2", ContentQuery("order"), skip_corrupt=True)
    assert 0 < len(console_hits(store, ContentQuery("order"))) - len(skipped) <= 2


@pytest.mark.parametrize(("args", "words"), [
    ([], "needs --text"),
    (["--text", "(unclosed", "--regex"], "not a regular expression"),
    (["--text", "x", "--in", "headers"], "--in is one of body, properties, both"),
    (["--text", "x", "--since", "yesterday"], "--since is an ISO 8601 time"),
    (["--text", "x", "--since", "2026-11-27T10:00", "--until", "2026-11-27T09:00"], "--since is after --until"),
    (["--text", "y" * 1001], "at most 1000 characters"),
])
def test_bad_options_are_refused_in_words_before_spark_starts(store, tmp_path, capsys, args, words):
    from app.cli import main

    code = main(["pipeline", "run", "content-search", "--store", str(store), "--out", str(tmp_path / "o"), *args])
    assert code == 2 and words in capsys.readouterr().err.replace("\n", " ")


def test_query_options_are_refused_for_other_jobs(store, tmp_path, capsys):
    from app.cli import main

    code = main(["pipeline", "run", "trace", "--store", str(store), "--out", str(tmp_path / "o"), "--text", "x"])
    assert code == 2 and "are for content-search, not trace" in capsys.readouterr().err


def test_the_command_line_runs_the_job(spark, store, tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "out"
    assert main(["pipeline", "run", "content-search", "--store", str(store), "--out", str(out), "--text", "durian",
                 "--in", "body", "--topic", "T2"]) == 0
    expected = console_hits(store, ContentQuery("durian", in_properties=False, topics=("T2",)))
    assert f"content-search: {len(expected):,} hits" in capsys.readouterr().out
    assert spark.read.parquet(str(out)).count() == len(expected)
