"""The delay level table of a store another broker wrote: inferred from its scheduled messages,
given, or its own; `store check` and the timeline use it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.services.timeline import message_timeline
from store.broker.delay_inference import infer_delay_table
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels
from store.log.paths import StorePaths
from store.message_store import MessageStore, NewMessage, StoreConfig
from store.projections.consume_queue import ConsumeQueue
from tests.conftest import BROKER_DELAY_LEVELS, BROKER_GEOMETRY, GOLDEN_GEOMETRY, GOLDEN_GEOMETRY_FLAGS, file_digests
from tests.store.helpers import small_config

BROKER_FLAGS = ("--commitlog-file-size", "65536", "--cq-file-size", "400", "--index-slots", "64",
                "--index-entries", "256")
BROKER_DELAYS = parse_delay_levels(BROKER_DELAY_LEVELS)


def _open(path, delay_levels=None, geometry=BROKER_GEOMETRY):
    return MessageStore.open(path, StoreConfig(geometry=geometry, delay_levels=delay_levels), read_only=True)


def test_the_broker_table_is_inferred_from_the_scheduled_messages(golden_broker_dir):
    before = file_digests(golden_broker_dir)
    with _open(golden_broker_dir) as store:
        source = store.delay_levels_source
        delays = store.delay_levels.delays_ms
        assert source.kind == "inferred" and source.levels_seen == (2, 3, 4)
        assert source.scheduled_messages == 19
        assert "inferred from 19 scheduled messages" in source.text
        for level in source.levels_seen:
            assert delays[level - 1] == BROKER_DELAYS[level - 1]
        assert store.check().problems == []
    assert file_digests(golden_broker_dir) == before


def test_a_given_table_is_used_and_a_wrong_one_is_reported(golden_broker_dir):
    with _open(golden_broker_dir, BROKER_DELAY_LEVELS) as store:
        assert store.delay_levels_source.kind == "given"
        assert store.check().problems == []
    with _open(golden_broker_dir, DEFAULT_DELAY_LEVELS) as store:
        problems = store.check().problems
    assert len(problems) == 19
    assert all("SCHEDULE_TOPIC_XXXX" in p and "--delay-levels" in p for p in problems)


def test_the_older_golden_store_infers_the_default_table(golden_store_dir):
    with _open(golden_store_dir, geometry=GOLDEN_GEOMETRY) as store:
        source = store.delay_levels_source
        assert source.kind == "inferred" and source.levels_seen
        default = parse_delay_levels(DEFAULT_DELAY_LEVELS)
        assert all(store.delay_levels.delays_ms[level - 1] == default[level - 1] for level in source.levels_seen)
        assert store.check().problems == []


def test_store_check_exits_non_zero_whenever_it_reports_a_problem(golden_broker_dir, golden_store_dir):
    def check(store_dir, *flags):
        return subprocess.run([sys.executable, "-m", "app.cli", "store", "check", "--store", str(store_dir), *flags],
                              capture_output=True, text=True, timeout=120)

    inferred = check(golden_broker_dir, *BROKER_FLAGS)
    assert inferred.returncode == 0, inferred.stdout
    assert "delay levels: 1s 1s 2s 2s " in inferred.stdout and "inferred from 19 scheduled" in inferred.stdout
    given = check(golden_broker_dir, *BROKER_FLAGS, "--delay-levels", f"  {BROKER_DELAY_LEVELS} ")
    assert given.returncode == 0 and "(given when the store was opened)" in given.stdout
    wrong = check(golden_broker_dir, *BROKER_FLAGS, "--delay-levels", DEFAULT_DELAY_LEVELS)
    assert wrong.returncode == 1 and wrong.stdout.count("problem: queue SCHEDULE_TOPIC_XXXX") == 19
    bad = check(golden_broker_dir, *BROKER_FLAGS, "--delay-levels", "1s 0m")
    assert bad.returncode == 2 and "--delay-levels: bad delay level '0m'" in bad.stderr
    older = check(golden_store_dir, *GOLDEN_GEOMETRY_FLAGS)
    assert older.returncode == 0, older.stdout


def test_dead_letter_timelines_are_due_when_the_broker_redelivered(golden_broker_dir, golden_broker_manifest):
    keys = [d["queryMsgByKey"]["rows"][0]["msgId"] for d in golden_broker_manifest["deadLetters"]]
    with _open(golden_broker_dir) as store:
        for unique_key in keys:
            hops = [h for h in message_timeline(store, unique_key).hops if h.delay_level and h.due_ms]
            assert hops, f"no scheduled hop in the timeline of {unique_key}"
            for hop in hops:
                assert hop.due_ms - hop.time_ms == BROKER_DELAYS[hop.delay_level - 1], (unique_key, hop)


def test_a_store_of_mqlens_keeps_its_own_table_and_says_so(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config()) as store:
        assert store.delay_levels_source.kind == "default"
        store.put(NewMessage(topic="T", body=b"later", delay_level=2))
    with MessageStore.open(tmp_path / "s", small_config(delay_levels="3s 7s 9s")) as store:
        assert store.delay_levels_source.kind == "given"
        store.put(NewMessage(topic="T", body=b"later", delay_level=3))
        store.set_delay_levels("3s 7s 9s")
        assert store.delay_levels_source.kind == "file"
    with MessageStore.open(tmp_path / "s", small_config(delay_levels="1s"), read_only=True) as store:
        assert store.delay_levels_source.kind == "file" and store.delay_levels.spec == "3s 7s 9s"


def test_a_store_without_its_table_file_gets_back_the_table_its_messages_were_written_with(tmp_path):
    with MessageStore.open(tmp_path / "s", small_config(delay_levels="4s 8m 2h")) as store:
        for level in (1, 2, 3, 3):
            store.put(NewMessage(topic="T", body=b"later", delay_level=level))
    with MessageStore.open(tmp_path / "s", small_config()) as store:
        assert store.delay_levels_source.kind == "inferred"
        assert store.delay_levels.spec.startswith("4s 8m 2h")
        assert store.delay_levels_source.levels_seen == (1, 2, 3)
        assert store.check().problems == []


def test_inference_ignores_units_it_cannot_use(tmp_path):
    """Units whose due time is before their store time, not whole seconds, beyond 40 days, or
    whose record cannot be read give no delay; the level's usable units decide."""
    directory = StorePaths(tmp_path).consumequeue / "SCHEDULE_TOPIC_XXXX" / "0"
    cq = ConsumeQueue("SCHEDULE_TOPIC_XXXX", 0, directory, 20 * 64, writable=True)
    stored = {100: 1_000, 200: 2_000, 300: 3_000, 400: 4_000, 500: None, 600: 6_000, 700: 7_000}
    due = {100: 6_000, 200: 7_000, 300: 3_000 - 1, 400: 4_500, 500: 9_000, 600: 6_000 + 41 * 86_400_000,
           700: 12_000}
    for offset, phys in enumerate(stored):
        cq.put(offset, phys, 100, due[phys])
    inferred = infer_delay_table([cq], stored.get)
    cq.close()
    assert inferred is not None and inferred.source.scheduled_messages == 6
    assert inferred.spec.split()[0] == "5s" and inferred.source.levels_seen == (1,)
    assert inferred.spec.split()[1:] == DEFAULT_DELAY_LEVELS.split()[1:]
    assert infer_delay_table([], stored.get) is None


@pytest.mark.parametrize("spec", ["", "   ", "1s  5s"])
def test_the_setting_takes_a_table_and_ignores_blank(spec, tmp_path):
    from app.config import Settings

    settings = Settings(data_dir=tmp_path, delay_levels=spec)
    assert settings.delay_levels == (None if not spec.strip() else "1s 5s")
