"""The console attached to a live cluster (`mqlens serve --namesrv`): the Cluster page and
GET /api/clusters against the real RocketMQ fixture and against name servers that are down or
answer with brokers that are; pages that need the embedded store say so with a 409."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest
from fastapi.routing import APIRoute

from app.config import Settings
from app.main import create_app
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, response_to
from cluster.remoting.fastjson import loads_fastjson
from tests.cluster.console import console_on
from tests.cluster.fake_server import Peer, fake_server_thread
from tests.cluster.mqadmin_tables import cluster_list, consumer_progress_rows, topic_status_rows
from tests.cluster.test_remoting_fixture import unique
from tests.cluster.test_remoting_fixture_stats import consumer_connection_parts
from tests.live_server import LiveServer, free_port, wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}


def test_the_cluster_api_and_page_show_what_mqadmin_cluster_list_shows(rocketmq, tmp_path):
    expected = cluster_list(rocketmq.mqadmin("clusterList"))
    assert expected, "mqadmin clusterList listed no broker"
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        body = client.get("/api/clusters").json()
        assert (body["ok"], body["backend"], body["complete"], body["problems"]) == (True, "cluster", True, [])
        assert body["name_servers"] == [rocketmq.namesrv]
        seen = sorted((c["name"], b["name"], b["broker_id"], b["address"], b["version"])
                      for c in body["clusters"] for b in c["brokers"])
        assert seen == expected
        broker = body["clusters"][0]["brokers"][0]
        assert broker["role"] == "master" and broker["answered"] and broker["commitlog_max_offset"] >= 0
        page = client.get("/cluster", headers=HTML)
        assert page.status_code == 200
        for _, name, _, address, version in expected:
            assert name in page.text and address in page.text and version in page.text
        assert client.get("/cluster.json").json()["clusters"] == body["clusters"]
        start = client.get("/", headers=HTML, follow_redirects=False)
        assert (start.status_code, start.headers["location"]) == (303, "/cluster")


def test_a_brokers_settings_are_what_mqadmin_get_broker_config_prints(rocketmq, tmp_path):
    printed = {}
    for line in rocketmq.mqadmin("getBrokerConfig", "-b", "127.0.0.1:10911").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("="):
            printed[key.strip()] = value.strip()
    assert printed.get("brokerName") == "broker-a"
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        body = client.get("/api/clusters/brokers/broker-a/0/settings").json()
        assert (body["address"], body["complete"], body["problems"]) == ("127.0.0.1:10911", True, [])
        assert {k: v.strip() for k, v in body["settings"].items()} == printed
        page = client.get("/cluster/brokers/broker-a/0", headers=HTML)
        assert page.status_code == 200 and "messageDelayLevel" in page.text and "127.0.0.1:10911" in page.text
        assert client.get("/api/clusters/brokers/broker-a/1/settings").status_code == 404
        assert client.get("/api/clusters/brokers/broker-zz/0/settings").status_code == 404


def test_what_needs_the_embedded_store_is_a_clear_409_on_a_cluster(rocketmq, tmp_path):
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        for path in ("/api/dlq/some_group/messages.csv", "/api/config/delay-levels/preview?levels=1s"):
            r = client.get(path)
            assert r.status_code == 409, (path, r.text)
            assert "live RocketMQ cluster" in r.json()["error"] and rocketmq.namesrv in r.json()["error"]
        page = client.get("/topics/Orders/queues/0", headers=HTML)
        assert page.status_code == 409 and "live RocketMQ cluster" in page.text and "Traceback" not in page.text
        produce = client.post("/api/topics/Orders/messages", json={"body": "x"})
        assert produce.status_code == 409 and "live RocketMQ cluster" in produce.json()["error"]
        assert client.get("/api/users").status_code == 200  # the operator database is there as always


def cluster_info(broker_address: str) -> bytes:
    return orjson.dumps({"brokerAddrTable": {"broker-x": {"cluster": "C", "brokerName": "broker-x",
                                                          "brokerAddrs": {"0": broker_address}}},
                         "clusterAddrTable": {"C": ["broker-x"]}})


def test_a_name_server_that_is_down_is_a_banner_and_the_console_recovers_by_itself(tmp_path):
    namesrv_port, dead_broker = free_port(), f"127.0.0.1:{free_port()}"
    settings = {"namesrv": f"127.0.0.1:{namesrv_port}", "cluster_request_timeout_ms": 500,
                "cluster_deadline_ms": 2000}
    with LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server, server.client() as client:
        server.start()
        down = client.get("/api/clusters").json()
        assert (down["backend"], down["complete"], down["clusters"]) == ("cluster", False, [])
        assert f"127.0.0.1:{namesrv_port}" in down["problems"][0] and "no name server answered" in down["problems"][0]
        page = client.get("/cluster", headers=HTML)
        assert page.status_code == 200 and 'data-testid="cluster-problems"' in page.text

        async def name_server(peer: Peer, cmd: RemotingCommand) -> None:
            answer = response_to(cmd, ResponseCode.SUCCESS)
            if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                answer.body = cluster_info(dead_broker)
            await peer.send(answer)

        with fake_server_thread(name_server, namesrv_port):
            back = wait_until(lambda: (b := client.get("/api/clusters").json())["clusters"] and b, 20,
                              "the console to see the name server again")
        [broker] = back["clusters"][0]["brokers"]
        assert (broker["name"], broker["address"], broker["answered"]) == ("broker-x", dead_broker, False)
        assert back["complete"] is False and any("broker-x" in p and dead_broker in p for p in back["problems"])
        assert client.get("/api/clusters").status_code == 200  # the name server gone again: still no 5xx


def test_a_bad_name_server_address_stops_the_start_with_one_line(tmp_path):
    server = LiveServer(tmp_path / "data", tmp_path / "server.log", {"namesrv": "nowhere"})
    with server:
        try:
            server.start(deadline_s=30)
        except AssertionError as exc:
            assert "name server address is host:port" in str(exc)
        else:
            raise AssertionError("the server started with a bad name server address")
        assert "Traceback" not in server.log_text()


def test_the_cluster_page_is_read_with_a_viewer_role_only(tmp_path):
    settings = {"namesrv": f"127.0.0.1:{free_port()}", "cluster_request_timeout_ms": 300,
                "cluster_deadline_ms": 1000}
    with LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server:
        server.start()
        assert httpx.get(f"{server.base_url}/api/clusters", timeout=10).status_code == 401


def placeholder_path(path: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: "1" if m.group(0).endswith(("_id}", "offset}", "version}")) else "G1", path)


SERVED_ON_A_CLUSTER = ("/api/messages/{message_id}/timeline", "/messages/{message_id}/timeline")


def test_no_route_answers_5xx_on_a_cluster(tmp_path):
    """Every route of the app, called with placeholder values, answers below 500 on a cluster, and
    the routes served there never answer that they need the embedded store (409)."""
    settings = {"namesrv": f"127.0.0.1:{free_port()}", "cluster_request_timeout_ms": 300,
                "cluster_deadline_ms": 1000}
    routes = [(route.path, sorted(route.methods - {"HEAD", "OPTIONS"}))
              for route in create_app(Settings(data_dir=tmp_path / "unused")).routes
              if isinstance(route, APIRoute)]
    with LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server, server.client() as client:
        server.start()
        failures = []
        for path, methods in routes:
            for method in methods:
                for headers in ({}, HTML):
                    r = client.request(method, placeholder_path(path), headers=headers,
                                       json={} if method in ("POST", "PUT", "PATCH") else None)
                    if r.status_code >= 500 or (r.status_code == 409 and path in SERVED_ON_A_CLUSTER):
                        failures.append(f"{method} {path} {headers}: {r.status_code} {r.text[:200]}")
        assert failures == [], "\n".join(failures)
        assert "Traceback" not in server.log_text()


def test_topics_on_a_cluster_equal_mqadmin_topic_list_route_and_status(rocketmq, tmp_path):
    topic = unique("ConsoleTopic")
    rocketmq.produce(topic, 9, unique("k"))
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        body = client.get("/api/topics").json()
        assert (body["complete"], body["problems"]) == (True, [])
        listed = {line.strip() for line in rocketmq.mqadmin("topicList").splitlines() if line.strip()}
        names = {t["name"] for t in body["topics"]}
        assert topic in names and names <= listed
        [ours] = [t for t in body["topics"] if t["name"] == topic]
        assert {(q["broker"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in ours["queue_offsets"]} \
            == topic_status_rows(rocketmq.mqadmin("topicStatus", "-t", topic))
        printed = rocketmq.mqadmin("topicRoute", "-t", topic)
        route = loads_fastjson(printed[printed.index("{"): printed.rindex("}") + 1])
        assert ours["queues"] == sum(q["writeQueueNums"] for q in route["queueDatas"])
        assert (ours["readable"], ours["writable"], ours["kind"], ours["system"]) == (True, True, "original", False)
        page = client.get("/topics", headers=HTML)
        assert page.status_code == 200 and topic in page.text
        detail = client.get(f"/topics/{topic}.json").json()["topic"]
        assert detail["messages"] == 9 and detail["last_minute"] == 9 and detail["newest_ms"] is not None
        assert {q["broker"] for q in detail["queues"]} == {"broker-a"}
        assert client.get(f"/topics/{unique('Nope')}", headers=HTML).status_code == 404


def test_group_progress_on_a_cluster_equals_mqadmin_consumer_progress(rocketmq, tmp_path):
    topic, group = unique("ConsoleProgress"), unique("ConsoleGroup")
    rocketmq.produce(topic, 6, unique("p"))
    rocketmq.run("consume", group, topic, "6", "60")
    expected = consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        body = client.get(f"/api/groups/{group}").json()
        assert (body["complete"], body["problems"]) == (True, [])
        ours = {(q["topic"], q["broker"], q["queue_id"]): (q["max_offset"], q["committed"]) for q in body["queues"]}
        assert ours == expected
        assert body["lag"] == sum(q["lag"] for q in body["queues"]) == sum(hi - lo for hi, lo in expected.values())
        assert body["group"]["configured"] is True and body["group"]["message_model_recorded"] is False
        assert group in [g["name"] for g in client.get("/api/groups").json()["groups"]]
        never = client.get(f"/api/groups/{unique('NeverSeen')}").json()
        assert (never["group"]["configured"], never["queues"], never["lag"]) == (False, [], 0)


def test_the_group_pages_on_a_cluster_show_lag_and_the_consumers_online_as_mqadmin(rocketmq, tmp_path):
    topic, group = unique("ConsoleConn"), unique("ConsoleConnGroup")
    rocketmq.produce(topic, 4, unique("c"))
    with ThreadPoolExecutor(1) as pool, console_on(rocketmq, tmp_path) as server, server.client() as client:
        consumer = pool.submit(rocketmq.run, "consume", group, topic, "5", "120")  # stays online for a 5th
        try:
            def online_and_caught_up():
                detail = client.get(f"/groups/{group}.json").json()
                if detail.get("ok") is False:
                    return None
                group_state = detail["group"]
                consumed = sum(o["committed"] for o in group_state["offsets"] if o["topic"] == topic)
                clients = (group_state["connections"] or {}).get("clients")
                return group_state if consumed == 4 and clients else None

            state = wait_until(online_and_caught_up, 90, "the consumer online with all four consumed", poll_s=0.5)
            clients, subscriptions, _ = consumer_connection_parts(rocketmq.mqadmin("consumerConnection", "-g", group))
            assert sorted((c["client_id"], c["address"], c["language"], c["version"])
                          for c in state["connections"]["clients"]) == clients
            assert state["connections"]["subscriptions"] == subscriptions
            page = client.get(f"/groups/{group}", headers=HTML)
            assert page.status_code == 200 and clients[0][0] in page.text and "broker-a" in page.text
            listing = client.get("/groups.json").json()
            [row] = [g for g in listing["groups"] if g["name"] == group]
            assert (row["configured"], row["lag"], row["dead_letters"]) == (True, 0, 0) and row["queues"] >= 1
            assert client.get(f"/groups/{unique('NobodyKnows')}", headers=HTML).status_code == 404
        finally:
            rocketmq.produce(topic, 1, unique("last"))
            consumer.result(timeout=150)
