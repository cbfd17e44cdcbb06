"""The command line reads a store as `serve` would: the lookups take the MQLENS_* settings
(store directory, geometry) when their options are left out, answer key and unique-key lookups
oldest first as mqadmin does, and a geometry the store was not written with is one line of
error, for `serve` too."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from store.message_store import MessageStore
from tests.conftest import GOLDEN_GEOMETRY
from tests.store.helpers import fill, small_config

GEOMETRY_ENV = {f"MQLENS_{name.upper()}": str(value) for name, value in dataclasses.asdict(GOLDEN_GEOMETRY).items()}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory whose store/ was written with the golden geometry: messages 0 to 9 share
    the key group-0, and every message has a unique key of its own."""
    with MessageStore.open(tmp_path / "data" / "store", small_config()) as store:
        fill(store, 12)
    return tmp_path / "data"


@pytest.fixture
def no_settings(monkeypatch):
    for name in [name for name in os.environ if name.startswith("MQLENS_")]:
        monkeypatch.delenv(name)
    return monkeypatch


def lookup(capsys, *args: str) -> list[dict]:
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)["messages"]


def test_lookups_take_the_store_and_its_geometry_from_the_settings(data_dir, no_settings, capsys):
    no_settings.setenv("MQLENS_DATA_DIR", str(data_dir))
    for name, value in GEOMETRY_ENV.items():
        no_settings.setenv(name, value)
    [found] = lookup(capsys, "query-msg-by-key", "-t", "TopicA", "-k", "key-3")
    assert found["keys"] == ["key-3", "group-0"]
    assert lookup(capsys, "query-msg-by-offset", "-t", "TopicA", "-q", "3", "-o", "0")[0]["keys"][0] == "key-3"

    no_settings.setenv("MQLENS_DATA_DIR", str(data_dir.parent / "elsewhere"))
    no_settings.setenv("MQLENS_STORE_DIR", str(data_dir / "store"))
    [by_id] = lookup(capsys, "query-msg-by-id", "-i", found["offset_msg_id"])
    assert by_id["unique_key"] == found["unique_key"]
    assert main(["store", "check"]) == 0
    assert "store is consistent" in capsys.readouterr().out


def test_options_win_over_the_settings(data_dir, no_settings, capsys):
    no_settings.setenv("MQLENS_STORE_DIR", str(data_dir.parent / "nowhere"))
    no_settings.setenv("MQLENS_COMMITLOG_FILE_SIZE", str(1 << 20))
    flags = [arg for name, value in GEOMETRY_ENV.items()
             for arg in (f"--{name.removeprefix('MQLENS_').lower().replace('_', '-')}", value)]
    [found] = lookup(capsys, "query-msg-by-key", "-t", "TopicA", "-k", "key-11", "--store", str(data_dir / "store"),
                     *flags)
    assert found["keys"] == ["key-11", "group-1"]


def test_key_and_unique_key_lookups_list_oldest_first_as_mqadmin(data_dir, no_settings, capsys):
    no_settings.setenv("MQLENS_DATA_DIR", str(data_dir))
    for name, value in GEOMETRY_ENV.items():
        no_settings.setenv(name, value)
    by_key = lookup(capsys, "query-msg-by-key", "-t", "TopicA", "-k", "group-0")
    assert [m["keys"][0] for m in by_key] == [f"key-{n}" for n in range(10)]
    assert [m["phys_offset"] for m in by_key] == sorted(m["phys_offset"] for m in by_key)
    newest = lookup(capsys, "query-msg-by-key", "-t", "TopicA", "-k", "group-0", "--max", "3")
    assert [m["keys"][0] for m in newest] == ["key-7", "key-8", "key-9"]  # the newest three, oldest first

    assert main(["query-msg-by-key", "-t", "TopicA", "-k", "group-0"]) == 0
    printed = [line.split("keys=")[1].split()[0] for line in capsys.readouterr().out.splitlines()
               if "keys=" in line]
    assert printed == [f"key-{n}" for n in range(10)]

    with MessageStore.open(data_dir / "store", small_config()) as store:  # a second copy in TopicA, resent
        store.metadata.update_group("G", max_reconsume_times=0)
        [got] = store.receive("G", "TopicA", 1, 30_000)
        store.nack("G", got.receipt_handle)
        dead = store.get_by_queue_offset("%DLQ%G", 0, 0)
        store.resend_dead_letter(dead.phys_offset, "ops", topic="TopicA")
    copies = lookup(capsys, "query-msg-by-unique-key", "-t", "TopicA", "-i", got.message.unique_key)
    assert len(copies) == 2 and copies[0]["phys_offset"] == got.message.phys_offset < copies[1]["phys_offset"]


def without_settings() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("MQLENS_")}


def test_a_wrong_geometry_is_one_line_of_error_for_serve_and_the_lookups(data_dir, tmp_path):
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--data", str(data_dir), "--port", "0"],
                          capture_output=True, text=True, timeout=120, env=without_settings(),
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    segment = data_dir / "store" / "commitlog" / "00000000000000000000"
    assert line == (f"mqlens: error: {segment} is {GOLDEN_GEOMETRY.commitlog_file_size} bytes, but the store "
                    "geometry makes such a file 1073741824 bytes: give the store's own --commitlog-file-size "
                    "(MQLENS_COMMITLOG_FILE_SIZE)")
    assert not (data_dir / "mqlens.db").exists()  # refused before anything was made

    wrong_index = {**GEOMETRY_ENV, "MQLENS_INDEX_SLOTS": "128"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "query-msg-by-key", "-t", "TopicA", "-k", "key-1"],
                          capture_output=True, text=True, timeout=120,
                          env={**without_settings(), **wrong_index, "MQLENS_DATA_DIR": str(data_dir)},
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "give the store's own --index-slots (MQLENS_INDEX_SLOTS) and --index-entries" in done.stderr
