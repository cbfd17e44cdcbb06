"""The dead-letter inbox and one-click resend on a live cluster: the inbox lists what mqadmin finds in
%DLQ%group without moving any offset, a support user's click sends one copy to the failed group only,
the same click again sends nothing, and a broker that does not answer is named, never a 5xx."""

from __future__ import annotations

import time

import httpx
import pytest

from cluster.remoting.broker import CONSOLE_GROUP, BrokerAdmin
from cluster.remoting.command import RemotingCommand
from cluster.remoting.errors import ResponseError
from cluster.remoting.namesrv import NameServerAdmin
from store.format.hosts import HostAddress
from store.format.ids import create_offset_msg_id
from tests.cluster.console import console_on
from tests.cluster.fake_server import Peer, fake_server_thread, name_server_of
from tests.cluster.test_cluster_console import topic_status_rows
from tests.cluster.test_remoting_fixture import consumer_progress_rows, query_msg_by_id_fields, unique, with_admins
from tests.live_server import LiveServer, free_port, wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}
SUPPORT = ("sam", "sam-support-password")


def offset_id_of(fields: dict[str, str]) -> str:
    """The offset message id of a message as mqadmin queryMsgByUniqueKey printed it."""
    return create_offset_msg_id(HostAddress.parse(fields["Store Host"].lstrip("/")), int(fields["CommitLog Offset"]))


def held_in(rocketmq, topic: str) -> int:
    return sum(hi for _, hi in topic_status_rows(rocketmq.mqadmin("topicStatus", "-t", topic)).values())


def console_offsets_on(rocketmq, topic: str) -> list:
    """The console group's committed offsets on the topic's queues (it must never commit any)."""
    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        [data] = (await namesrv.topic_route(topic)).brokers
        try:
            stats = await broker.consume_stats(data.master_address, CONSOLE_GROUP)
        except ResponseError:
            return []  # the broker knows no offsets of the group at all
        return [key for key in stats.queues if key[0] == topic]

    return with_admins(rocketmq, body)


def sign_in(browser: httpx.Client) -> None:
    """The support user's session cookie on a browser-like client (it sends this server's Origin)."""
    r = browser.post("/login", data={"name": SUPPORT[0], "password": SUPPORT[1], "next": "/"})
    assert r.status_code in (200, 303) and browser.cookies, r.text


def test_the_inbox_lists_the_dead_letters_and_one_click_resends_one_to_the_failed_group_only(rocketmq, tmp_path):
    topic, group, other = unique("DlqTopic"), unique("DlqGroup"), unique("DlqOther")
    count, dlq, retry = 3, f"%DLQ%{group}", f"%RETRY%{group}"
    sent = rocketmq.produce(topic, count, unique("dead"))
    rocketmq.run("consume", other, topic, str(count), "60")
    rocketmq.run("consume", group, topic, str(count), "60", "fail", "1")
    theirs = {line["msgId"]: query_msg_by_id_fields(rocketmq.mqadmin("queryMsgByUniqueKey", "-i", line["msgId"],
                                                                      "-t", dlq)) for line in sent}
    progress = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
    with console_on(rocketmq, tmp_path) as server, server.client() as admin:
        body = admin.get(f"/api/dlq/{group}/messages").json()
        assert (body["complete"], body["problems"], body["total"], body["truncated"]) == (True, [], count, False)
        assert {m["offset_msg_id"] for m in body["messages"]} == {offset_id_of(f) for f in theirs.values()}
        stamps = [m["store_timestamp"] for m in body["messages"]]
        assert stamps == sorted(stamps, reverse=True)
        for row in body["messages"]:
            mine = theirs[row["unique_key"]]
            assert (row["topic"], row["original_topic"], row["group"], row["state"]) == (dlq, topic, group, "waiting")
            assert row["reconsume_times"] == int(mine["Reconsume Times"]) and row["resend"] is None
        first = admin.get(f"/api/dlq/{group}/messages", params={"limit": 2}).json()
        rest = admin.get(f"/api/dlq/{group}/messages", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        assert [m["offset_msg_id"] for m in first["messages"] + rest["messages"]] == \
            [m["offset_msg_id"] for m in body["messages"]] and rest["next_cursor"] is None
        assert group in {m["group"] for m in admin.get("/api/dlq/messages", params={"limit": 500}).json()["messages"]}
        tagged = admin.get(f"/api/dlq/{group}/messages", params={"tag": "TagB"}).json()
        assert (tagged["messages"], tagged["total"]) == ([], 0)
        keyed = wait_until(lambda: (b := admin.get(f"/api/dlq/{group}/messages",
                                                   params={"key": sent[1]["msgId"]}).json())["messages"] and b,
                           30, "the dead letter by its unique key")
        assert [m["unique_key"] for m in keyed["messages"]] == [sent[1]["msgId"]]
        refused = admin.get(f"/api/dlq/{group}/messages", params={"state": "waiting"})
        assert refused.status_code == 400 and "needs the embedded store" in refused.json()["error"]
        assert consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group)) == progress
        assert console_offsets_on(rocketmq, dlq) == []

        assert admin.post("/api/users", json={"name": SUPPORT[0], "password": SUPPORT[1], "role": "support"}
                          ).status_code == 201
        chosen = body["messages"][0]
        retry_before = held_in(rocketmq, retry)
        click = {"group": group, "message_id": chosen["offset_msg_id"], "destination": "group", "confirm": "true",
                 "idempotency_key": unique("click")}
        with httpx.Client(base_url=server.base_url, timeout=30, headers={"Origin": server.base_url}) as browser:
            sign_in(browser)
            page = browser.get(f"/groups/{group}/dead-letters", headers=HTML)
            assert page.status_code == 200 and chosen["offset_msg_id"] in page.text
            done = browser.post("/dead-letters/resend", data=click, headers=HTML)
            assert done.status_code == 200, done.text
            assert held_in(rocketmq, retry) == retry_before + 1
            again = browser.post("/dead-letters/resend", data=click, headers=HTML)
            assert again.status_code == 200 and held_in(rocketmq, retry) == retry_before + 1
            once_more = browser.post("/dead-letters/resend", data={**click, "idempotency_key": unique("click")},
                                     headers=HTML)
            assert once_more.status_code == 409 and "resent already" in once_more.text
            foreign = browser.post(f"/api/messages/{chosen['offset_msg_id']}/resend", json={},
                                   headers={"Origin": "https://elsewhere.example"})
            assert foreign.status_code == 403 and held_in(rocketmq, retry) == retry_before + 1

        row = next(m for m in admin.get(f"/api/dlq/{group}/messages").json()["messages"]
                   if m["offset_msg_id"] == chosen["offset_msg_id"])
        assert (row["state"], row["resend"]["actor"], row["resend"]["destination"]) == ("resent", SUPPORT[0], retry)
        copy = admin.get(f"/api/messages/by-id/{row['resend']['new_offset_msg_id']}").json()["message"]
        assert (copy["topic"], copy["unique_key"], copy["reconsume_times"]) == (retry, chosen["unique_key"], 0)
        assert copy["properties"]["RETRY_TOPIC"] == topic and "DELAY" not in copy["properties"]
        assert copy["properties"]["MQLENS_RESENT_FROM"] == chosen["offset_msg_id"]
        dead = admin.get(f"/api/messages/by-id/{chosen['offset_msg_id']}").json()["message"]
        assert copy["properties"]["ORIGIN_MESSAGE_ID"] == dead["properties"]["ORIGIN_MESSAGE_ID"]
        assert (copy["keys"], copy["tags"], copy["body_text"]) == (dead["keys"], dead["tags"], dead["body_text"])

        out = rocketmq.run("consume", group, topic, "1", "60")
        assert "distinctKeys=1 deliveries=1 done=true" in out, out
        after = admin.get(f"/api/groups/{group}").json()
        assert sum(q["lag"] for q in after["queues"] if q["topic"] == retry) == 0
        assert admin.get(f"/api/groups/{other}").json()["lag"] == 0
        consumed = next(m for m in admin.get(f"/api/dlq/{group}/messages").json()["messages"]
                        if m["offset_msg_id"] == chosen["offset_msg_id"])
        assert consumed["resend"]["copy_state"] == "consumed"

        assert admin.get(f"/api/dlq/{unique('NoSuchGroup')}/messages").status_code == 404
        assert admin.post(f"/api/dlq/{unique('NoSuchGroup')}/resend",
                          json={"message_ids": [chosen["offset_msg_id"]]}).status_code == 404
        assert admin.post("/api/messages/NOT-AN-ID/resend", json={}).status_code in (400, 422)
        assert admin.get(f"/api/dlq/{group}/messages", params={"cursor": "x"}).status_code == 400
        rest_copy = admin.post(f"/api/messages/{body['messages'][1]['offset_msg_id']}/resend", json={},
                               headers={"Idempotency-Key": unique("rest")})
        assert rest_copy.status_code == 200 and rest_copy.json()["destination"] == retry
        assert held_in(rocketmq, retry) == retry_before + 2
        assert "Traceback" not in server.log_text()


def test_a_broker_that_does_not_answer_is_named_by_the_inbox_within_the_deadline(tmp_path):
    namesrv_port, group = free_port(), "billing"
    settings = {"namesrv": f"127.0.0.1:{namesrv_port}", "cluster_request_timeout_ms": 500,
                "cluster_deadline_ms": 2000}

    async def silent(peer: Peer, cmd: RemotingCommand) -> None:
        """Reads every request and answers none."""

    with fake_server_thread(silent) as dead:
        brokers = {"broker-x": dead}

        with fake_server_thread(name_server_of(brokers, ["Orders", f"%DLQ%{group}"]), namesrv_port), \
                LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server, server.client() as client:
            server.start()
            for url in (f"/api/dlq/{group}/messages", "/api/dlq/messages"):
                started = time.monotonic()
                r = client.get(url)
                assert time.monotonic() - started < 3.0, url
                body = r.json()
                assert r.status_code == 200 and (body["complete"], body["messages"]) == (False, []), r.text
                assert any("broker-x" in p and dead in p for p in body["problems"])
            page = client.get(f"/groups/{group}/dead-letters", headers=HTML)
            assert page.status_code == 200 and 'data-testid="inbox-problems"' in page.text
            resend = client.post(f"/api/dlq/{group}/resend", json={"message_ids": ["7F0000010000291F" + "0" * 16]})
            assert 400 <= resend.status_code < 500, resend.text
            assert "Traceback" not in server.log_text()
