"""Official RocketMQ 5 clients seen in the console, as an operator sees them: the Clients page lists
the real producer and push consumer connected over gRPC, and a message's timeline names the
client that sent it and the one that received each attempt."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, save_screenshot
from tests.grpc.conftest import OfficialClient
from tests.live_server import LiveServer, free_port, wait_until

TOPIC, GROUP = "WebOrders", "web-billing"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("clients-browser")
    settings = {"flush": "sync", "commitlog_file_size": 1024 * 1024, "cq_file_size": 20 * 1024,
                "index_slots": 512, "index_entries": 4096, "admin_password": ADMIN_PASSWORD,
                "grpc_port": free_port(), "delay_levels": "1s 2s 3s"}
    with LiveServer(root / "data", root / "server.log", settings) as live:
        live.start()
        yield live
        assert live.stop() == 0


@pytest.fixture(scope="module")
def clients(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    endpoint = f"127.0.0.1:{server.env['MQLENS_GRPC_PORT']}"
    home = tmp_path_factory.mktemp("official-clients")
    producer, consumer = OfficialClient(endpoint, home / "producer"), OfficialClient(endpoint, home / "consumer")
    try:
        producer_id = producer.call("producer", topics=[TOPIC])["client_id"]
        sent = [producer.call("send", topic=TOPIC, body=f"web order {n}", tag="paid", keys=[f"web-{n}"])
                for n in range(3)]
        consumer.call("push", group=GROUP, subscriptions={TOPIC: "*"}, fail={"web order 1": 1})
        events: list[dict] = []

        def deliveries() -> int:
            events.extend(consumer.call("events")["events"])
            return len(events)

        wait_until(lambda: deliveries() >= 4, 30, "four deliveries (one of them a retry)")
        yield {"producer": producer_id, "sent": sent, "events": events}
    finally:
        consumer.close()
        producer.close()


# Before any client connects (the module's clients start with the first test that asks for them).
def test_the_clients_page_tells_a_new_user_how_to_connect_a_client(page, server, screenshots):
    page.goto("/")
    page.get_by_test_id("clients-online").get_by_role("link").click()
    expect(page).to_have_url("/clients")
    expect(page.locator("header nav").get_by_role("link", name="Clients")).to_have_attribute("aria-current", "page")
    expect(page.get_by_test_id("no-clients")).to_contain_text("No RocketMQ 5 client has connected")
    expect(page.get_by_test_id("grpc-endpoint")).to_have_text(f"127.0.0.1:{server.env['MQLENS_GRPC_PORT']}")
    save_screenshot(page, screenshots, "clients-empty")
    page.get_by_label("Group").fill("GID_none")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url("/clients?group=GID_none&topic=")
    expect(page.get_by_test_id("no-clients")).to_contain_text("No client of group GID_none is known")
    page.get_by_role("link", name="Show every client").first.click()
    expect(page).to_have_url("/clients")


def test_the_clients_page_lists_the_connected_producer_and_consumer(page, clients, screenshots):
    page.goto("/clients")
    table = page.locator("table")
    expect(table).to_contain_text(clients["producer"])
    expect(table).to_contain_text(GROUP)
    expect(table).to_contain_text("PYTHON")
    expect(page.get_by_test_id("client-counts")).to_contain_text("2 online: 1 producer, 1 consumer")
    save_screenshot(page, screenshots, "clients")

    page.goto(f"/groups/{GROUP}")
    expect(page.locator("body")).to_contain_text("Consumers connected")
    expect(page.locator("[data-client]")).to_have_count(1)


def test_a_timeline_names_the_clients_of_each_attempt(page, clients, screenshots):
    failed = clients["sent"][1]["message_id"]
    page.goto(f"/messages/{failed}/timeline")
    body = page.locator("main")
    expect(body).to_contain_text(f"sent by client {clients['producer']}")
    expect(body).to_contain_text(re.compile(r"attempt 2 received by client \S+ of " + GROUP))
    save_screenshot(page, screenshots, "timeline-clients")
