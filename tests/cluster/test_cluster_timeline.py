"""The retry timeline on a live cluster (`mqlens serve --namesrv`): a message one group fails until
it is dead-lettered and another group consumes, told from its copies and the RocketMQ clients'
own trace; bad and unknown ids; a broker that does not answer gives a partial answer naming it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, response_to
from store.format import codec, topics
from store.format.hosts import HostAddress
from tests.cluster.console import console_on
from tests.cluster.fake_server import Peer, fake_server_thread, name_server_of
from tests.cluster.test_remoting_fixture import unique
from tests.live_server import LiveServer, free_port, wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}


def kinds(body: dict, group: str | None) -> list[str]:
    return [h["kind"] for h in body["hops"] if h.get("group") == group]


def fail_in_one_group_consume_in_another(rocketmq, topic: str, count: int, failing: str, consuming: str) -> None:
    """`failing` fails each message until it is a dead letter, while `consuming` consumes them."""
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(rocketmq.run, "consume", failing, topic, str(count), "60", "fail", "1"),
                pool.submit(rocketmq.run, "consume", consuming, topic, str(count), "60")]
        for run in runs:
            run.result(timeout=150)


def settled_timeline(client, unique_key: str, failing: str, consuming: str) -> dict:
    """The message's timeline once the brokers have indexed the clients' trace and the dead letter."""
    last: list[str] = []

    def settled() -> dict | None:
        r = client.get(f"/api/messages/{unique_key}/timeline")
        if r.status_code != 200:
            last[:] = [f"{r.status_code} {r.text[:300]}"]
            return None
        body = r.json()
        states = {v["group"]: v["state"] for v in body["verdicts"]}
        traced = {"sent", "consumed"} <= {h["kind"] for h in body["hops"]}
        last[:] = [f"verdicts {states}, hops {[(h['kind'], h.get('group')) for h in body['hops']]}, "
                   f"problems {body['problems']}"]
        return body if traced and states == {failing: "dead_lettered", consuming: "consumed"} else None

    try:
        return wait_until(settled, 180, "the trace and the dead letter to be indexed", poll_s=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last answer: {last}") from None


def traced_message(rocketmq, client, tries: int = 3) -> tuple[str, dict]:
    """A topic holding one message whose producer's trace the broker has indexed, and the message.
    The client sends its trace in the background and, on a loaded host, may drop it as it shuts
    down; then another is sent, to a topic of its own."""
    for _ in range(tries):
        topic = unique("TimelineTopic")
        [sent] = rocketmq.produce(topic, 1, unique("tl"))

        def sent_hop(msg_id: str = sent["msgId"]) -> bool:
            r = client.get(f"/api/messages/{msg_id}/timeline")
            return r.status_code == 200 and "sent" in {h["kind"] for h in r.json()["hops"]}

        try:
            wait_until(sent_hop, 60, "the producer's trace", poll_s=1)
            return topic, sent
        except AssertionError:
            continue
    raise AssertionError(f"no producer trace reached the broker in {tries} messages")


def test_a_dead_lettered_and_a_consumed_message_on_a_cluster_shows_its_hops_and_verdicts(rocketmq, tmp_path):
    failing, consuming = unique("TimelineFail"), unique("TimelineOk")
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        topic, sent = traced_message(rocketmq, client)
        fail_in_one_group_consume_in_another(rocketmq, topic, 1, failing, consuming)
        body = settled_timeline(client, sent["msgId"], failing, consuming)
        assert (body["complete"], body["problems"], body["traced"], body["events"]) == (True, [], True, [])
        assert kinds(body, None) == ["sent", "produced"]
        assert kinds(body, consuming) == ["delivered", "consumed"]
        failed = [h for h in body["hops"] if h.get("group") == failing]
        assert [h["kind"] for h in failed if not h["derived"]] == ["delivered", "failed", "delivered", "failed"]
        assert [h["kind"] for h in failed if h["derived"]] == ["retry_scheduled", "redelivered", "dead_lettered"]
        assert [h["attempt"] for h in failed if h["kind"] == "failed"] == [1, 2]
        scheduled = next(h for h in failed if h["kind"] == "retry_scheduled")
        assert scheduled["delay_level"] == 3 and scheduled["due_ms"] == scheduled["time_ms"] + 1000  # the 1s levels
        dead = next(h for h in failed if h["kind"] == "dead_lettered")
        assert dead["topic"] == topics.dlq_topic(failing) and "after 1 reconsumes" in dead["detail"]

        by_offset_id = client.get(f"/api/messages/{sent['offsetMsgId']}/timeline").json()
        assert by_offset_id["hops"] == body["hops"] and by_offset_id["verdicts"] == body["verdicts"]

        page = client.get(f"/messages/{sent['msgId']}/timeline", headers=HTML)
        assert page.status_code == 200 and "Traceback" not in page.text
        assert 'class="verdict dead_lettered"' in page.text and 'class="verdict consumed"' in page.text
        assert 'data-testid="client-trace"' in page.text and 'data-testid="partial-answer"' not in page.text
        assert page.text.count('data-kind="failed"') == 2 and f"/messages/{sent['offsetMsgId']}" in page.text
        twin = client.get(f"/messages/{sent['msgId']}/timeline.json").json()
        assert {c["topic"] for c in twin["copies"]} == {topic, topics.SCHEDULE_TOPIC, topics.retry_topic(failing),
                                                         topics.dlq_topic(failing)}
        assert twin["message"]["topic"] == topic and set(twin["dead_letters"]) == {failing}
        assert twin["dead_letters"][failing]["route"] == topics.retry_topic(failing)
        assert f'value="{twin["dead_letters"][failing]["offset_msg_id"]}"' in page.text  # the resend form
        assert f'href="/groups/{failing}/dead-letters?key={sent["msgId"]}"' in page.text

        message_page = client.get(f"/messages/{sent['offsetMsgId']}", headers=HTML)
        assert f'href="/messages/{sent["msgId"]}/timeline"' in message_page.text

        never = sent["offsetMsgId"][:16] + f"{10**12:016X}"  # the broker, at an offset it never wrote
        for missing in (never, "0123456789ABCDEF0123456789ABCDEF"):
            r = client.get(f"/api/messages/{missing}/timeline")
            assert r.status_code == 404 and r.json()["error"], r.text
        assert client.get(f"/messages/{never}/timeline", headers=HTML).status_code == 404
        for malformed in ("not-hex-at-all-xyz", "ABC", "A" * 129):
            r = client.get(f"/api/messages/{malformed}/timeline")
            assert r.status_code == 400 and "malformed message id" in r.json()["error"], r.text
        assert "Traceback" not in server.log_text()


UNIQUE_KEY = "7F00000100000001" + "0" * 15 + "A"  # as an offset id it names port 1: no broker of the cluster


def stored_copy(topic: str, broker_address: str) -> bytes:
    msg = codec.StoredMessage(topic, 0, 0, 4096, 1_700_000_000_000, HostAddress.parse("127.0.0.1:40000"),
                              1_700_000_000_001, HostAddress.parse(broker_address), b"hello",
                              {topics.UNIQ_KEY: UNIQUE_KEY, topics.KEYS: "order-1"})
    return codec.encode(msg)


def test_a_broker_that_does_not_answer_leaves_a_partial_timeline_naming_it(tmp_path):
    namesrv_port = free_port()
    settings = {"namesrv": f"127.0.0.1:{namesrv_port}", "cluster_request_timeout_ms": 500,
                "cluster_deadline_ms": 2000}

    async def silent(peer: Peer, cmd: RemotingCommand) -> None:
        """Reads every request and answers none."""

    alive_address: list[str] = []

    async def holds_the_message(peer: Peer, cmd: RemotingCommand) -> None:
        answer = response_to(cmd, ResponseCode.QUERY_NOT_FOUND)
        if cmd.code == RequestCode.QUERY_MESSAGE and cmd.ext_fields["topic"] == "Orders":
            answer = response_to(cmd, ResponseCode.SUCCESS)
            answer.body = stored_copy("Orders", alive_address[0])
        elif cmd.code == RequestCode.QUERY_TOPIC_CONSUME_BY_WHO:
            answer = response_to(cmd, ResponseCode.SUCCESS)
            answer.body = orjson.dumps({"groupList": []})
        answer.ext_fields.update({"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"})
        await peer.send(answer)

    with fake_server_thread(silent) as dead, fake_server_thread(holds_the_message) as alive:
        alive_address.append(alive)
        name_server = name_server_of({"broker-x": dead, "broker-y": alive}, ["Orders", topics.TRACE_TOPIC])
        with fake_server_thread(name_server, namesrv_port), \
                LiveServer(tmp_path / "data", tmp_path / "server.log", settings) as server, server.client() as client:
            server.start()
            r = client.get(f"/api/messages/{UNIQUE_KEY}/timeline")
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["complete"] is False and body["problems"]
            assert all("broker-x" in p and dead in p for p in body["problems"]), body["problems"]
            assert [h["kind"] for h in body["hops"]] == ["produced"] and body["traced"] is False
            page = client.get(f"/messages/{UNIQUE_KEY}/timeline", headers=HTML)
            assert page.status_code == 200 and 'data-testid="partial-answer"' in page.text and dead in page.text
            gone = client.get(f"/api/messages/{'B' * 32}/timeline")  # nowhere on the broker that answers
            assert gone.status_code == 424 and "broker-x" in gone.json()["error"], gone.text
            assert "Traceback" not in server.log_text()
