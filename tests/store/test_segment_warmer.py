"""The commit log warmer: faults pages in ahead of the writer, never changes them, stops cleanly."""

from __future__ import annotations

import threading

from store.format.recordio import populate
from store.log.mapped_file import PAGE, MappedFile
from store.log.segment_warmer import SegmentWarmer
from tests.live_server import wait_until


def test_populate_keeps_what_is_written(tmp_path):
    f = MappedFile(tmp_path / "seg", 16 * PAGE, writable=True, create=True)
    f.write(PAGE + 10, b"record bytes")
    populate(f.buf, 0, 16 * PAGE)
    assert f.buf[PAGE + 10 : PAGE + 22] == b"record bytes"
    assert f.nonzero_bytes(0) == len(b"record bytes")
    f.close()


def test_warmer_runs_ahead_of_the_writer_across_segments_and_stops(tmp_path):
    size = 8 * PAGE
    segments = [MappedFile(tmp_path / f"seg{i}", size, writable=True, create=True) for i in range(2)]
    segments[0].write(0, b"x" * 100)

    def segment_at(phys):
        i = phys // size
        return segments[i] if i < len(segments) else None

    warmer = SegmentWarmer(segment_at, size, ahead=4 * PAGE, step=PAGE)
    warmer.advance(100)
    wait_until(lambda: warmer._warmed_to >= 4 * PAGE + 100 - 100 % PAGE, 10, "warming ahead", poll_s=0.001)
    warmer.advance(7 * PAGE)  # the ahead window now reaches into the second segment
    wait_until(lambda: warmer._warmed_to >= 11 * PAGE, 10, "warming the next segment", poll_s=0.001)
    assert segments[0].buf[:100] == b"x" * 100
    warmer.stop()
    assert not any(t.name == "mqlens-warmer" for t in threading.enumerate())
    for seg in segments:
        seg.close()  # no export of the mappings is left behind


def test_warmer_keeps_up_with_a_writer_that_moves_by_less_than_a_page(tmp_path):
    """Every piece starts on a page of its segment (madvise refuses anything else), so the warmer
    goes on however the writer's end and the window fall between pages."""
    size = 64 * PAGE
    ahead = 4 * PAGE + 123
    segment = MappedFile(tmp_path / "seg", size, writable=True, create=True)
    warmer = SegmentWarmer(lambda phys: segment if phys < size else None, size, ahead=ahead, step=PAGE)
    for end in range(1000, 40 * PAGE, 1000):
        warmer.advance(end)
        wait_until(lambda end=end: warmer._stopped or warmer._warmed_to >= end + ahead - PAGE, 10,
                   "warming along with the writer", poll_s=0.001)
        assert not warmer._stopped, f"the warmer stopped with the writer at {end}"
    warmer.stop()
    segment.close()


def test_warmer_gives_up_quietly_on_a_read_only_segment(tmp_path):
    path = tmp_path / "seg"
    MappedFile(path, 4 * PAGE, writable=True, create=True).close()
    read_only = MappedFile(path, 4 * PAGE, writable=False)
    warmer = SegmentWarmer(lambda phys: read_only, 4 * PAGE, ahead=2 * PAGE, step=PAGE)
    warmer.advance(0)
    wait_until(lambda: warmer._stopped, 10, "the warmer to give up", poll_s=0.001)
    warmer.stop()
    read_only.close()


def test_a_small_first_load_faults_in_little_beyond_what_it_wrote(tmp_path):
    """On a fresh store every page faulted in is memory touched for the first time (issue #25):
    the warmer keeps 16 MiB ahead of the writer, not 64 MiB a small load never writes. The kernel
    may fault in more around what the warmer asks for (the device's read_ahead_kb: 8 MiB here)."""
    from store.log.geometry import StoreGeometry
    from store.message_store import MessageStore, NewMessage
    from tests.store.helpers import small_config
    from tests.store.test_drop_flushed_pages import cached_bytes

    geometry = StoreGeometry(128 * 1024 * 1024, 20 * 1000, 1000, 4000)
    with MessageStore.open(tmp_path, small_config(geometry=geometry, flush="async")) as store:
        store.put_many([NewMessage("Small", b"s" * 1000) for _ in range(1000)])
        written = store.commitlog.end
        warmer = store.commitlog._warmer
        wait_until(lambda: warmer._warmed_to >= written + 12 * 1024 * 1024, 10, "warming ahead", poll_s=0.01)
        time_for_more = threading.Event()
        time_for_more.wait(0.2)  # a warmer going further than it should would have done so by now
        [segment] = [path for _, path in store.commitlog.segments()]
        assert cached_bytes(segment, 0, geometry.commitlog_file_size) <= written + 40 * 1024 * 1024
