"""One real RocketMQ cluster per test session (per xdist worker), started on first use."""

from __future__ import annotations

import pytest

from tests.cluster import rocketmq_fixture


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
