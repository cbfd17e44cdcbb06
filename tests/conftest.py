"""Shared fixtures: the golden RocketMQ store (copied before use) and fresh stores."""

from __future__ import annotations

import dataclasses
import json
import shutil
import stat
from pathlib import Path

import pytest

from store.geometry import StoreGeometry

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "golden" / "rocketmq-4.9.8-store"
GOLDEN_GEOMETRY = StoreGeometry(commitlog_file_size=32768, cq_file_size=80, index_slots=64, index_entries=64)
# The same geometry as the flags of `mqlens` commands.
GOLDEN_GEOMETRY_FLAGS = tuple(arg for name, value in dataclasses.asdict(GOLDEN_GEOMETRY).items()
                              for arg in (f"--{name.replace('_', '-')}", str(value)))


def _require_golden() -> Path:
    if not (GOLDEN_DIR / "manifest.json").is_file():
        pytest.skip(f"golden store not found beside the repository ({GOLDEN_DIR})")
    return GOLDEN_DIR


def read_golden_manifest() -> dict:
    return json.loads((_require_golden() / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def golden_manifest() -> dict:
    return read_golden_manifest()


@pytest.fixture
def golden_store_dir(tmp_path: Path) -> Path:
    """A writable copy of the golden store directory."""
    target = tmp_path / "golden-store"
    shutil.copytree(_require_golden() / "store", target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


def file_digests(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
