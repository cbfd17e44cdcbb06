"""Offset resets on a live cluster through the console (`mqlens serve --namesrv`): a group offline
is previewed, then reset to the earliest message (its lag and `mqadmin consumerProgress` agree, and
a consumer receives everything again) and by time; a group online is reset through its consumers
(INVOKE_BROKER_TO_RESET_OFFSET); roles, bad input and the audit entry."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.cluster.console import console_on
from tests.cluster.rocketmq_fixture import RMQ_FIXTURE
from tests.cluster.test_remoting_fixture import consumer_progress_rows, unique
from tests.live_server import wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}


def reset_url(group: str) -> str:
    return f"/api/groups/{group}/offsets/reset"


def test_an_offline_group_is_previewed_then_reset_to_earliest_and_by_time(rocketmq, tmp_path):
    topic, group, count = unique("ResetTopic"), unique("ResetGroup"), 8
    rocketmq.produce(topic, count, unique("r"))
    rocketmq.run("consume", group, topic, str(count), "60")
    consumed = {row: offsets for row, offsets in consumer_progress_rows(
        rocketmq.mqadmin("consumerProgress", "-g", group)).items() if row[0] == topic}
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        preview = client.post(reset_url(group), json={"topic": topic, "to": "earliest", "dry_run": True}).json()
        assert (preview["applied"], preview["complete"], preview["consumers_online"]) == (False, True, False)
        assert {(topic, q["broker"], q["queue_id"]): (q["max_offset"], q["before"]) for q in preview["queues"]} \
            == consumed
        assert all(q["after"] == q["min_offset"] and q["lag_before"] == 0 for q in preview["queues"])
        assert sum(q["lag_after"] for q in preview["queues"]) == count
        assert client.get(f"/api/groups/{group}").json()["lag"] == 0  # a preview moves nothing

        page = client.post(f"/groups/{group}/offsets/reset", headers=HTML, data={"topic": topic, "to": "earliest"})
        assert page.status_code == 200 and 'data-testid="consumers-offline"' in page.text and "broker-a" in page.text

        done = client.post(reset_url(group), json={"topic": topic, "to": "earliest", "reason": "replay"}).json()
        assert (done["applied"], done["through"], done["complete"]) == (True, "offsets", True)
        assert client.get(f"/api/groups/{group}").json()["lag"] == count
        progress = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
        assert sum(high - committed for (name, _, _), (high, committed) in progress.items() if name == topic) == count
        [entry] = client.get("/api/audit", params={"action": "reset_cluster_offsets",
                                                   "target": f"group:{group}"}).json()["entries"]
        assert (entry["reason"], entry["outcome"], entry["detail"]["result"]["through"]) == ("replay", "ok", "offsets")

        rocketmq.run("consume", group, topic, str(count), "60")  # receives every message again

        # RocketMQ's search by time: a time after every message names each queue's last message.
        later = client.post(reset_url(group), json={"topic": topic, "to": {"time": int(time.time() * 1000) + 60_000},
                                                    "dry_run": True}).json()
        filled = [q for q in later["queues"] if q["max_offset"] > q["min_offset"]]
        assert filled and all(q["after"] == q["max_offset"] - 1 for q in filled)
        by_time = client.post(reset_url(group), json={"topic": topic, "to": {"time": 0}}).json()
        assert by_time["through"] == "offsets" and all(q["after"] == q["min_offset"] for q in by_time["queues"])
        assert client.get(f"/api/groups/{group}").json()["lag"] == count

        one = client.post(reset_url(group), json={"topic": topic, "to": {"offset": 1}, "queue_id": 0}).json()
        assert [(q["queue_id"], q["after"]) for q in one["queues"]] == [(0, 1)]
        assert "Traceback" not in server.log_text()


def test_resets_refuse_bad_input_and_callers_without_the_operator_role(rocketmq, tmp_path):
    topic, group = unique("ResetRefused"), unique("ResetRefusedGroup")
    rocketmq.produce(topic, 2, unique("x"))
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        token = client.post("/api/tokens", json={"name": "helpdesk", "role": "support"}).json()["value"]
        support = client.post(reset_url(group), json={"topic": topic, "to": "earliest"},
                              headers={"Authorization": f"Bearer {token}"})
        assert support.status_code == 403 and "operator" in support.json()["error"]
        for body, status in (({"topic": topic, "to": "yesterday"}, 422), ({"topic": topic, "to": {"time": -1}}, 400),
                             ({"topic": "bad topic!", "to": "earliest"}, 400), ({"to": "earliest"}, 422),
                             ({"topic": unique("NoSuchTopic"), "to": "earliest"}, 404),
                             ({"topic": topic, "to": "earliest", "queue_id": 999}, 404)):
            r = client.post(reset_url(group), json=body)
            assert r.status_code == status and r.json()["error"], (body, r.text)
        assert client.post(reset_url("bad group!"), json={"topic": topic, "to": "earliest"}).status_code in (400, 422)
        assert client.get("/api/audit", params={"action": "reset_cluster_offsets"}).json()["entries"] == []


def test_a_group_online_is_reset_through_its_consumers(rocketmq, tmp_path):
    topic, group, count = unique("ResetOnline"), unique("ResetOnlineGroup"), 4
    rocketmq.produce(topic, count, unique("o"))
    consumer = subprocess.Popen([str(RMQ_FIXTURE), "consume", "--dir", str(rocketmq.run_dir), group, topic,
                                 str(count + 1), "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        with console_on(rocketmq, tmp_path) as server, server.client() as client:
            def online_and_caught_up():
                state = client.get(f"/api/groups/{group}").json()
                return state["queues"] and state["lag"] == 0 and sum(q["committed"] for q in state["queues"]) == count

            wait_until(online_and_caught_up, 90, "the consumer online with everything consumed", poll_s=0.5)
            wait_until(lambda: client.post(reset_url(group), json={"topic": topic, "to": "earliest", "dry_run": True})
                       .json()["consumers_online"], 30, "the consumer's connection")
            exact = client.post(reset_url(group), json={"topic": topic, "to": {"offset": 0}})
            assert exact.status_code == 409 and "online" in exact.json()["error"]

            done = client.post(reset_url(group), json={"topic": topic, "to": "earliest"}).json()
            assert (done["applied"], done["through"], done["consumers_online"]) == (True, "consumers", True)
            assert done["queues"] and all(q["after"] == q["min_offset"] for q in done["queues"])
            assert "Traceback" not in server.log_text()
    finally:
        try:
            rocketmq.produce(topic, 1, unique("last"))  # the consumer's last key: it exits by itself
            consumer.wait(150)
        finally:
            if consumer.poll() is None:
                os.killpg(consumer.pid, signal.SIGKILL)
                consumer.wait(30)
