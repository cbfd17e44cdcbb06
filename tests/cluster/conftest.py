"""One real RocketMQ cluster per test session (per xdist worker), started on first use; a cluster
with a second broker for the test files that ask for one."""

from __future__ import annotations

import pytest

from tests.cluster import rocketmq_fixture
from tests.cluster.second_broker import ExtraBroker, TwoBrokers


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory) -> rocketmq_fixture.RocketMQFixture:
    reason = rocketmq_fixture.unavailable_reason()
    if reason:
        pytest.skip(reason)
    run_dir = tmp_path_factory.mktemp("rocketmq")
    cluster = rocketmq_fixture.start(run_dir, trace=True)
    try:
        yield cluster
    finally:
        rocketmq_fixture.stop(run_dir)


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory) -> TwoBrokers:
    """A cluster of its own for one test file: the fixture's name server and broker-a, and broker-b
    (tests/cluster/second_broker.py). A test that kills or pauses broker-b brings it back, or the
    next one calls `ensure_running()`."""
    reason = rocketmq_fixture.unavailable_reason()
    if reason:
        pytest.skip(reason)
    run_dir = tmp_path_factory.mktemp("rocketmq-two-brokers")
    cluster = rocketmq_fixture.start(run_dir)
    broker_b = ExtraBroker(cluster)
    try:
        broker_b.start()
        yield TwoBrokers(cluster, broker_b)
    finally:
        broker_b.kill()
        rocketmq_fixture.stop(run_dir)
