"""Shared fixtures: the golden RocketMQ store (copied before use) and fresh stores."""

from __future__ import annotations

import dataclasses
import json
import shutil
import stat
from pathlib import Path

import pytest

from store.log.geometry import StoreGeometry

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "golden" / "rocketmq-4.9.8-store"
GOLDEN_GEOMETRY = StoreGeometry(commitlog_file_size=32768, cq_file_size=80, index_slots=64, index_entries=64)
# The same geometry as the flags of `mqlens` commands.
GOLDEN_GEOMETRY_FLAGS = tuple(arg for name, value in dataclasses.asdict(GOLDEN_GEOMETRY).items()
                              for arg in (f"--{name.replace('_', '-')}", str(value)))


BROKER_GOLDEN_DIR = GOLDEN_DIR.parent / "rocketmq-4.9.8-broker"
# The broker's own settings (its README): they are in broker.conf, not in the store.
BROKER_GEOMETRY = StoreGeometry(commitlog_file_size=65536, cq_file_size=400, index_slots=64, index_entries=256)
BROKER_DELAY_LEVELS = "1s 1s 2s 2s 3s 3s 4s 4s 5s 5s 6s 6s 7s 7s 8s 8s 9s 9s"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a slow test are handed out first: xdist gives each worker a whole file
    (--dist loadfile; --no-loadscope-reorder keeps this order instead of the files' test counts),
    so a long file left for the end keeps one worker busy while the others idle."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def _require_golden() -> Path:
    if not (GOLDEN_DIR / "manifest.json").is_file():
        pytest.skip(f"golden store not found beside the repository ({GOLDEN_DIR})")
    return GOLDEN_DIR


def read_golden_manifest() -> dict:
    return json.loads((_require_golden() / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def golden_manifest() -> dict:
    return read_golden_manifest()


def copy_golden_store(target: Path) -> Path:
    """A writable copy of the golden store directory at `target`."""
    shutil.copytree(_require_golden() / "store", target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


@pytest.fixture
def golden_store_dir(tmp_path: Path) -> Path:
    """A writable copy of the golden store directory."""
    return copy_golden_store(tmp_path / "golden-store")


@pytest.fixture(scope="session")
def golden_broker_manifest() -> dict:
    if not (BROKER_GOLDEN_DIR / "manifest.json").is_file():
        pytest.skip(f"golden broker store not found beside the repository ({BROKER_GOLDEN_DIR})")
    return json.loads((BROKER_GOLDEN_DIR / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture
def golden_broker_dir(tmp_path: Path, golden_broker_manifest) -> Path:
    """A writable copy of the store a real RocketMQ broker wrote (open it with BROKER_GEOMETRY)."""
    target = tmp_path / "golden-broker-store"
    shutil.copytree(BROKER_GOLDEN_DIR / "store", target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


def file_digests(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
