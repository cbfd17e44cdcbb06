"""apache.rocketmq.v2.MessagingService over the embedded store: each RPC checks the caller,
turns the request into the store's and the services' terms, and answers with the protocol's
status. Store calls that may wait for a lock or the disk run on worker threads; sends go through
the REST API's put batcher, so concurrent clients share appends and syncs."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import grpc

from app.grpc import client_settings, messages
from app.grpc.access import Access
from app.grpc.calls import CallCounter, Caller, caller_of, server_stream, unary
from app.grpc.protocol import definition_pb2 as pb
from app.grpc.protocol import service_pb2 as spb
from app.grpc.protocol import service_pb2_grpc
from app.grpc.renewal import AUTO_RENEW_INVISIBLE_MS, AutoRenewer
from app.grpc.statuses import OK, Code, RpcRefusal, status, status_of
from app.grpc.telemetry import TelemetryHub
from app.services.client_sessions import PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER
from app.services.flow import PutGate
from app.services.put_batcher import PutBatcher
from store.broker.metadata import MetadataError, consuming_group
from store.broker.pop import MAX_INVISIBLE_MS, MAX_MESSAGES, MAX_WAIT_MS, MIN_INVISIBLE_MS
from store.broker.pull import PullRequestError, TagFilter
from store.errors import InvalidMessageError
from store.format import topics
from store.message_store import MessageStore

MAX_ACK_ENTRIES = 1000
DEADLINE_MARGIN_MS = 500  # a long poll answers this long before the client's deadline
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
BROKER_ID_MASTER = 0
BROKER_NAME = "mqlens"  # the broker name routes give


@dataclass
class FrontParts:
    """What the RPCs use, made by the app's lifespan."""

    store: MessageStore
    put_batcher: PutBatcher
    put_gate: PutGate
    receive_gate: PutGate
    receive_threads: anyio.CapacityLimiter
    access: Access
    limits: client_settings.ServerLimits
    clients: Any  # app.services.client_sessions.ClientSessions
    counter: CallCounter
    hub: TelemetryHub
    renewer: AutoRenewer


def _counter(front: MessagingFront) -> CallCounter:
    return front.parts.counter


def _group_name(resource: pb.Resource) -> str:
    try:
        return consuming_group(resource.name)
    except (MetadataError, ValueError) as exc:
        raise RpcRefusal(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None


def _topic_name(resource: pb.Resource) -> str:
    try:
        return topics.validate_topic(resource.name)
    except InvalidMessageError as exc:
        raise RpcRefusal(Code.ILLEGAL_TOPIC, str(exc)) from None


def _tag_expression(expression: pb.FilterExpression) -> str:
    if expression.type == pb.SQL:
        raise RpcRefusal(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported: use a tag expression "
                                                         "such as 'TagA||TagB' or '*'")
    text = expression.expression or "*"
    try:
        TagFilter(text)
    except PullRequestError as exc:
        raise RpcRefusal(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
    return text


def _ms_within(value_ms: int, low: int, high: int, code: int, what: str) -> int:
    if not low <= value_ms <= high:
        raise RpcRefusal(code, f"{what} must be between {low} ms and {high} ms, not {value_ms} ms")
    return value_ms


class MessagingFront(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, parts: FrontParts):
        self.parts = parts

    # -- the caller ------------------------------------------------------------------------------
    def _caller(self, context: grpc.aio.ServicerContext) -> tuple[Caller, Any]:
        caller = caller_of(context)
        principal = self.parts.access.principal(caller)
        if caller.client_id:
            self.parts.clients.seen(caller.client_id, address=caller.address, language=caller.language,
                                    version=caller.version)
        return caller, principal

    def _consumer(self, context: grpc.aio.ServicerContext, group: pb.Resource, topic: pb.Resource
                  ) -> tuple[Caller, str, str]:
        """The caller of a consumer's RPC, allowed to consume `topic` as `group` (checked names)."""
        caller, principal = self._caller(context)
        group_name, topic_name = _group_name(group), _topic_name(topic)
        self.parts.access.may_consume(principal, group_name, topic_name)
        return caller, group_name, topic_name

    # -- routes ----------------------------------------------------------------------------------
    @unary(spb.QueryRouteResponse, _counter)
    async def QueryRoute(self, request, context):
        self._caller(context)
        topic = _topic_name(request.topic)
        store = self.parts.store
        config = store.metadata.topic(topic)
        if config is None:
            if topics.is_system_topic(topic) or not store.metadata.auto_create_topics:
                return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
            queues, perm = store.metadata.default_queues, pb.READ_WRITE
        else:
            queues = config.queues
            perm = {(True, True): pb.READ_WRITE, (True, False): pb.READ, (False, True): pb.WRITE}.get(
                (config.readable, config.writable), pb.NONE)
        broker = pb.Broker(name=BROKER_NAME, id=BROKER_ID_MASTER, endpoints=request.endpoints)
        queues_out = [pb.MessageQueue(topic=request.topic, id=queue_id, permission=perm, broker=broker,
                                      accept_message_types=ACCEPTED_TYPES) for queue_id in range(queues)]
        return spb.QueryRouteResponse(status=OK, message_queues=queues_out)

    @unary(spb.QueryAssignmentResponse, _counter)
    async def QueryAssignment(self, request, context):
        _, group, topic = self._consumer(context, request.group, request.topic)
        config = self.parts.store.metadata.topic(topic)
        if config is None:
            return spb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        # Every receive is served from all of the topic's queues, whichever it names: one assignment will do.
        broker = pb.Broker(name=BROKER_NAME, id=BROKER_ID_MASTER, endpoints=request.endpoints)
        queue = pb.MessageQueue(topic=request.topic, id=0, permission=pb.READ_WRITE, broker=broker,
                                accept_message_types=ACCEPTED_TYPES)
        return spb.QueryAssignmentResponse(status=OK, assignments=[pb.Assignment(message_queue=queue)])

    # -- client sessions -------------------------------------------------------------------------
    @unary(spb.HeartbeatResponse, _counter)
    async def Heartbeat(self, request, context):
        caller, _ = self._caller(context)
        client_id = caller.require_client_id()
        group = request.group.name if request.HasField("group") and request.group.name else None
        self.parts.clients.heartbeat(client_id, _kind(request.client_type), group)
        return spb.HeartbeatResponse(status=OK)

    @unary(spb.NotifyClientTerminationResponse, _counter)
    async def NotifyClientTermination(self, request, context):
        caller, _ = self._caller(context)
        client_id = caller.require_client_id()
        self.parts.clients.terminated(client_id)
        self.parts.hub.end(client_id)
        self.parts.renewer.release_client(client_id)
        return spb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        try:
            caller, _ = self._caller(context)
            client_id = caller.require_client_id()
        except Exception as exc:
            self.parts.counter.count("Telemetry", status_of(exc).code)
            yield spb.TelemetryCommand(status=status_of(exc))
            return
        hub = self.parts.hub
        outbox = hub.attach(client_id)
        reader = asyncio.get_running_loop().create_task(self._read_telemetry(request_iterator, caller, outbox))
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            hub.detach(client_id, outbox)

    async def _read_telemetry(self, request_iterator, caller: Caller, outbox: asyncio.Queue) -> None:
        try:
            async for command in request_iterator:
                answer = self._telemetry_answer(caller, command)
                if answer is not None:
                    self.parts.counter.count("Telemetry", answer.status.code)
                    outbox.put_nowait(answer)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                outbox.put_nowait(None)

    def _telemetry_answer(self, caller: Caller, command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
        which = command.WhichOneof("command")
        if which == "settings":
            try:
                reply = client_settings.answer(command.settings, self.parts.limits, self.parts.store.delay_levels,
                                               self.parts.store.metadata.group)
            except Exception as exc:
                return spb.TelemetryCommand(status=status_of(exc))
            self.parts.hub.settings_received(caller.client_id, command.settings)
            self.parts.clients.settings(caller.client_id, **_session_settings(command.settings, caller))
            return spb.TelemetryCommand(status=OK, settings=reply)
        if which in ("thread_stack_trace", "verify_message_result"):
            return None  # a client's answer to a command this server does not send
        return spb.TelemetryCommand(status=status(Code.UNSUPPORTED, f"the server does not take {which or 'empty'} "
                                                                    "commands"))

    # -- producing -------------------------------------------------------------------------------
    @unary(spb.SendMessageResponse, _counter)
    async def SendMessage(self, request, context):
        caller, principal = self._caller(context)
        if not request.messages:
            raise RpcRefusal(Code.BAD_REQUEST, "no message to send")
        if len(request.messages) > 1:
            raise RpcRefusal(Code.BAD_REQUEST, "one message per SendMessage")
        store = self.parts.store
        sent = messages.outgoing(request.messages[0], max_body_bytes=self.parts.limits.max_body_bytes,
                                 born_host=caller.address, now_ms=store.clock.now_ms(), client=caller.client_id)
        message = sent.message
        self.parts.access.may_produce(principal, message.topic)
        config = store.metadata.topic(message.topic)
        if config is None:  # created by its first send: the topic file is written off the loop
            try:
                config = await anyio.to_thread.run_sync(store.metadata.topic_for_send, message.topic)
            except Exception as exc:
                raise RpcRefusal(Code.TOPIC_NOT_FOUND, str(exc)) from None
        if not config.writable:
            raise RpcRefusal(Code.FORBIDDEN, f"topic {message.topic} does not accept messages (no write permission)")
        if sent.message_group is not None:
            message.queue_id = messages.fifo_queue(sent.message_group, config.queues)
        if sent.message_type == pb.TRANSACTION:
            result = await anyio.to_thread.run_sync(partial(store.put_half, message))
            transaction_id = result.offset_msg_id
        else:
            with self.parts.put_gate.slot():
                [result] = await self.parts.put_batcher.put([message])
            transaction_id = ""
        entry = spb.SendResultEntry(status=OK, message_id=message.unique_key, offset=result.queue_offset,
                                    transaction_id=transaction_id)
        return spb.SendMessageResponse(status=OK, entries=[entry])

    @unary(spb.EndTransactionResponse, _counter)
    async def EndTransaction(self, request, context):
        _, principal = self._caller(context)
        topic = _topic_name(request.topic)
        self.parts.access.may_produce(principal, topic)
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            raise RpcRefusal(Code.BAD_REQUEST, "a transaction ends with COMMIT or ROLLBACK")
        if not request.transaction_id:
            raise RpcRefusal(Code.INVALID_TRANSACTION_ID, "no transaction id")
        end = partial(self.parts.store.end_transaction, request.transaction_id, request.resolution == pb.COMMIT,
                      from_check=request.source == pb.SOURCE_SERVER_CHECK)
        await anyio.to_thread.run_sync(end)
        return spb.EndTransactionResponse(status=OK)

    # -- consuming -------------------------------------------------------------------------------
    @server_stream(spb.ReceiveMessageResponse, _counter)
    async def ReceiveMessage(self, request, context):
        caller, group, topic = self._consumer(context, request.group, request.message_queue.topic)
        tags = _tag_expression(request.filter_expression)
        batch = request.batch_size or 1
        if not 1 <= batch <= MAX_MESSAGES:
            raise RpcRefusal(Code.BAD_REQUEST, f"batch_size must be between 1 and {MAX_MESSAGES}")
        auto_renew = request.auto_renew and not request.HasField("invisible_duration")
        if auto_renew:
            invisible_ms = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible_ms = _ms_within(messages.duration_ms(request.invisible_duration), MIN_INVISIBLE_MS,
                                      MAX_INVISIBLE_MS, Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration")
        wait_ms = 0
        if request.HasField("long_polling_timeout"):
            wait_ms = _ms_within(messages.duration_ms(request.long_polling_timeout), 0, MAX_WAIT_MS,
                                 Code.ILLEGAL_POLLING_TIME, "long_polling_timeout")
        remaining = context.time_remaining()
        if remaining is not None:
            wait_ms = max(0, min(wait_ms, int(remaining * 1000) - DEADLINE_MARGIN_MS))
        client_id = caller.client_id
        receive = partial(self.parts.store.receive, group, topic, batch, invisible_ms, tags, wait_ms, client_id,
                          backoff_after_timeout=False)
        if client_id:
            self.parts.clients.receive_started(client_id)
        try:
            with self.parts.receive_gate.slot():
                received = await anyio.to_thread.run_sync(receive, limiter=self.parts.receive_threads)
        finally:
            if client_id:
                self.parts.clients.receive_ended(client_id)
        now = messages.timestamp(self.parts.store.clock.now_ms())
        if not received:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            yield spb.ReceiveMessageResponse(delivery_timestamp=now)
            return
        if auto_renew and client_id:
            self.parts.renewer.hold(client_id, group, [r.receipt_handle for r in received])
        yield spb.ReceiveMessageResponse(status=OK)
        for r in received:
            yield spb.ReceiveMessageResponse(message=messages.incoming(
                r.message, topic, receipt_handle=r.receipt_handle, delivery_attempt=r.delivery_attempt,
                invisible_ms=invisible_ms))
        yield spb.ReceiveMessageResponse(delivery_timestamp=now)

    @unary(spb.AckMessageResponse, _counter)
    async def AckMessage(self, request, context):
        caller, group, topic = self._consumer(context, request.group, request.topic)
        entries = list(request.entries)
        if not entries or len(entries) > MAX_ACK_ENTRIES:
            raise RpcRefusal(Code.BAD_REQUEST, f"an ack names 1 to {MAX_ACK_ENTRIES} receipt handles")
        handles = [e.receipt_handle for e in entries]
        for handle in handles:
            self.parts.renewer.release(handle)
        refusals = await anyio.to_thread.run_sync(self.parts.store.ack_many, group, handles, caller.client_id)
        results = [spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                             status=OK if refused is None else status_of(refused))
                   for e, refused in zip(entries, refusals, strict=True)]
        failed = [r.status for r in results if r.status.code != Code.OK]
        if not failed:
            top = OK
        elif len(failed) == len(results):
            top = failed[0]
        else:
            top = status(Code.MULTIPLE_RESULTS, f"{len(failed)} of {len(results)} acks refused")
        return spb.AckMessageResponse(status=top, entries=results)

    @unary(spb.ChangeInvisibleDurationResponse, _counter)
    async def ChangeInvisibleDuration(self, request, context):
        caller, group, topic = self._consumer(context, request.group, request.topic)
        invisible_ms = _ms_within(messages.duration_ms(request.invisible_duration), MIN_INVISIBLE_MS,
                                  MAX_INVISIBLE_MS, Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration")
        self.parts.renewer.release(request.receipt_handle)
        handle = await anyio.to_thread.run_sync(self.parts.store.change_invisible, group, request.receipt_handle,
                                                invisible_ms, caller.client_id)
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    @unary(spb.ForwardMessageToDeadLetterQueueResponse, _counter)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        caller, group, topic = self._consumer(context, request.group, request.topic)
        self.parts.renewer.release(request.receipt_handle)
        reason = (f"the client gave up after {request.delivery_attempt} of {request.max_delivery_attempts} "
                  "attempts (FIFO)")
        await anyio.to_thread.run_sync(self.parts.store.dead_letter, group, request.receipt_handle, reason)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # -- what the clients of this protocol version do not use ------------------------------------
    @server_stream(spb.PullMessageResponse, _counter)
    async def PullMessage(self, request, context):
        self._caller(context)
        yield spb.PullMessageResponse(status=status(Code.UNSUPPORTED, "pull consumers are not supported: use a "
                                                                      "SimpleConsumer or PushConsumer"))

    @unary(spb.UpdateOffsetResponse, _counter)
    async def UpdateOffset(self, request, context):
        self._caller(context)
        return spb.UpdateOffsetResponse(status=status(Code.UNSUPPORTED, "pull consumers are not supported"))

    @unary(spb.GetOffsetResponse, _counter)
    async def GetOffset(self, request, context):
        self._caller(context)
        return spb.GetOffsetResponse(status=status(Code.UNSUPPORTED, "pull consumers are not supported"))

    @unary(spb.RecallMessageResponse, _counter)
    async def RecallMessage(self, request, context):
        self._caller(context)
        return spb.RecallMessageResponse(status=status(Code.UNSUPPORTED, "recalling a message is not supported"))


_KINDS = {pb.PRODUCER: PRODUCER, pb.PUSH_CONSUMER: PUSH_CONSUMER, pb.SIMPLE_CONSUMER: SIMPLE_CONSUMER,
          pb.PULL_CONSUMER: "pull_consumer", pb.LITE_PUSH_CONSUMER: "lite_push_consumer",
          pb.LITE_SIMPLE_CONSUMER: "lite_simple_consumer"}


def _kind(client_type: int) -> str:
    return _KINDS.get(client_type, "unknown")


def _session_settings(settings: pb.Settings, caller: Caller) -> dict:
    ua = settings.user_agent
    subscription = settings.subscription if settings.HasField("subscription") else None
    return {
        "kind": _kind(settings.client_type),
        "group": subscription.group.name if subscription is not None and subscription.HasField("group") else None,
        "topics": [r.name for r in settings.publishing.topics] if settings.HasField("publishing") else [],
        "subscriptions": ({s.topic.name: s.expression.expression or "*" for s in subscription.subscriptions}
                          if subscription is not None else {}),
        "language": pb.Language.Name(ua.language) if ua.language in pb.Language.values() else caller.language,
        "version": ua.version or caller.version,
        "address": caller.address,
    }
