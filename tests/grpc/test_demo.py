"""`mqlens serve --demo` with the gRPC front: the demo's official-client producer and push consumer
run beside the server, so a new user sees real clients and their messages flowing."""

from __future__ import annotations

import pytest

from tests.live_server import LiveServer, free_port, wait_until

pytestmark = pytest.mark.slow


def test_the_demo_runs_an_official_producer_and_consumer(tmp_path):
    server = LiveServer(tmp_path / "data", tmp_path / "server.log", settings={"grpc_port": free_port()},
                        args=("--demo",))
    with server:
        server.start()
        with server.client() as api:
            def kinds() -> set[str]:
                return {c["kind"] for c in api.get("/api/clients").json()["clients"] if c["state"] == "online"}

            wait_until(lambda: {"producer", "push_consumer"} <= kinds(), 60, "the demo's clients online")

            def consumed() -> int:
                page = api.get("/groups/shop-billing.json")
                return page.status_code == 200 and sum(row["committed"] for row in page.json()["group"]["offsets"]
                                                      if row["topic"] == "ShopOrders")

            wait_until(lambda: consumed() >= 3, 60, "demo orders consumed by the push consumer")
        assert server.stop() == 0
    assert (tmp_path / "data" / "demo-clients" / "producer.log").exists()
