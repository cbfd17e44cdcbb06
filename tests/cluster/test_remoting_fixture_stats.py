"""Topic stats, queue offsets, consumer connections and groups, consumer offsets and pulls by queue offset
against a real RocketMQ 4.9.8 broker, compared with mqadmin. Each test uses its own topic and group."""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pytest

from cluster.remoting.broker import CONSOLE_GROUP, BrokerAdmin, TopicNotOnBroker
from cluster.remoting.codes import ResponseCode
from cluster.remoting.namesrv import NameServerAdmin
from tests.cluster.mqadmin_tables import consumer_progress_rows
from tests.cluster.test_remoting_fixture import (
    BROKER,
    eventually,
    query_msg_by_id_fields,
    unique,
    with_admins,
)

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first


def table_rows(text: str, header: str) -> list[list[str]]:
    """The whitespace-split rows under the line starting with `header`, up to the first blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def human_ms(ms: int) -> str:
    """How mqadmin prints a time (UtilAll.timeMillisToHumanString2, local time); empty for 0."""
    if ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def topic_status_rows(text: str) -> dict[tuple[str, int], tuple[int, int, str]]:
    return {(row[0], int(row[1])): (int(row[2]), int(row[3]), " ".join(row[4:]))
            for row in table_rows(text, "#Broker Name")}


def test_topic_stats_and_queue_offsets_match_topic_status(rocketmq):
    topic = unique("StatsTopic")
    sent = rocketmq.produce(topic, 7, unique("stats"))

    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        stats = await broker.topic_stats(BROKER, topic)
        queues = [queue_id for _, _, queue_id in stats.queues]
        bounds = {q: (await broker.min_offset(BROKER, topic, q), await broker.max_offset(BROKER, topic, q))
                  for q in queues}
        stored = {q: [await broker.pull_one(BROKER, topic, q, offset) for offset in range(*bounds[q])]
                  for q in queues}
        by_time = {}
        for q, messages in stored.items():
            times = [0, *(m.store_timestamp for m in messages), 2**62]
            by_time[q] = {ms: await broker.offset_by_time(BROKER, topic, q, ms) for ms in times}
        with pytest.raises(TopicNotOnBroker) as missing:
            await broker.topic_stats(BROKER, unique("NotHere"))
        clusters = await namesrv.topics_of_cluster("DefaultCluster"), await namesrv.topics_of_cluster(unique("C"))
        return stats, bounds, stored, by_time, missing.value, clusters

    stats, bounds, stored, by_time, missing, (of_cluster, of_unknown) = with_admins(rocketmq, body)
    theirs = topic_status_rows(rocketmq.mqadmin("topicStatus", "-t", topic))
    ours = {(broker_name, q): (s.min_offset, s.max_offset, human_ms(s.last_update_ms))
            for (t, broker_name, q), s in stats.queues.items() if t == topic}
    assert ours == theirs and len(ours) == len(stats.queues)
    assert {q: (s.min_offset, s.max_offset) for (_, _, q), s in stats.queues.items()} == bounds
    assert sum(high - low for low, high in bounds.values()) == len(sent)
    sent_at = {(int(line["queueId"]), int(line["queueOffset"])): line["msgId"] for line in sent}
    assert {(m.queue_id, m.queue_offset): m.unique_key for ms in stored.values() for m in ms} == sent_at
    for (_, _, q), s in stats.queues.items():
        if s.max_offset:
            assert s.last_update_ms == stored[q][-1].store_timestamp
        messages = stored[q]
        for ms, offset in by_time[q].items():
            later = [m.queue_offset for m in messages if m.store_timestamp >= ms]
            # the first message stored at or after the time; the last one when all are older
            assert offset == (later[0] if later else max(s.min_offset, s.max_offset - 1)), (q, ms)
    assert missing.response_code == ResponseCode.TOPIC_NOT_EXIST and missing.address == BROKER
    assert topic in of_cluster and "TBW102" in of_cluster and of_unknown == []


async def until_no_consumer(broker: BrokerAdmin, group: str, deadline_s: float = 30.0):
    deadline = time.monotonic() + deadline_s
    while (connections := await broker.consumer_connections(BROKER, group)) is not None:
        if time.monotonic() > deadline:
            return connections
        await asyncio.sleep(0.2)
    return None


def consumer_connection_parts(text: str):
    clients = sorted(tuple(row) for row in table_rows(text, "#ClientId"))
    subscriptions = dict((row[0], " ".join(row[1:])) for row in table_rows(text, "#Topic"))
    settings = dict(re.findall(r"^(ConsumeType|MessageModel|ConsumeFromWhere): (\S+)$", text, re.MULTILINE))
    return clients, subscriptions, settings


def consumer_config_fields(text: str) -> dict[str, str]:
    """getConsumerConfig's `name   =  value` lines."""
    return {name: value.strip() for name, value in re.findall(r"^(\w+)\s+=  (.*)$", text, re.MULTILINE)}


def test_consumer_connections_groups_and_offsets_match_mqadmin(rocketmq):
    topic, group = unique("ConnTopic"), unique("ConnGroup")
    rocketmq.produce(topic, 4, unique("conn"))
    with ThreadPoolExecutor(1) as pool:
        # The consumer waits for a fifth message, so it stays online until the test sends it.
        consumer = pool.submit(rocketmq.run, "consume", group, topic, "5", "120")

        async def online(namesrv: NameServerAdmin, broker: BrokerAdmin):
            async def consumed_all():
                stats = await broker.consume_stats(BROKER, group)
                return sum(p.consumer_offset for (t, _, _), p in stats.queues.items() if t == topic) == 4

            assert await eventually(consumed_all, 60)
            connections = await eventually(lambda: broker.consumer_connections(BROKER, group))
            stats = await broker.consume_stats(BROKER, group)
            offsets = {key: await broker.consumer_offset(BROKER, group, key[0], key[2]) for key in stats.queues}
            return (connections, await broker.subscription_groups(BROKER),
                    await broker.topics_consumed_by(BROKER, topic), offsets,
                    await broker.consumer_connections(BROKER, unique("NeverOnline")))

        connections, groups, consumed_by, offsets, never_online = with_admins(rocketmq, online)
        clients, subscriptions, settings = consumer_connection_parts(
            rocketmq.mqadmin("consumerConnection", "-g", group))
        progress = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
        config = consumer_config_fields(rocketmq.mqadmin("getConsumerConfig", "-g", group))
        rocketmq.produce(topic, 1, unique("last"))
        consumer.result(timeout=150)

    gone = with_admins(rocketmq, lambda namesrv, broker: until_no_consumer(broker, group))
    assert sorted((c.client_id, c.address, c.language, c.version_name) for c in connections.clients) == clients
    assert [c.version_name for c in connections.clients] == ["V4_9_8"]
    assert {t: s.expression for t, s in connections.subscriptions.items()} == subscriptions == {
        topic: "*", f"%RETRY%{group}": "*"}
    assert all(s.topic == t and s.expression_type == "TAG" and s.tags == []
               for t, s in connections.subscriptions.items())
    assert settings == {"ConsumeType": connections.consume_type, "MessageModel": connections.message_model,
                        "ConsumeFromWhere": connections.consume_from_where}
    assert connections.message_model == "CLUSTERING" and connections.consume_type == "CONSUME_PASSIVELY"
    mine = groups[group]
    assert (mine.name, mine.consume_enable, mine.broadcast_enable, mine.retry_queues, mine.retry_max_times,
            mine.broker_id, mine.which_broker_when_slow) == (
        config["groupName"], config["consumeEnable"] == "true", config["consumeBroadcastEnable"] == "true",
        int(config["retryQueueNums"]), int(config["retryMaxTimes"]), int(config["brokerId"]),
        int(config["whichBrokerWhenConsumeSlowly"]))
    assert consumed_by == [group]
    assert offsets == {key: row[1] for key, row in progress.items()}
    assert never_online is None and gone is None


def message_track_groups(text: str) -> list[str]:
    return sorted(re.findall(r"MessageTrack \[consumerGroup=([^,]+),", text))


def test_pull_one_matches_query_msg_by_offset_and_moves_no_offset(rocketmq):
    topic, group, keys = unique("PullTopic"), unique("PullGroup"), unique("pull")
    sent = rocketmq.produce(topic, 3, keys)
    rocketmq.run("consume", group, topic, "3", "60")

    async def committed(namesrv: NameServerAdmin, broker: BrokerAdmin):
        async def consumed_all():
            stats = await broker.consume_stats(BROKER, group)
            return sum(p.consumer_offset for (t, _, _), p in stats.queues.items() if t == topic) == 3

        return await eventually(consumed_all)

    assert with_admins(rocketmq, committed)
    before = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))

    async def pulls(namesrv: NameServerAdmin, broker: BrokerAdmin):
        first = sent[0]
        queue_id, offset = int(first["queueId"]), int(first["queueOffset"])
        pulled = [await broker.pull_one(BROKER, topic, int(line["queueId"]), int(line["queueOffset"]))
                  for line in sent]
        again = await broker.pull_one(BROKER, topic, queue_id, offset, group=group)
        at_max = await broker.pull_one(BROKER, topic, queue_id, await broker.max_offset(BROKER, topic, queue_id))
        far = await broker.pull_one(BROKER, topic, queue_id, 10**9)
        return (pulled, again, at_max, far, await broker.consume_stats(BROKER, CONSOLE_GROUP),
                await broker.subscription_groups(BROKER), await broker.topics_consumed_by(BROKER, topic))

    pulled, again, at_max, far, console_stats, groups, consumed_by = with_admins(rocketmq, pulls)
    after = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
    assert before == after and sum(row[1] for (t, _, _), row in after.items() if t == topic) == 3
    assert not [key for key in console_stats.queues if key[0] == topic]  # the pulls committed nothing
    assert CONSOLE_GROUP in groups  # but the broker made the group on the first pull
    assert [m.unique_key for m in pulled] == [line["msgId"] for line in sent]
    assert again == pulled[0] and at_max is None and far is None

    message, line = pulled[1], sent[1]
    printed = rocketmq.mqadmin("queryMsgByOffset", "-t", topic, "-b", "broker-a", "-i", line["queueId"],
                               "-o", line["queueOffset"])
    theirs = query_msg_by_id_fields(printed)
    assert theirs["OffsetID"] == message.offset_msg_id == line["offsetMsgId"]
    assert theirs["Topic"] == topic and theirs["Keys"] == f"[{keys}-1]" == f"[{' '.join(message.keys)}]"
    assert (int(theirs["Queue ID"]), int(theirs["Queue Offset"])) == (message.queue_id, message.queue_offset)
    assert int(theirs["CommitLog Offset"]) == message.phys_offset
    assert f"UNIQ_KEY={message.unique_key}" in theirs["Properties"]
    assert Path(theirs["Message Body Path"]).read_bytes() == message.body == b"hello 1"
    assert message_track_groups(printed) == consumed_by == [group]
