"""The ACL signature against a real RocketMQ 4.9.8 broker with ACL on (its own cluster, one per module)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.remoting.acl import AclCredentials
from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import ResponseCode, SerializeType
from cluster.remoting.errors import ResponseError
from tests.cluster import rocketmq_fixture

BROKER = "127.0.0.1:10911"
ACCESS_KEY, SECRET_KEY = "mqlens-admin", "mqlens-acl-secret"


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    reason = rocketmq_fixture.unavailable_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("rocketmq-acl")
    env = rocketmq_fixture.acl_home(base / "home", ACCESS_KEY, SECRET_KEY)
    cluster = rocketmq_fixture.start(base / "run", env)
    try:
        wait_for_runtime_stats(cluster)
        yield cluster
    finally:
        rocketmq_fixture.stop(base / "run")


def call(cluster, credentials: AclCredentials | None, serialize_type: SerializeType, calling):
    async def main():
        options = ClientOptions(socket_factory=cluster.socket_factory, serialize_type=serialize_type)
        async with RemotingClient(options, request_hook=credentials.sign if credentials else None) as client:
            return await calling(BrokerAdmin(client))

    return asyncio.run(main())


def wait_for_runtime_stats(cluster, deadline_s: float = 30.0) -> None:
    """A broker just started answers GET_BROKER_RUNTIME_INFO with a SYSTEM_ERROR until it took
    its first statistics sample (about a second)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            call(cluster, AclCredentials(ACCESS_KEY, SECRET_KEY), SerializeType.JSON,
                 lambda broker: broker.runtime_info(BROKER))
            return
        except ResponseError as exc:
            if exc.response_code != ResponseCode.SYSTEM_ERROR or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


@pytest.mark.parametrize("serialize_type", list(SerializeType))
def test_signed_requests_pass_the_brokers_check(acl_cluster, serialize_type):
    credentials = AclCredentials(ACCESS_KEY, SECRET_KEY)
    info = call(acl_cluster, credentials, serialize_type, lambda broker: broker.runtime_info(BROKER))
    assert info["brokerVersionDesc"] == "V4_9_8"
    # The broker leaves _UNIQUE_KEY_QUERY out of the content it checks; so does the signature.
    found = call(acl_cluster, credentials, serialize_type,
                 lambda broker: broker.query_message(BROKER, "TBW102", "no-such-key", unique_key=True))
    assert found.messages == []


@pytest.mark.parametrize(("credentials", "refusal"), [
    (None, "No accessKey is configured"),
    (AclCredentials(ACCESS_KEY, "not-the-secret"), "Check signature failed"),
    (AclCredentials("someone-else", SECRET_KEY), "someone-else"),
])
def test_unsigned_or_wrongly_signed_requests_are_refused(acl_cluster, credentials, refusal):
    with pytest.raises(ResponseError) as refused:
        call(acl_cluster, credentials, SerializeType.JSON, lambda broker: broker.runtime_info(BROKER))
    assert refused.value.response_code != ResponseCode.SUCCESS and refusal in refused.value.remark
    assert SECRET_KEY not in str(refused.value)
