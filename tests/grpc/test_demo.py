"""`mqlens serve --demo` with the gRPC front: the demo's official-client producer and push consumer
run beside the server, so a new user sees real clients and their messages flowing."""

from __future__ import annotations

from pathlib import Path

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


def test_the_demo_clients_end_when_the_server_is_killed(tmp_path):
    server = LiveServer(tmp_path / "data", tmp_path / "server.log", settings={"grpc_port": free_port()},
                        args=("--demo",))
    with server:
        server.start()
        with server.client() as api:
            wait_until(lambda: len(api.get("/api/clients").json()["clients"]) >= 2, 60, "the demo's clients")
        children = [int(pid) for task in Path(f"/proc/{server.proc.pid}/task").iterdir()
                    for pid in (task / "children").read_text().split()]
        assert len(children) == 2
        server.kill()
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() and _running(pid) for pid in children), 30,
                   "the orphaned demo clients to end")


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
