"""Lookups across the brokers of a topic's route, merged the way mqadmin merges them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.errors import RemotingError
from cluster.remoting.namesrv import NameServerAdmin
from store.format import codec

END_OF_TIME_MS = 2**63 - 1
BROKER_QUERY_MAX = 64  # a 4.x broker answers at most this many records to one QUERY_MESSAGE (maxMsgsNumBatch)


def key_matches(message: codec.StoredMessage, topic: str, key: str, unique_key: bool) -> bool:
    """Whether a record the index gave is really of topic#key (the index keeps hashes: collisions
    come back too, and mqadmin drops them)."""
    if message.topic != topic:
        return False
    return message.unique_key == key if unique_key else key in message.keys


@dataclass(frozen=True)
class KeyLookup:
    messages: list[codec.StoredMessage]
    failed_brokers: dict[str, str] = field(default_factory=dict)  # broker name -> why it gave no answer

    @property
    def complete(self) -> bool:
        return not self.failed_brokers


async def _ask_every_broker(namesrv: NameServerAdmin, broker: BrokerAdmin, topic: str, key: str, *,
                            unique_key: bool, max_num: int, begin_ms: int, end_ms: int) -> KeyLookup:
    route = await namesrv.topic_route(topic)
    targets = [(b.broker_name, b.pick_address()) for b in route.brokers if b.pick_address()]
    answers = await asyncio.gather(
        *(broker.query_message(address, topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms,
                               unique_key=unique_key) for _, address in targets),
        return_exceptions=True)
    messages, failed = [], {}
    for (name, _), answer in zip(targets, answers, strict=True):
        if isinstance(answer, RemotingError):
            failed[name] = str(answer)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            messages += answer.messages
    return KeyLookup(messages=messages, failed_brokers=failed)


async def query_by_key(namesrv: NameServerAdmin, broker: BrokerAdmin, topic: str, key: str, *,
                       max_num: int = 64, begin_ms: int = 0, end_ms: int = END_OF_TIME_MS) -> KeyLookup:
    """Messages of `topic` whose KEYS hold `key`, from every broker in the route (index hash
    collisions dropped, as mqadmin queryMsgByKey drops them). A broker that fails is named."""
    found = await _ask_every_broker(namesrv, broker, topic, key, unique_key=False, max_num=max_num,
                                    begin_ms=begin_ms, end_ms=end_ms)
    return KeyLookup([m for m in found.messages if key_matches(m, topic, key, False)], found.failed_brokers)


async def query_by_unique_key(namesrv: NameServerAdmin, broker: BrokerAdmin, topic: str, unique_key: str, *,
                              begin_ms: int = 0, end_ms: int = END_OF_TIME_MS) -> KeyLookup:
    """Every copy of `topic` holding the unique key, oldest first (mqadmin keeps only the oldest)."""
    found = await _ask_every_broker(namesrv, broker, topic, unique_key, unique_key=True, max_num=32,
                                    begin_ms=begin_ms, end_ms=end_ms)
    copies = [m for m in found.messages if key_matches(m, topic, unique_key, True)]
    return KeyLookup(sorted(copies, key=lambda m: m.store_timestamp), found.failed_brokers)
