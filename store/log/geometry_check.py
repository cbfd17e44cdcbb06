"""Whether a store directory's files have the sizes a geometry gives them, told from the file
sizes alone (nothing is opened or mapped): a store opened with another geometry than the one it
was written with fails on its first file, so a command can say which setting to give first."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from store.log.geometry import StoreGeometry
from store.log.paths import StorePaths, is_index_name, is_offset_name


@dataclass(frozen=True)
class GeometryMismatch:
    settings: tuple[str, ...]  # the StoreGeometry fields that size this kind of file
    path: Path
    actual: int
    expected: int


def geometry_mismatch(store_dir: Path, geometry: StoreGeometry) -> GeometryMismatch | None:
    """The first file whose size is not the one `geometry` gives it; None when every file fits."""
    paths = StorePaths(Path(store_dir))
    kinds = [
        (("commitlog_file_size",), _files(paths.commitlog, is_offset_name), geometry.commitlog_file_size),
        (("cq_file_size",), _queue_files(paths.consumequeue), geometry.cq_file_size),
        (("index_slots", "index_entries"), _files(paths.index, is_index_name), geometry.index_file_size),
    ]
    for settings, files, expected in kinds:
        for path in files:
            actual = path.stat().st_size
            if actual != expected:
                return GeometryMismatch(settings, path, actual, expected)
    return None


def _files(directory: Path, named) -> list[Path]:
    if not directory.is_dir():
        return []
    return [directory / name for name in sorted(os.listdir(directory)) if named(name)]


def _queue_files(consumequeue: Path) -> list[Path]:
    if not consumequeue.is_dir():
        return []
    return [path for topic in sorted(consumequeue.iterdir()) if topic.is_dir()
            for queue in sorted(topic.iterdir()) if queue.is_dir()
            for path in _files(queue, is_offset_name)]
