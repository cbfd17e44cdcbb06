"""Lookups across the brokers of a topic's route, merged the way mqadmin merges them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.errors import RemotingError
from cluster.remoting.namesrv import NameServerAdmin
from store.format import codec


@dataclass(frozen=True)
class KeyLookup:
    messages: list[codec.StoredMessage]
    failed_brokers: dict[str, str] = field(default_factory=dict)  # broker name -> why it gave no answer

    @property
    def complete(self) -> bool:
        return not self.failed_brokers


async def query_by_key(namesrv: NameServerAdmin, broker: BrokerAdmin, topic: str, key: str, *,
                       max_num: int = 64, begin_ms: int = 0, end_ms: int = 2**63 - 1) -> KeyLookup:
    """Messages of `topic` whose KEYS hold `key`, from every broker in the route (index hash
    collisions dropped, as mqadmin queryMsgByKey drops them). A broker that fails is named."""
    route = await namesrv.topic_route(topic)
    targets = [(b.broker_name, b.pick_address()) for b in route.brokers if b.pick_address()]
    answers = await asyncio.gather(
        *(broker.query_message(address, topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms)
          for _, address in targets),
        return_exceptions=True)
    messages, failed = [], {}
    for (name, _), answer in zip(targets, answers, strict=True):
        if isinstance(answer, RemotingError):
            failed[name] = str(answer)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            messages += [m for m in answer.messages if m.topic == topic and key in m.keys]
    return KeyLookup(messages=messages, failed_brokers=failed)
