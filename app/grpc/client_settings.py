"""The settings a client gets back on its Telemetry stream: what RocketMQ 5's proxy tells each kind
of client, from this store's own rules (its delay level table, the group's retry maximum and
consume mode, the largest body it takes)."""

from __future__ import annotations

from dataclasses import dataclass

from app.grpc.messages import duration
from app.grpc.protocol import definition_pb2 as pb
from store.broker.metadata import GroupConfig
from store.format.delay_levels import DelayLevels

# The producer's retry policy the proxy sends: only max_attempts is used by the clients.
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
RECEIVE_BATCH_SIZE = 32


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int
    long_polling_ms: int  # what a PushConsumer waits in one receive


def consumer_retry_policy(levels: DelayLevels, group: GroupConfig) -> pb.RetryPolicy:
    """The delay level table as the backoff before each next attempt, and the group's attempts."""
    waits = [duration(levels.delay_ms(level) or 0) for level in range(1, levels.max_level + 1)]
    return pb.RetryPolicy(max_attempts=group.max_reconsume_times + 1,
                          customized_backoff=pb.CustomizedBackoff(next=waits))


def producer_retry_policy() -> pb.RetryPolicy:
    return pb.RetryPolicy(max_attempts=PRODUCER_MAX_ATTEMPTS, exponential_backoff=pb.ExponentialBackoff(
        initial=duration(PRODUCER_BACKOFF_INITIAL_MS), max=duration(PRODUCER_BACKOFF_MAX_MS),
        multiplier=PRODUCER_BACKOFF_MULTIPLIER))


def answer(client: pb.Settings, limits: ServerLimits, levels: DelayLevels,
           group_of: callable) -> pb.Settings:
    """The client's settings with the server's values in place of its own."""
    reply = pb.Settings()
    reply.CopyFrom(client)
    reply.metric.CopyFrom(pb.Metric(on=False))
    if client.HasField("publishing"):
        reply.publishing.max_body_size = limits.max_body_bytes
        reply.publishing.validate_message_type = True
        reply.backoff_policy.CopyFrom(producer_retry_policy())
    elif client.HasField("subscription"):
        group: GroupConfig = group_of(client.subscription.group.name)
        reply.subscription.fifo = group.consume_mode == "orderly"
        reply.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        reply.subscription.long_polling_timeout.CopyFrom(duration(limits.long_polling_ms))
        reply.backoff_policy.CopyFrom(consumer_retry_policy(levels, group))
    return reply
