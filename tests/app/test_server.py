"""The real server: `mqlens serve` in a subprocess, and the demo workload."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.services.demo import DEMO_TOPIC, DemoWorkload
from store.message_store import MessageStore, StoreConfig
from tests.app.conftest import SMALL_GEOMETRY, check_store, make_settings

STARTUP_DEADLINE_S = 60


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, deadline_s: float, what: str, poll_s: float = 0.05):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def test_serve_answers_over_http_and_stops_cleanly(tmp_path: Path):
    data = tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQLENS_")}
    env.update({f"MQLENS_{k.upper()}": str(v) for k, v in SMALL_GEOMETRY.items()})
    log = (tmp_path / "server.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from app.cli import entry; entry()", "serve", "--data", str(data),
         "--host", "127.0.0.1", "--port", str(port), "--demo"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"server exited with {proc.returncode}:\n{log.read()}")
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, STARTUP_DEADLINE_S, "/healthz")
        r = httpx.post(f"{base}/api/topics/Orders/messages", json={"body": "over the wire", "keys": ["o-1"]},
                       timeout=10)
        assert r.status_code == 200, r.text
        result = r.json()["results"][0]
        assert result["topic"] == "Orders"
        r = httpx.post(f"{base}/api/topics/%25DLQ%25g/messages", json={"body": "x"}, timeout=10)
        assert r.status_code == 403 and r.json()["ok"] is False

        def demo_topic_listed() -> bool:
            names = [t["name"] for t in httpx.get(f"{base}/api/topics", timeout=10).json()["topics"]]
            return DEMO_TOPIC in names

        wait_until(demo_topic_listed, STARTUP_DEADLINE_S, "the demo workload")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
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
