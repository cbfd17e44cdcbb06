"""Topic and group metadata, consumer offsets and the config files that hold them."""

from __future__ import annotations

import json

import pytest

from store.broker.metadata import GroupConfig, Metadata, MetadataError, TopicConfig, TopicNotFoundError
from store.broker.offsets import ConsumerOffsets, OffsetTableError
from store.errors import InvalidMessageError
from store.log.config_file import ConfigFileError, loads, quote_integer_keys, read_config, write_config
from store.message_store import MessageStore, NewMessage
from tests.conftest import GOLDEN_GEOMETRY, file_digests
from tests.store.helpers import small_config

FASTJSON_OFFSETS = """{
\t"offsetTable":{
\t\t"TopicTest@GID_golden":{0:8,1:8,2:8,3:8},
\t\t"%RETRY%GID_golden@GID_golden":{0:3}
\t}
}"""


def test_fastjson_integer_keys_are_quoted_and_strings_left_alone():
    assert loads(FASTJSON_OFFSETS)["offsetTable"]["TopicTest@GID_golden"] == {"0": 8, "1": 8, "2": 8, "3": 8}
    assert loads('{"dataVersion":{"counter":0},"offsetTable":{1:2, 18 :0}}')["offsetTable"] == {"1": 2, "18": 0}
    text = '{"a": "x,1:2", "b": [1, 2], "c": {"3": 4}, "d": "q\\",5:6"}'
    assert quote_integer_keys(text) == text


def test_config_file_keeps_a_backup_and_falls_back_to_it(tmp_path):
    path = tmp_path / "config" / "x.json"
    assert read_config(path) is None
    write_config(path, {"v": 1})
    write_config(path, {"v": 2})
    assert read_config(path) == {"v": 2}
    assert json.loads((tmp_path / "config" / "x.json.bak").read_text()) == {"v": 1}
    path.write_text('{"v": 3')  # torn by a crash in the middle of a write
    assert read_config(path) == {"v": 1}
    path.write_text("")
    assert read_config(path) == {"v": 1}
    (tmp_path / "config" / "x.json.bak").write_text("not json")
    path.write_text("{oops")
    with pytest.raises(ConfigFileError, match=r"x\.json"):
        read_config(path)


def test_consumer_offsets_read_rocketmq_form_and_persist_standard_json(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "consumerOffset.json").write_text(FASTJSON_OFFSETS)
    offsets = ConsumerOffsets(config)
    assert offsets.get("TopicTest", "GID_golden", 2) == 8
    assert offsets.get("%RETRY%GID_golden", "GID_golden", 0) == 3
    assert offsets.get("TopicTest", "GID_other", 0) is None
    offsets.commit("TopicTest", "GID_golden", 2, 11)
    offsets.commit("TopicNew", "GID_golden", 0, 1)
    with pytest.raises(ValueError):
        offsets.commit("TopicNew", "GID_golden", 0, -1)
    offsets.persist()
    saved = json.loads((config / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["TopicTest@GID_golden"] == {"0": 8, "1": 8, "2": 11, "3": 8}
    reloaded = ConsumerOffsets(config)
    assert reloaded.of_group("GID_golden") == {"TopicTest": {0: 8, 1: 8, 2: 11, 3: 8},
                                               "%RETRY%GID_golden": {0: 3}, "TopicNew": {0: 1}}


@pytest.mark.parametrize("content", ['{"offsetTable": []}', '{"offsetTable": {"no-at-sign": {"0": 1}}}',
                                     '{"offsetTable": {"T@G": {"x": 1}}}', "[1, 2]"])
def test_consumer_offsets_refuse_a_malformed_table(tmp_path, content):
    (tmp_path / "consumerOffset.json").write_text(content)
    with pytest.raises(OffsetTableError):
        ConsumerOffsets(tmp_path)


def test_store_creates_topics_on_first_send_and_keeps_them(tmp_path):
    with MessageStore.open(tmp_path, small_config()) as store:
        store.put(NewMessage(topic="Orders", body=b"a"))
        assert store.metadata.topic("Orders") == TopicConfig("Orders", queues=4)
        with pytest.raises(InvalidMessageError, match="queues 0 to 3"):
            store.put(NewMessage(topic="Orders", body=b"a", queue_id=4))
        store.put(NewMessage(topic="Orders", body=b"late", delay_level=3))
        assert store.metadata.topic("SCHEDULE_TOPIC_XXXX").queues == 18
        store.put_topic(TopicConfig("Orders", queues=8))
        assert store.put(NewMessage(topic="Orders", body=b"a", queue_id=7)).queue_id == 7
        store.metadata.put_group(GroupConfig("GID_orders", max_reconsume_times=3, retry_queues=2))
        store.put(NewMessage(topic="%RETRY%GID_orders", body=b"r", queue_id=1))
        store.put(NewMessage(topic="%DLQ%GID_orders", body=b"d"))
        store.offsets.commit("Orders", "GID_orders", 0, 1)
    with MessageStore.open(tmp_path, small_config()) as store:
        assert [(t.name, t.queues) for t in store.metadata.topics()] == [
            ("%DLQ%GID_orders", 1), ("%RETRY%GID_orders", 2), ("Orders", 8), ("SCHEDULE_TOPIC_XXXX", 18)]
        assert store.metadata.group("GID_orders").max_reconsume_times == 3
        assert store.metadata.group("GID_unknown") == GroupConfig("GID_unknown")
        assert store.offsets.get("Orders", "GID_orders", 0) == 1


def test_topics_can_be_closed_to_sends_and_auto_creation_turned_off(tmp_path):
    with MessageStore.open(tmp_path, small_config(auto_create_topics=False)) as store:
        with pytest.raises(TopicNotFoundError, match="does not exist"):
            store.put(NewMessage(topic="Orders", body=b"a"))
        store.put_topic(TopicConfig("Orders", queues=2, perm=4))
        with pytest.raises(InvalidMessageError, match="does not accept messages"):
            store.put(NewMessage(topic="Orders", body=b"a"))
        store.put_topic(TopicConfig("Orders", queues=2))
        assert store.put(NewMessage(topic="Orders", body=b"a")).queue_id in (0, 1)
        assert store.commitlog.end > 0


@pytest.mark.parametrize("config", [TopicConfig("bad/name"), TopicConfig("T", queues=0), TopicConfig("T", perm=64)])
def test_bad_topic_settings_are_refused(tmp_path, config):
    with pytest.raises(ValueError):
        Metadata(tmp_path).put_topic(config)


@pytest.mark.parametrize("changes", [{"name": "a b"}, {"name": "a@b"}, {"max_reconsume_times": -1},
                                     {"consume_mode": "fifo"}, {"message_model": "p2p"}, {"retry_queues": 0}])
def test_bad_group_settings_are_refused(tmp_path, changes):
    values = {"name": "G", **changes}
    with pytest.raises(MetadataError):
        Metadata(tmp_path).put_group(GroupConfig(**values))


def test_a_store_without_config_gets_its_topics_from_the_consume_queues(golden_store_dir):
    before = file_digests(golden_store_dir)
    with MessageStore.open(golden_store_dir, small_config(geometry=GOLDEN_GEOMETRY), read_only=True) as store:
        found = {t.name: t.queues for t in store.metadata.topics()}
        on_disk = {topic: max(q for q, _, _ in queues) + 1 for topic, queues in store.topics().items()}
        assert found == on_disk
        assert "%DLQ%GID_golden" in found
    assert file_digests(golden_store_dir) == before
