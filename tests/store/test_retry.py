"""Consumer send-back: retry through SCHEDULE_TOPIC_XXXX, dead letters, against RocketMQ's own records."""

from __future__ import annotations

import pytest

from store.broker.metadata import GroupConfig, MetadataError
from store.clock import FakeClock
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import GOLDEN_DIR, GOLDEN_GEOMETRY, read_golden_manifest
from tests.store.helpers import small_config

GOLDEN_STORE_HOST = "10.108.115.217:10911"


@pytest.fixture
def golden_rw(golden_store_dir):
    """A copy of the golden store opened for writing, as RocketMQ's broker would hold it."""
    config = StoreConfig(geometry=GOLDEN_GEOMETRY, store_host=GOLDEN_STORE_HOST, flush="sync")
    with MessageStore.open(golden_store_dir, config, clock=FakeClock(1_800_000_000_000)) as store:
        yield store


def golden_send_backs():
    if not (GOLDEN_DIR / "manifest.json").is_file():
        return []  # the golden tests elsewhere report the missing data
    manifest = read_golden_manifest()
    records = {r["physicalOffset"]: r for r in manifest["commitlogRecords"]}
    return [(s, records[s["wroteOffset"]]) for s in manifest["sends"] if s["api"] == "consumerSendMsgBack"]


@pytest.mark.parametrize(("send", "expected"), golden_send_backs(),
                         ids=lambda v: v.get("what", "record"))
def test_send_back_writes_what_rocketmq_wrote(golden_rw, send, expected):
    result, route = golden_rw.send_back(send["originalCommitLogOffset"], send["group"], send["requestedDelayLevel"])
    written = golden_rw.read(result.phys_offset)
    assert (written.topic, written.queue_id) == (expected["topic"], expected["queueId"])
    assert written.reconsume_times == expected["reconsumeTimes"]
    assert written.properties_text() == expected["propertiesString"]
    assert (written.flag, written.sys_flag, written.born_timestamp) == (
        expected["flag"], expected["sysFlag"], expected["bornTimestamp"])
    assert written.stored_body == golden_rw.read(send["originalCommitLogOffset"]).stored_body
    assert route.dead_letter == send["toDLQ"]
    assert golden_rw.check().ok


def test_each_failure_waits_longer_until_the_dead_letter_queue(tmp_path):
    """delay level 3 + reconsume times for each retry, then %DLQ% with reconsume times 17."""
    with MessageStore.open(tmp_path, small_config(), clock=FakeClock(1_700_000_000_000)) as store:
        current = store.put(NewMessage(topic="Orders", body=b"pay", tags="TagA", keys=["o-1"]))
        levels = []
        for _ in range(16):
            result, route = store.send_back(current.phys_offset, "GID_pay")
            assert not route.dead_letter and result.topic == "SCHEDULE_TOPIC_XXXX"
            levels.append(route.delay_level)
            current = result
        assert levels == list(range(3, 19))
        last, route = store.send_back(current.phys_offset, "GID_pay")
        dead = store.read(last.phys_offset)
        assert route.dead_letter and (dead.topic, dead.reconsume_times) == ("%DLQ%GID_pay", 17)
        assert dead.properties["RETRY_TOPIC"] == "Orders" and dead.properties["DELAY"] == "0"


def test_group_max_reconsume_times_and_bad_groups(tmp_path):
    with MessageStore.open(tmp_path, small_config()) as store:
        store.metadata.put_group(GroupConfig("GID_short", max_reconsume_times=3))
        current = store.put(NewMessage(topic="Orders", body=b"x"))
        for expected_dead in (False, False, False, True):
            current, route = store.send_back(current.phys_offset, "GID_short")
            assert route.dead_letter == expected_dead
        with pytest.raises(MetadataError):
            store.send_back(current.phys_offset, "bad group")
