"""The dashboard (/ and /dashboard): store numbers and messages per second that move with puts,
receives and acks under the fake clock, its live cards fragment, and /metrics for Prometheus."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.services.rates import RateSampler
from store.broker.stats import StoreStats
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
HTML = {"Accept": "text/html"}


async def produce(api, count: int, queue_id: int = 0) -> list[dict]:
    return await put_messages(api, TOPIC, [{"body": f"m{i}", "queue_id": queue_id} for i in range(count)])


async def receive_and_ack(api, group: str, count: int) -> None:
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": TOPIC, "max": count})
    assert r.status_code == 200, r.text
    handles = [m["receipt_handle"] for m in r.json()["messages"]]
    assert len(handles) == count
    r = await api.client.post(f"/api/groups/{group}/ack", json={"receipt_handles": handles})
    assert r.status_code == 200, r.text


async def dashboard(api, path: str = "/index.json") -> dict:
    r = await api.client.get(path)
    assert r.status_code == 200, r.text
    return r.json()


async def test_numbers_and_rates_move_with_traffic(api, clock):
    before = await dashboard(api)
    assert before["rates"]["put_per_s"] is None  # no time has passed since the store opened
    assert before["status"]["messages_put"] == 0 and before["status"]["topics"] == 0

    await produce(api, 10)
    await receive_and_ack(api, "GID_rates", 4)
    clock.advance(5000)
    after = await dashboard(api, "/dashboard.json")
    assert after["rates"] == {"put_per_s": 2.0, "delivered_per_s": 0.8, "acked_per_s": 0.8, "over_ms": 5000}
    status = after["status"]
    assert (status["messages_put"], status["messages_delivered"], status["messages_acked"]) == (10, 4, 4)
    assert status["commitlog_bytes"] > before["status"]["commitlog_bytes"]
    assert status["commitlog_segments"] == 1 and status["dispatch_lag_bytes"] == 0
    assert status["store_bytes"] > 0 and status["topics"] >= 1 and status["groups"] == 1

    clock.advance(10_000)  # quiet: the window has moved past the traffic
    quiet = await dashboard(api)
    assert quiet["rates"]["put_per_s"] == 0.0 and quiet["rates"]["over_ms"] == 10_000


async def test_dead_letters_and_delayed_messages_are_counted(api, clock):
    results = await produce(api, 3)
    api.store.send_back(results[0]["phys_offset"], "GID_a", delay_level=-1)
    api.store.send_back(results[1]["phys_offset"], "GID_b", delay_level=-1)
    api.store.send_back(results[2]["phys_offset"], "GID_b", delay_level=3)
    status = (await dashboard(api))["status"]
    assert status["dlq_messages"] == 2 and status["delayed_messages"] == 1 and status["groups"] == 2
    await api.client.post("/api/topics/Later/messages", json={"body": "x", "deliver_at_ms": clock.now_ms() + 3_600_000})
    assert (await dashboard(api))["status"]["delayed_messages"] == 2  # the timer's count too


async def test_failed_receives_waiting_for_a_retry_are_counted(api, clock):
    await produce(api, 2)
    got = (await api.client.post("/api/groups/GID_pop/receive", json={"topic": TOPIC, "max": 2})).json()
    await api.client.post("/api/groups/GID_pop/nack", json={"receipt_handle": got["messages"][0]["receipt_handle"]})
    assert (await dashboard(api))["status"]["receive_retries"] == 1
    group = (await api.client.get("/groups/GID_pop.json")).json()["group"]
    [row] = group["receive_retries"]
    assert (row["topic"], row["in_flight"], row["retries_waiting"]) == (TOPIC, 1, 1)
    assert row["next_retry_ms"] > clock.now_ms()
    page = await api.client.get("/groups/GID_pop", headers=HTML)
    assert 'data-testid="receive-retries"' in page.text


async def test_the_page_refreshes_its_cards_and_htmx_gets_only_them(api):
    await produce(api, 2)
    for path in ("/", "/dashboard"):
        page = await api.client.get(path, headers=HTML)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'hx-get="/dashboard" hx-trigger="every 3s"' in page.text
        assert 'data-testid="cards"' in page.text and 'href="/metrics"' in page.text
    cards = await api.client.get("/dashboard", headers={"HX-Request": "true", "HX-Target": "cards"})
    assert cards.status_code == 200
    assert "<html" not in cards.text and "<h1>" not in cards.text and 'data-testid="in-rate"' in cards.text


def test_rates_come_from_the_oldest_sample_in_the_window():
    stats = StoreStats(started_ms=0)
    sampler = RateSampler(window_ms=10_000, min_span_ms=1000)
    stats.count_put(30)
    assert sampler.rates(stats, 3000).put_per_s == 10.0  # no sample yet: since the store opened
    stats.count_put(20)
    assert sampler.rates(stats, 3500).put_per_s is None  # half a second after the last sample: too soon
    assert sampler.rates(stats, 5500).put_per_s == 8.0  # 20 over 2.5 s, from the sample at 3000
    stats.count_put(70)
    rates = sampler.rates(stats, 13_000)
    assert (rates.put_per_s, rates.over_ms) == (9.0, 10_000)  # the sample at 3000 is still on the window's edge
    rates = sampler.rates(stats, 20_000)
    assert (rates.put_per_s, rates.over_ms) == (round(70 / 14.5, 3), 14_500)  # from 5500: the newest outside


async def test_metrics_in_prometheus_format(api, clock):
    results = await produce(api, 5, queue_id=1)
    r = await api.client.put("/api/groups/GID_m/offsets", json={"topic": TOPIC, "queue_id": 1, "offset": 2})
    assert r.status_code == 200, r.text
    api.store.send_back(results[0]["phys_offset"], "GID_m", delay_level=-1)
    await receive_and_ack(api, "GID_pop", 2)

    r = await api.client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}
    assert samples[("mqlens_messages_put_total", ())] == 5
    assert samples[("mqlens_messages_delivered_total", ())] == 2
    assert samples[("mqlens_commitlog_segments", ())] == 1
    assert samples[("mqlens_dispatch_lag_bytes", ())] == 0
    assert samples[("mqlens_store_bytes", ())] > 0
    assert samples[("mqlens_queue_max_offset", (("queue", "1"), ("topic", TOPIC)))] == 5
    assert samples[("mqlens_consumer_lag", (("group", "GID_m"), ("queue", "1"), ("topic", TOPIC)))] == 3
    assert samples[("mqlens_dlq_messages", (("group", "GID_m"),))] == 1
    types = {family.name: family.type for family in text_string_to_metric_families(r.text)}
    assert types["mqlens_messages_put"] == "counter" and types["mqlens_consumer_lag"] == "gauge"

    await produce(api, 1)
    again = {s.name: s.value for family in text_string_to_metric_families((await api.client.get("/metrics")).text)
             for s in family.samples if not s.labels}
    assert again["mqlens_messages_put_total"] == 6  # read at scrape time


async def test_metrics_only_answer_get(api):
    assert_error(await api.client.post("/metrics"), 405)
