"""The console on a cluster of two real brokers (broker-a and broker-b): every answer merges both
and equals mqadmin's; broker-b killed in the middle of a search, paused, restarted; a broker that
registers and then never answers. One two-broker cluster for the file (`two_brokers`)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from cluster.remoting.command import RemotingCommand
from cluster.remoting.fastjson import loads_fastjson
from tests.cluster.console import console_on
from tests.cluster.fake_server import Peer, fake_server_thread
from tests.cluster.second_broker import registered_broker
from tests.cluster.test_cluster_console import cluster_list, topic_status_rows
from tests.cluster.test_cluster_lookups import same_message
from tests.cluster.test_remoting_fixture import (
    consumer_progress_rows,
    query_msg_by_id_fields,
    query_msg_by_key_rows,
    unique,
)
from tests.cluster.test_remoting_fixture_stats import consumer_connection_parts
from tests.live_server import wait_until

pytestmark = pytest.mark.slow  # real RocketMQ brokers: handed out first

HTML = {"Accept": "text/html"}
BROKER_B_HOST = "7F00000100002AA9"  # an offset message id's store host: 127.0.0.1:10921


def topic_on_both(two_brokers, prefix: str) -> str:
    topic = unique(prefix)
    two_brokers.cluster.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-w", "4", "-r", "4")
    return topic


def send_to(two_brokers, topic: str, key: str, broker: str) -> None:
    """One message with `key` to queue 0 of `broker` (mqadmin sendMessage)."""
    two_brokers.cluster.mqadmin("sendMessage", "-t", topic, "-p", f"to {broker}", "-k", key, "-b", broker, "-i", "0")


def found_by_key(client, key: str, topic: str | None = None, want: int = 1) -> dict | None:
    """The key search's answer once it is complete and holds `want` messages (the brokers index
    asynchronously), else None."""
    params = {"key": key, **({"topic": topic} if topic else {})}
    body = client.get("/api/messages/by-key", params=params).json()
    return body if body.get("complete") and len(body.get("messages", [])) == want else None


def test_every_answer_merges_both_brokers_and_equals_mqadmin(two_brokers, tmp_path):
    two_brokers.ensure_running()
    rocketmq = two_brokers.cluster
    topic, group, shared = topic_on_both(two_brokers, "TwoTopic"), unique("TwoGroup"), unique("shared")
    with ThreadPoolExecutor(3) as pool:  # each mqadmin is a JVM start: seed and ask in parallel
        producing = pool.submit(rocketmq.produce, topic, 8, unique("two"))  # round robin over 8 queues, 4 a broker
        for sending in [pool.submit(send_to, two_brokers, topic, shared, b) for b in ("broker-a", "broker-b")]:
            sending.result()
        sent = producing.result()
        on_b = [s for s in sent if s["offsetMsgId"].startswith(BROKER_B_HOST)]
        assert len(on_b) == 4, sent
        copy_on_b = on_b[0]
        queue_id, offset = copy_on_b["queueId"], copy_on_b["queueOffset"]
        theirs = {args[0]: pool.submit(rocketmq.mqadmin, *args) for args in (
            ("clusterList",), ("topicList",), ("topicRoute", "-t", topic), ("topicStatus", "-t", topic),
            ("queryMsgByUniqueKey", "-i", copy_on_b["msgId"], "-t", topic),
            ("queryMsgById", "-i", copy_on_b["offsetMsgId"]),
            ("queryMsgByOffset", "-t", topic, "-b", "broker-b", "-i", queue_id, "-o", offset))}
        with console_on(rocketmq, tmp_path) as server, server.client() as client:
            check_both_brokers_listed(client, topic, {name: theirs[name].result() for name in
                                                      ("clusterList", "topicList", "topicRoute", "topicStatus")})
            check_lookups_merged(client, rocketmq, topic, shared, copy_on_b, theirs)
            check_group_progress(client, rocketmq, topic, group)
            assert "Traceback" not in server.log_text()


def check_both_brokers_listed(client, topic: str, theirs: dict[str, str]) -> None:
    clusters = client.get("/api/clusters").json()
    assert (clusters["complete"], clusters["problems"]) == (True, [])
    assert sorted((c["name"], b["name"], b["broker_id"], b["address"], b["version"])
                  for c in clusters["clusters"] for b in c["brokers"]) == cluster_list(theirs["clusterList"])
    assert {b["name"] for c in clusters["clusters"] for b in c["brokers"]} == {"broker-a", "broker-b"}

    topics = client.get("/api/topics").json()
    assert (topics["complete"], topics["problems"]) == (True, [])
    listed = {line.strip() for line in theirs["topicList"].splitlines() if line.strip()}
    assert topic in {t["name"] for t in topics["topics"]} <= listed
    [ours] = [t for t in topics["topics"] if t["name"] == topic]
    printed = theirs["topicRoute"]
    route = loads_fastjson(printed[printed.index("{"): printed.rindex("}") + 1])
    per_broker = {}
    for queue in ours["queue_offsets"]:
        per_broker[queue["broker"]] = per_broker.get(queue["broker"], 0) + 1
    assert per_broker == {q["brokerName"]: q["readQueueNums"] for q in route["queueDatas"]} \
        == {"broker-a": 4, "broker-b": 4}
    assert {(q["broker"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in ours["queue_offsets"]} \
        == topic_status_rows(theirs["topicStatus"])


def check_lookups_merged(client, rocketmq, topic: str, shared: str, copy_on_b: dict[str, str],
                         theirs: dict[str, Future[str]]) -> None:
    merged = wait_until(lambda: found_by_key(client, shared, topic, want=2), 30, "both brokers to index the key")
    assert {(m["unique_key"], m["queue_id"], m["queue_offset"]) for m in merged["messages"]} \
        == query_msg_by_key_rows(rocketmq.mqadmin("queryMsgByKey", "-t", topic, "-k", shared))
    assert {m["body_text"] for m in merged["messages"]} == {"to broker-a", "to broker-b"}
    everywhere = wait_until(lambda: found_by_key(client, shared, want=2), 30, "the key in every topic")
    assert {m["offset_msg_id"] for m in everywhere["messages"]} == {m["offset_msg_id"] for m in merged["messages"]}

    [by_unique] = client.get(f"/api/messages/by-unique-key/{copy_on_b['msgId']}").json()["messages"]
    same_message(query_msg_by_id_fields(theirs["queryMsgByUniqueKey"].result()), by_unique)
    assert by_unique["offset_msg_id"] == copy_on_b["offsetMsgId"]

    by_id = client.get(f"/api/messages/by-id/{copy_on_b['offsetMsgId']}").json()["message"]
    same_message(query_msg_by_id_fields(theirs["queryMsgById"].result()), by_id)

    at_offset = f"/api/topics/{topic}/queues/{copy_on_b['queueId']}/messages/{copy_on_b['queueOffset']}"
    at = client.get(at_offset, params={"broker": "broker-b"}).json()["message"]
    printed = query_msg_by_id_fields(theirs["queryMsgByOffset"].result())
    same_message(printed, at)
    assert printed["OffsetID"] == at["offset_msg_id"] == copy_on_b["offsetMsgId"]
    unnamed = client.get(at_offset)
    assert unnamed.status_code == 400 and "broker-a, broker-b" in unnamed.json()["error"]


def check_group_progress(client, rocketmq, topic: str, group: str) -> None:
    """A consumer online on both brokers' queues (it waits for one more key, so it stays until the
    test sends it): its progress equals consumerProgress and its connection consumerConnection."""
    with ThreadPoolExecutor(1) as pool:
        # 10 distinct keys: the 8, the shared one (two messages, one a broker) and one sent at the end
        consumer = pool.submit(rocketmq.run, "consume", group, topic, "10", "120")
        try:
            def caught_up() -> dict | None:
                body = client.get(f"/api/groups/{group}").json()
                committed = sum(q["committed"] for q in body.get("queues", []) if q["topic"] == topic)
                return body if body.get("complete") and committed == 10 else None

            progress = wait_until(caught_up, 90, "the consumer to commit all ten on both brokers", poll_s=0.5)
            expected = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
            assert {broker for _, broker, _ in expected} == {"broker-a", "broker-b"}
            assert {(q["topic"], q["broker"], q["queue_id"]): (q["max_offset"], q["committed"])
                    for q in progress["queues"]} == expected
            assert progress["lag"] == sum(hi - lo for hi, lo in expected.values())

            def online() -> dict | None:
                connections = (client.get(f"/groups/{group}.json").json().get("group") or {}).get("connections")
                return connections if connections and connections["clients"] else None

            state = wait_until(online, 30, "the consumer's connection")
            clients, subscriptions, _ = consumer_connection_parts(rocketmq.mqadmin("consumerConnection", "-g", group))
            # The address is that of the client's connection to the broker asked: mqadmin and the console
            # may each ask another broker, so only its host is the same.
            assert sorted((c["client_id"], c["address"].rsplit(":", 1)[0], c["language"], c["version"])
                          for c in state["clients"]) \
                == [(c, address.rsplit(":", 1)[0], language, version) for c, address, language, version in clients]
            assert len(clients) == 1
            assert state["subscriptions"] == subscriptions and state["problems"] == []
        finally:
            rocketmq.produce(topic, 1, unique("last"))
            consumer.result(timeout=150)


def test_broker_b_killed_mid_search_is_named_and_used_again_once_back(two_brokers, tmp_path):
    two_brokers.ensure_running()
    broker_b = two_brokers.broker_b
    topic, key = topic_on_both(two_brokers, "FaultTopic"), unique("fault")
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda broker: send_to(two_brokers, topic, key, broker), ("broker-a", "broker-b")))
    settings = {"cluster_request_timeout_ms": 4000, "cluster_deadline_ms": 6000}
    with console_on(two_brokers.cluster, tmp_path, settings) as server, server.client() as client, \
            ThreadPoolExecutor(1) as pool:
        before = wait_until(lambda: found_by_key(client, key, want=2), 30, "both brokers to index the key")
        [on_a] = [m["offset_msg_id"] for m in before["messages"] if not m["offset_msg_id"].startswith(BROKER_B_HOST)]

        broker_b.pause()  # the search's request to broker-b waits, unread, until the kill
        started = time.monotonic()
        search = pool.submit(client.get, "/api/messages/by-key", params={"key": key})
        wait_until(broker_b.unread_requests, 10, "the search to ask broker-b")
        broker_b.kill()
        answer = search.result(timeout=30)
        assert time.monotonic() - started < 6.0
        body = answer.json()
        assert answer.status_code == 200 and body["complete"] is False, answer.text
        assert [m["offset_msg_id"] for m in body["messages"]] == [on_a]
        [problem] = body["problems"]
        assert "broker-b" in problem and broker_b.address in problem and "broker-a" not in problem
        assert "connection" in problem.lower(), problem  # it died in the middle of the call: said so, no timeout

        def broker_b_shown_down():
            view = client.get("/api/clusters").json()
            shown = [b for c in view["clusters"] for b in c["brokers"] if b["name"] == "broker-b"]
            return view if not shown or not shown[0]["answered"] else None

        down = wait_until(broker_b_shown_down, 30, "the cluster page to show broker-b down or gone")
        assert "broker-a" in {b["name"] for c in down["clusters"] for b in c["brokers"]}
        page = client.get("/cluster", headers=HTML)
        assert page.status_code == 200 and "broker-a" in page.text
        alone = client.get("/api/messages/by-key", params={"key": key})
        assert alone.status_code == 200 and on_a in [m["offset_msg_id"] for m in alone.json()["messages"]]

        broker_b.start()
        back = wait_until(lambda: found_by_key(client, key, want=2), 30, "the console to use broker-b again")
        assert {m["offset_msg_id"] for m in back["messages"]} == {m["offset_msg_id"] for m in before["messages"]}
        view = client.get("/api/clusters").json()
        assert view["complete"] is True, view["problems"]
        assert {b["name"] for c in view["clusters"] for b in c["brokers"] if b["answered"]} == {"broker-a", "broker-b"}
        assert "Traceback" not in server.log_text()


def test_a_registered_broker_that_never_answers_keeps_every_answer_within_the_deadline(two_brokers, tmp_path):
    two_brokers.ensure_running()
    rocketmq = two_brokers.cluster
    topic, key = topic_on_both(two_brokers, "SlowTopic"), unique("slow")
    send_to(two_brokers, topic, key, "broker-a")

    async def silent(peer: Peer, cmd: RemotingCommand) -> None:
        """Reads every request and answers none: a broker that hangs."""

    settings = {"cluster_request_timeout_ms": 1000, "cluster_deadline_ms": 3000}
    with fake_server_thread(silent, socket_factory=rocketmq.socket_factory) as slow, \
            registered_broker(rocketmq, "broker-slow", slow, [topic]), \
            console_on(rocketmq, tmp_path, settings) as server, server.client() as client:
        for url, params in (("/api/messages/by-key", {"key": key}),
                            ("/api/messages/by-key", {"key": key, "topic": topic}), ("/api/clusters", {}),
                            ("/api/topics", {}), (f"/api/groups/{unique('SlowGroup')}", {})):
            started = time.monotonic()
            r = client.get(url, params=params)
            assert time.monotonic() - started < 3.5, url
            body = r.json()
            assert r.status_code == 200 and body["complete"] is False, (url, r.text)
            assert any("broker-slow" in p and slow in p for p in body["problems"]), (url, body["problems"])
            assert not any("broker-a" in p or "broker-b" in p for p in body["problems"]), (url, body["problems"])
            if url.endswith("by-key"):
                assert [m["body_text"] for m in body["messages"]] == ["to broker-a"], url
        slow_port = int(slow.rsplit(":", 1)[1])
        for url, params in ((f"/api/messages/by-id/7F000001{slow_port:08X}{0:016X}", {}),
                            (f"/api/topics/{topic}/queues/0/messages/0", {"broker": "broker-slow"})):
            started = time.monotonic()
            r = client.get(url, params=params)
            assert time.monotonic() - started < 3.5, url
            assert r.status_code == 424 and "broker-slow" in r.json()["error"] and slow in r.json()["error"], r.text
        page = client.get("/cluster", headers=HTML)
        assert page.status_code == 200 and 'data-testid="cluster-problems"' in page.text and slow in page.text
        assert "Traceback" not in server.log_text()
