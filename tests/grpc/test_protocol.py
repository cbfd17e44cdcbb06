"""The gRPC front at the protocol level, driven with the server's own stubs: what a hostile or
broken client gets back for bad requests (the protocol's status codes, never a broken call or a
hung stream), and the settings every kind of client is told."""

from __future__ import annotations

import gzip
import time
import uuid

import grpc
import pytest

from app.grpc.protocol import definition_pb2 as pb
from app.grpc.protocol import service_pb2 as spb
from app.grpc.protocol import service_pb2_grpc
from tests.grpc.conftest import endpoint_of, grpc_live_server

Code = pb.Code
TOPIC = "Payments"


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory):
    """One server for the module: each test uses topics and groups of its own where state matters."""
    with grpc_live_server(tmp_path_factory.mktemp("protocol")) as server:
        server.start()
        yield server


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(endpoint_of(grpc_server)) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def meta(client_id: str = "test@1@1@x") -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-request-id", str(uuid.uuid4()))]


def message(body: bytes = b"hello", topic: str = TOPIC, **system) -> pb.Message:
    system.setdefault("message_id", uuid.uuid4().hex.upper()[:32])
    system.setdefault("message_type", pb.NORMAL)
    system.setdefault("body_encoding", pb.IDENTITY)
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(**system))


def send(stub, msg: pb.Message) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=meta(), timeout=10)


def receive(stub, group: str = "g1", topic: str = TOPIC, timeout: float = 10, **fields) -> list:
    fields.setdefault("invisible_duration", {"seconds": 30})
    request = spb.ReceiveMessageRequest(group=pb.Resource(name=group), message_queue=pb.MessageQueue(
        topic=pb.Resource(name=topic)), batch_size=fields.pop("batch_size", 16), **fields)
    return list(stub.ReceiveMessage(request, metadata=meta(), timeout=timeout))


@pytest.mark.parametrize(("msg", "code"), [
    (message(topic="bad topic!"), Code.ILLEGAL_TOPIC),
    (message(topic="%DLQ%billing"), Code.FORBIDDEN),
    (message(topic="RMQ_SYS_TRACE_TOPIC"), Code.FORBIDDEN),
    (message(body=b""), Code.MESSAGE_BODY_EMPTY),
    (message(body=b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE),
    (message(body=gzip.compress(b"\0" * (5 * 1024 * 1024)), body_encoding=pb.GZIP), Code.MESSAGE_BODY_TOO_LARGE),
    (message(body=b"not gzip", body_encoding=pb.GZIP), Code.MESSAGE_CORRUPTED),
    (message(message_id=""), Code.ILLEGAL_MESSAGE_ID),
    (message(message_id="../../etc"), Code.ILLEGAL_MESSAGE_ID),
    (message(tag="a||b"), Code.ILLEGAL_MESSAGE_TAG),
    (message(keys=["two words"]), Code.ILLEGAL_MESSAGE_KEY),
    (message(message_type=pb.FIFO), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=pb.NORMAL, message_group="g"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=pb.DELAY), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=pb.PRIORITY), Code.UNSUPPORTED),
    (message(message_type=pb.DELAY, delivery_timestamp={"seconds": int(time.time()) + 3 * 86400}),
     Code.ILLEGAL_DELIVERY_TIME),
])
def test_a_bad_message_is_refused_with_the_protocols_code(stub, msg, code):
    answer = send(stub, msg)
    assert answer.status.code == code, answer.status
    assert answer.status.message


def test_a_reserved_property_is_refused(stub):
    msg = message()
    msg.user_properties["UNIQ_KEY"] = "mine"
    assert send(stub, msg).status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_a_request_without_a_message_or_with_two_is_refused(stub):
    empty = stub.SendMessage(spb.SendMessageRequest(), metadata=meta(), timeout=10)
    two = stub.SendMessage(spb.SendMessageRequest(messages=[message(), message()]), metadata=meta(), timeout=10)
    assert (empty.status.code, two.status.code) == (Code.BAD_REQUEST, Code.BAD_REQUEST)


def test_a_resend_of_the_same_message_id_is_stored_once(stub, grpc_server):
    msg = message(b"once", keys=["k-once"])
    first, again = send(stub, msg), send(stub, msg)
    assert first.status.code == again.status.code == Code.OK
    assert first.entries[0].message_id == again.entries[0].message_id == msg.system_properties.message_id
    assert first.entries[0].offset == again.entries[0].offset
    with grpc_server.client() as api:
        copies = api.get(f"/api/messages/by-unique-key/{msg.system_properties.message_id}").json()["messages"]
    assert len(copies) == 1


def test_receive_refusals(stub):
    sql = receive(stub, filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    bad_tags = receive(stub, filter_expression=pb.FilterExpression(type=pb.TAG, expression="a|| ||b"))
    bad_group = receive(stub, group="no spaces allowed")
    short = receive(stub, invisible_duration={"nanos": 5})
    assert [r[0].status.code for r in (sql, bad_tags, bad_group, short)] == [
        Code.ILLEGAL_FILTER_EXPRESSION, Code.ILLEGAL_FILTER_EXPRESSION, Code.ILLEGAL_CONSUMER_GROUP,
        Code.ILLEGAL_INVISIBLE_TIME]


def test_a_long_poll_answers_before_the_clients_deadline(stub):
    started = time.monotonic()
    answers = receive(stub, topic="Quiet", timeout=2.0, long_polling_timeout={"seconds": 20})
    took = time.monotonic() - started
    assert answers[0].status.code == Code.MESSAGE_NOT_FOUND and answers[-1].HasField("delivery_timestamp")
    assert 1.0 <= took < 2.0


def test_a_long_poll_wakes_up_for_a_new_message(stub, grpc_server):
    import threading

    answers: list = []
    poll = threading.Thread(target=lambda: answers.extend(
        receive(stub, group="waiter", topic="Wake", timeout=20, long_polling_timeout={"seconds": 15})))
    poll.start()
    time.sleep(0.5)  # the poll is waiting (a missed wake-up would hold it for 15 s)
    started = time.monotonic()
    assert send(stub, message(b"wake", topic="Wake")).status.code == Code.OK
    poll.join(20)
    assert time.monotonic() - started < 5
    assert answers[0].status.code == Code.OK and answers[1].message.body == b"wake"
    delivered = answers[1].message.system_properties
    assert delivered.delivery_attempt == 1 and delivered.receipt_handle
    assert delivered.body_encoding == pb.IDENTITY and delivered.body_digest.type == pb.CRC32


def test_bad_handles_and_missing_client_ids(stub):
    ack = stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name="g1"), topic=pb.Resource(name=TOPIC),
                                                entries=[spb.AckMessageEntry(message_id="x", receipt_handle="junk")]),
                          metadata=meta(), timeout=10)
    change = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="g1"), topic=pb.Resource(name=TOPIC), receipt_handle="junk",
        invisible_duration={"seconds": 10}), metadata=meta(), timeout=10)
    no_entries = stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name="g1"), topic=pb.Resource(name=TOPIC)),
                                 metadata=meta(), timeout=10)
    heartbeat = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), timeout=10)
    assert (ack.status.code, change.status.code, no_entries.status.code, heartbeat.status.code) == (
        Code.INVALID_RECEIPT_HANDLE, Code.INVALID_RECEIPT_HANDLE, Code.BAD_REQUEST, Code.CLIENT_ID_REQUIRED)


def test_routes(stub):
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NewTopic"), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])), metadata=meta(), timeout=10)
    system = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="RMQ_SYS_TRANS_HALF_TOPIC")),
                             metadata=meta(), timeout=10)
    assert route.status.code == Code.OK and len(route.message_queues) == 4
    queue = route.message_queues[0]
    assert queue.broker.id == 0 and queue.broker.endpoints.addresses[0].port == 1
    assert set(queue.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    assert system.status.code == Code.TOPIC_NOT_FOUND


def _settings_reply(stub, settings: pb.Settings) -> spb.TelemetryCommand:
    stream = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=meta("tele@1@1@x"), timeout=10)
    return next(stream)


def test_telemetry_tells_a_consumer_the_groups_retry_policy(stub, grpc_server):
    with grpc_server.client() as api:
        assert api.put("/api/groups/ledger", json={"max_reconsume_times": 4, "consume_mode": "orderly"}
                       ).status_code == 200
    reply = _settings_reply(stub, pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name="ledger"), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=TOPIC))])))
    assert reply.status.code == Code.OK
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 5
    assert [d.seconds for d in policy.customized_backoff.next] == [1, 2, 3, 4, 5]  # the server's delay table
    assert reply.settings.subscription.fifo and reply.settings.subscription.long_polling_timeout.seconds > 0


def test_telemetry_tells_a_producer_the_largest_body_and_its_retries(stub):
    reply = _settings_reply(stub, pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
        topics=[pb.Resource(name=TOPIC)])))
    assert reply.status.code == Code.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.backoff_policy.max_attempts == 3
    assert reply.settings.backoff_policy.HasField("exponential_backoff")


def test_a_command_the_server_does_not_take_is_refused_on_the_stream(stub):
    command = spb.TelemetryCommand(print_thread_stack_trace_command=spb.PrintThreadStackTraceCommand(nonce="n"))
    stream = stub.Telemetry(iter([command]), metadata=meta(), timeout=10)
    assert next(stream).status.code == Code.UNSUPPORTED


def test_calls_are_counted_by_method_and_code(stub, grpc_server):
    def counts() -> dict[str, float]:
        with grpc_server.client() as api:
            lines = api.get("/metrics").text.splitlines()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines
                if line.startswith("mqlens_grpc_requests_total{") and 'method="SendMessage"' in line}

    ok, illegal = (f'mqlens_grpc_requests_total{{code="{c}",method="SendMessage"}}' for c in ("OK", "ILLEGAL_TOPIC"))
    before = counts()
    send(stub, message(topic="bad topic!"))
    send(stub, message())
    after = counts()
    assert after[ok] - before.get(ok, 0) == 1 and after[illegal] - before.get(illegal, 0) == 1
