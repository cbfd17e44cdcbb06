"""The real server: `mqlens serve` in a subprocess, and the demo workload."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.services.accounts import DEMO_PASSWORD
from app.services.demo import DEMO_TOPIC, DemoWorkload
from store.message_store import MessageStore, StoreConfig
from tests.app.conftest import SMALL_GEOMETRY, check_store, make_settings
from tests.live_server import STARTUP_DEADLINE_S, LiveServer, wait_until


def test_serve_answers_over_http_and_stops_cleanly(tmp_path: Path):
    data = tmp_path / "data"
    with LiveServer(data, tmp_path / "server.log", SMALL_GEOMETRY, args=("--demo",)) as server:
        server.start()
        client = server.client()
        r = client.post("/api/topics/Orders/messages", json={"body": "over the wire", "keys": ["o-1"]})
        assert r.status_code == 200, r.text
        result = r.json()["results"][0]
        assert result["topic"] == "Orders"
        r = client.post("/api/topics/%25DLQ%25g/messages", json={"body": "x"})
        assert r.status_code == 403 and r.json()["ok"] is False

        def demo_topic_listed() -> bool:
            names = [t["name"] for t in client.get("/api/topics").json()["topics"]]
            return DEMO_TOPIC in names

        wait_until(demo_topic_listed, STARTUP_DEADLINE_S, "the demo workload")
        # the demo's users sign in with the password the sign-in page shows
        login = httpx.get(f"{server.base_url}/login", timeout=10)
        assert "demo-support" in login.text and DEMO_PASSWORD in login.text
        browser = httpx.Client(base_url=server.base_url, timeout=10)
        r = browser.post("/login", data={"name": "demo-support", "password": DEMO_PASSWORD, "next": "/topics"})
        assert r.status_code == 303 and r.headers["location"] == "/topics"
        assert browser.get("/api/me").json()["role"] == "support"
        browser.close()
        client.close()
        assert server.stop() == 0
        # a fresh data directory: the first admin was made and its password printed once
        assert "created the user admin (admin)" in server.log_text()
    settings = make_settings(data)
    check_store(settings)  # closed cleanly: no abort marker, consistent
    assert (data / "mqlens.db").is_file()
    with MessageStore.open(settings.store_dir, StoreConfig(geometry=settings.geometry()), read_only=True) as s:
        assert s.get_by_offset_id(result["offset_msg_id"]).body == b"over the wire"


def test_serve_refuses_bad_options(tmp_path: Path, capsys):
    from app.cli import main

    assert main(["serve", "--data", str(tmp_path), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_demo_workload_puts_messages_until_stopped(tmp_path: Path):
    settings = make_settings(tmp_path)
    with MessageStore.open(settings.store_dir, StoreConfig(geometry=settings.geometry(), flush="sync")) as store:
        demo = DemoWorkload(store, interval_s=0.001).start()
        try:
            wait_until(lambda: demo.sent >= 3, 30, "three demo messages")
        finally:
            demo.stop()
        sent = demo.sent
        stored = sum(hi - lo for _, lo, hi in store.topics()[DEMO_TOPIC])
        assert stored == sent >= 3
        message = store.get_by_queue_offset(DEMO_TOPIC, 0, 0)
        assert message.keys == ["order-0"] and b'"order": 0' in message.body
        demo.stop()  # stopping twice is harmless
        assert demo.sent == sent
    check_store(settings)


def test_the_demo_consumer_acks_retries_and_dead_letters(tmp_path: Path):
    from app.services.demo import DEMO_GROUP, POISON_EVERY
    from store.clock import FakeClock
    from store.format.topics import dlq_topic

    clock = FakeClock()
    settings = make_settings(tmp_path)
    config = StoreConfig(geometry=settings.geometry(), flush="sync", schedule_interval_ms=0)
    with MessageStore.open(settings.store_dir, config, clock=clock) as store:
        demo = DemoWorkload(store)
        store.metadata.update_group(DEMO_GROUP, max_reconsume_times=2)
        for n in range(60):
            demo.step(n)
            clock.advance(5_000)  # past every retry backoff of the first levels within the run
            store.revive_due()
        assert demo.acked > 40 and demo.failed > 5
        dead = store.topics().get(dlq_topic(DEMO_GROUP), [])
        assert sum(hi - lo for _, lo, hi in dead) >= 1
        poisoned = store.get_by_queue_offset(dlq_topic(DEMO_GROUP), 0, 0)
        assert int(poisoned.keys[0].removeprefix("order-")) % POISON_EVERY == 0
