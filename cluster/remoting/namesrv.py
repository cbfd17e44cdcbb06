"""Admin calls to the name servers: cluster info, topic routes, the topic list (all, or a cluster's).

Several name server addresses may be given; a call goes to the first that answers, the way
RocketMQ's clients fail over. A name server that answers with an error is not asked again.
"""

from __future__ import annotations

from cluster.remoting.client import RemotingClient
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, request
from cluster.remoting.errors import CodecError, RemotingError, ResponseError
from cluster.remoting.models import ClusterInfo, TopicRoute, body_object


class TopicNotFound(ResponseError):
    """The name servers know no route for the topic."""


def parse_namesrv_addresses(text: str) -> list[str]:
    """'host:port;host:port' (RocketMQ's namesrvAddr form) -> the addresses."""
    return [part.strip() for part in text.split(";") if part.strip()]


class NameServerAdmin:
    def __init__(self, client: RemotingClient, addresses: list[str]):
        if not addresses:
            raise ValueError("at least one name server address is needed")
        self.client = client
        self.addresses = list(addresses)

    async def _invoke(self, cmd: RemotingCommand) -> tuple[str, RemotingCommand]:
        last_error: RemotingError | None = None
        for address in self.addresses:
            try:
                return address, await self.client.invoke(address, cmd)
            except RemotingError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    async def broker_cluster_info(self) -> ClusterInfo:
        address, response = await self._invoke(request(RequestCode.GET_BROKER_CLUSTER_INFO))
        _check(address, RequestCode.GET_BROKER_CLUSTER_INFO, response)
        return ClusterInfo.from_json(body_object(response.body, "cluster info"))

    async def topic_route(self, topic: str) -> TopicRoute:
        cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        address, response = await self._invoke(cmd)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotFound(address, cmd.code, response.code, response.remark)
        _check(address, cmd.code, response)
        return TopicRoute.from_json(topic, body_object(response.body, "topic route"))

    async def topic_list(self) -> list[str]:
        return await self._topics(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))

    async def topics_of_cluster(self, cluster: str) -> list[str]:
        """GET_TOPICS_BY_CLUSTER: topics with queues on the cluster's brokers (empty for an unknown cluster)."""
        return await self._topics(request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}))

    async def _topics(self, cmd: RemotingCommand) -> list[str]:
        address, response = await self._invoke(cmd)
        _check(address, cmd.code, response)
        topics = body_object(response.body, "topic list").get("topicList") or []
        if not isinstance(topics, list):
            raise CodecError(f"{address}: topicList is not a list")
        return sorted(str(topic) for topic in topics)


def _check(address: str, code: int, response: RemotingCommand) -> None:
    if response.code != ResponseCode.SUCCESS:
        raise ResponseError(address, code, response.code, response.remark)
