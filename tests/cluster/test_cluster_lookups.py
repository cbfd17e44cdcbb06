"""Lookups on a live cluster through the console (`mqlens serve --namesrv`): by offset id, key,
unique key and queue offset answer as mqadmin does, the search box recognises each, the message
page shows the message; a broker that does not answer gives a partial answer naming it in time."""

from __future__ import annotations

import time

import pytest

from cluster.remoting.codes import ResponseCode
from cluster.remoting.command import RemotingCommand, response_to
from tests.cluster.console import console_on
from tests.cluster.fake_server import Peer, fake_server_thread, name_server_of
from tests.cluster.test_remoting_fixture import query_msg_by_id_fields, query_msg_by_key_rows, unique
from tests.live_server import LiveServer, free_port, wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}


def same_message(theirs: dict[str, str], ours: dict) -> None:
    """A message as mqadmin printed it (queryMsgById and the like) and as the console answered it."""
    assert theirs["Topic"] == ours["topic"] and theirs["Keys"] == f"[{' '.join(ours['keys'])}]"
    assert (int(theirs["Queue ID"]), int(theirs["Queue Offset"])) == (ours["queue_id"], ours["queue_offset"])
    assert int(theirs["CommitLog Offset"]) == ours["phys_offset"]
    assert f"UNIQ_KEY={ours['unique_key']}" in theirs["Properties"]


def test_every_lookup_answers_as_mqadmin_does_and_the_pages_show_it(rocketmq, tmp_path):
    topic, keys = unique("LookupTopic"), unique("lookup")
    sent = rocketmq.produce(topic, 3, keys)
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        by_id = client.get(f"/api/messages/by-id/{sent[0]['offsetMsgId']}").json()["message"]
        same_message(query_msg_by_id_fields(rocketmq.mqadmin("queryMsgById", "-i", sent[0]["offsetMsgId"])), by_id)
        assert by_id["body_text"] == "hello 0" and by_id["unique_key"] == sent[0]["msgId"]

        wanted = f"{keys}-1"
        by_key = wait_until(lambda: (b := client.get("/api/messages/by-key", params={"key": wanted,
                                                                                    "topic": topic}).json())
                            ["messages"] and b, 30, "the broker's index to hold the key")
        assert (by_key["complete"], by_key["problems"], by_key["truncated"]) == (True, [], False)
        assert {(m["unique_key"], m["queue_id"], m["queue_offset"]) for m in by_key["messages"]} \
            == query_msg_by_key_rows(rocketmq.mqadmin("queryMsgByKey", "-t", topic, "-k", wanted))
        everywhere = client.get("/api/messages/by-key", params={"key": wanted}).json()
        assert [m["offset_msg_id"] for m in everywhere["messages"]] == [sent[1]["offsetMsgId"]]
        assert topic in everywhere["searched_topics"] and everywhere["complete"] is True

        by_unique = client.get(f"/api/messages/by-unique-key/{sent[2]['msgId']}", params={"topic": topic}).json()
        [copy] = by_unique["messages"]
        same_message(query_msg_by_id_fields(rocketmq.mqadmin("queryMsgByUniqueKey", "-i", sent[2]["msgId"],
                                                             "-t", topic)), copy)

        queue_id, offset = sent[1]["queueId"], sent[1]["queueOffset"]
        at = client.get(f"/api/topics/{topic}/queues/{queue_id}/messages/{offset}").json()["message"]
        theirs = query_msg_by_id_fields(rocketmq.mqadmin("queryMsgByOffset", "-t", topic, "-b", "broker-a",
                                                         "-i", queue_id, "-o", offset))
        same_message(theirs, at)
        assert theirs["OffsetID"] == at["offset_msg_id"] == sent[1]["offsetMsgId"]
        named = client.get(f"/api/topics/{topic}/queues/{queue_id}/messages/{offset}", params={"broker": "broker-a"})
        assert named.json()["message"] == at

        kinds = {}
        for q in (sent[0]["offsetMsgId"], sent[0]["msgId"], f"{keys}-0", f"{topic}:{queue_id}:{offset}"):
            found = client.get("/api/search", params={"q": q}).json()
            kinds[found["recognised_as"]] = [m["offset_msg_id"] for m in found["messages"]]
        assert kinds == {"offset message id": [sent[0]["offsetMsgId"]], "unique key": [sent[0]["offsetMsgId"]],
                         "key": [sent[0]["offsetMsgId"]], "queue offset": [sent[1]["offsetMsgId"]]}
        opened = client.get("/search", params={"q": f"{keys}-2"}, headers=HTML, follow_redirects=False)
        assert (opened.status_code, opened.headers["location"]) == (303, f"/messages/{sent[2]['offsetMsgId']}")

        page = client.get(f"/messages/{sent[0]['offsetMsgId']}", headers=HTML)
        assert page.status_code == 200 and "hello 0" in page.text and sent[0]["msgId"] in page.text
        assert 'data-testid="not-served"' in page.text and "Traceback" not in page.text
        twin = client.get(f"/messages/{sent[0]['offsetMsgId']}.json").json()
        assert twin["message"]["topic"] == topic and twin["body"]["text"] == "hello 0"
        assert "client trace" in twin["not_served"] and twin["copies"] == []
        body = client.get(f"/messages/{sent[0]['offsetMsgId']}/body")
        assert body.content == b"hello 0"

        gone = sent[0]["offsetMsgId"][:16] + f"{10**12:016X}"  # the broker, at an offset it never wrote
        for path in (f"/api/messages/by-id/{gone}", "/api/messages/by-id/7F0000010000291F" + "0" * 16,
                     f"/api/topics/{topic}/queues/{queue_id}/messages/{10**9}",
                     f"/api/topics/{topic}/queues/{queue_id}/messages/0?broker=broker-zz",
                     f"/api/topics/{unique('NoTopic')}/queues/0/messages/0"):
            r = client.get(path)
            assert r.status_code == 404 and r.json()["error"], (path, r.text)
        assert client.get(f"/messages/{gone}", headers=HTML).status_code == 404
        no_topic = client.get("/api/messages/by-key", params={"key": "k", "topic": unique("NoTopic")})
        assert no_topic.status_code == 404 and "no topic" in no_topic.json()["error"]
        assert "Traceback" not in server.log_text()


def test_a_broker_that_does_not_answer_gives_a_partial_answer_naming_it_within_the_deadline(tmp_path):
    namesrv_port = free_port()
    settings = {"namesrv": f"127.0.0.1:{namesrv_port}", "cluster_request_timeout_ms": 500,
                "cluster_deadline_ms": 2000}

    async def silent(peer: Peer, cmd: RemotingCommand) -> None:
        """Reads every request and answers none."""

    async def finds_nothing(peer: Peer, cmd: RemotingCommand) -> None:
        await peer.send(response_to(cmd, ResponseCode.QUERY_NOT_FOUND))

    with fake_server_thread(silent) as dead, fake_server_thread(finds_nothing) as alive:
        name_server = name_server_of({"broker-x": dead, "broker-y": alive}, ["Orders", "Payments"])
        with fake_server_thread(name_server, namesrv_port), \
                LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server, server.client() as client:
            server.start()
            for url, params in (("/api/messages/by-key", {"key": "order-1"}),
                                ("/api/messages/by-unique-key/7F00000100002A9F0000000000000000", {}),
                                ("/api/search", {"q": "order-1"})):
                started = time.monotonic()
                r = client.get(url, params=params)
                assert time.monotonic() - started < 2.5, url
                body = r.json()
                assert r.status_code == 200 and body["complete"] is False and body["messages"] == [], (url, r.text)
                assert body["searched_topics"] == ["Orders", "Payments"]
                [problem] = body["problems"]
                assert "broker-x" in problem and dead in problem and "broker-y" not in problem
            page = client.get("/search", params={"q": "order-1"}, headers=HTML)
            assert page.status_code == 200 and 'data-testid="partial-answer"' in page.text and dead in page.text

            ambiguous = client.get("/api/topics/Orders/queues/0/messages/0")
            assert ambiguous.status_code == 400 and "broker-x, broker-y" in ambiguous.json()["error"]
            started = time.monotonic()
            down = client.get("/api/topics/Orders/queues/0/messages/0", params={"broker": "broker-x"})
            assert down.status_code == 424 and "broker-x" in down.json()["error"] and dead in down.json()["error"]
            assert time.monotonic() - started < 3.0
            assert client.get("/api/topics/Orders/queues/0/messages/0", params={"broker": "broker-y"}
                              ).status_code == 404
            by_id = client.get("/api/messages/by-id/" + "7F0000010000291F" + "0" * 16)  # no broker of the cluster
            assert by_id.status_code == 404 and "no broker this cluster lists" in by_id.json()["error"]
            assert "Traceback" not in server.log_text()
