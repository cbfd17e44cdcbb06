"""The console in a real browser: search by key -> message -> retry timeline; a search without a
topic finds the dead-letter copy; the queue browser pages. Each page is kept as a screenshot."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, save_screenshot


def produce(api: httpx.Client, topic: str, **fields) -> dict:
    r = api.post(f"/api/topics/{topic}/messages", json=fields)
    assert r.status_code == 200, r.text
    return r.json()["results"][0]


def dead_letter_once(api: httpx.Client, group: str, topic: str, key: str) -> dict:
    """Produce one message and fail it in `group` until it is dead-lettered (no retries allowed)."""
    assert api.put(f"/api/groups/{group}", json={"max_reconsume_times": 0}).status_code == 200
    body = json.dumps({"order": key, "amount": 42.5, "items": [{"sku": "A-1", "qty": 2}]})
    put = produce(api, topic, body=body, keys=[key, "customer-7"], tags="paid")
    got = api.post(f"/api/groups/{group}/receive", json={"topic": topic, "max": 1}).json()["messages"]
    assert [m["offset_msg_id"] for m in got] == [put["offset_msg_id"]]
    r = api.post(f"/api/groups/{group}/nack", json={"receipt_handle": got[0]["receipt_handle"],
                                                    "reason": "payment service unavailable"})
    assert r.status_code == 200, r.text
    return put


def test_search_by_key_then_message_then_timeline(page, api, screenshots):
    put = dead_letter_once(api, "billing", "Payments", "order-1001")
    page.goto("/search")
    page.get_by_label("Message id, unique key, key or").fill("order-1001")
    page.get_by_role("button", name="Search").click()
    results = page.locator("#results table.results tbody tr")
    expect(results).to_have_count(2)
    expect(page).to_have_url("/search?q=order-1001&topic=&begin=&end=&max=32")
    save_screenshot(page, screenshots, "search")

    original = results.filter(has_text="original")
    original.get_by_role("link", name=put["offset_msg_id"]).click()
    expect(page.get_by_test_id("offset-msg-id")).to_have_text(put["offset_msg_id"])
    expect(page.get_by_test_id("unique-key")).to_have_text(put["unique_key"])
    copy = page.locator(f'button.copy[data-copy="{put["offset_msg_id"]}"]')
    copy.click()
    expect(copy).to_have_text("Copied")  # static/app.js copies the id to the clipboard
    expect(page.locator("pre.body")).to_contain_text('"sku": "A-1"')  # pretty JSON by default
    page.get_by_role("link", name="hex", exact=True).click()
    expect(page.locator('pre.body[data-view="hex"]')).to_contain_text("7b 22 6f 72")
    expect(page).to_have_url(f"/messages/{put['offset_msg_id']}?view=hex")
    page.get_by_role("link", name="json", exact=True).click()
    expect(page.locator(".copies")).to_contain_text("%DLQ%billing")
    save_screenshot(page, screenshots, "message")

    page.get_by_role("link", name="Retry timeline").click()
    expect(page.locator("svg.timeline")).to_be_visible()
    expect(page.locator("main")).to_contain_text("payment service unavailable")
    expect(page.locator(".verdict.dead_lettered")).to_be_visible()
    save_screenshot(page, screenshots, "timeline")


def test_search_without_a_topic_finds_the_dead_letter_copy(page, api):
    put = dead_letter_once(api, "shipping", "Parcels", "parcel-77")
    page.goto("/")
    page.get_by_role("searchbox", name="Search messages").fill("parcel-77")
    page.get_by_role("searchbox", name="Search messages").press("Enter")
    dead = page.locator("#results tbody tr").filter(has_text="dead letter")
    expect(dead).to_have_count(1)
    expect(dead).to_contain_text("%DLQ%shipping")
    dead.locator("a[href^='/messages/'] code").click()
    expect(page.locator("h1")).to_contain_text("dead letter")
    expect(page.locator(".properties")).to_contain_text(put["offset_msg_id"])  # ORIGIN_MESSAGE_ID


def test_a_bad_id_in_the_browser_shows_the_error_page(page):
    response = page.goto("/messages/not-an-id")
    assert response is not None and response.status == 400
    expect(page.locator(".error")).to_contain_text("malformed offset message id")
    page.get_by_role("link", name="Search for a message").click()
    expect(page).to_have_url("/search")


@pytest.mark.parametrize("payload", ['<img src=x onerror="document.title=\'pwned\'">'])
def test_payloads_do_not_run_in_the_browser(page, api, payload):
    put = produce(api, "Hostile", body=payload, keys=["hostile-1"], tags="<b>t</b>", properties={"p": payload})
    page.goto(f"/messages/{put['offset_msg_id']}?view=text")
    expect(page.locator('pre.body[data-view="text"]')).to_have_text(payload)
    assert page.title() != "pwned" and page.locator("img").count() == 0


def test_queue_browser_pages_and_jumps(page, api, screenshots):
    r = api.post("/api/topics/Ledger/messages", json=[{"body": f"entry {n}", "keys": [f"entry-{n}"], "tags": "book",
                                                        "queue_id": 0} for n in range(45)])
    assert r.status_code == 200, r.text
    page.goto("/topics/Ledger")
    page.get_by_role("link", name="Ledger:0").first.click()
    rows = page.locator("#rows tbody tr")
    offsets = lambda: [int(o) for o in rows.evaluate_all("rows => rows.map(r => r.dataset.offset)")]  # noqa: E731
    expect(rows.first).to_have_attribute("data-offset", "0")
    per_page = len(offsets())
    assert 0 < per_page < 45
    page.locator("#rows a[rel=next]").click()
    expect(rows.first).to_have_attribute("data-offset", str(per_page))
    expect(page).to_have_url(f"/topics/Ledger/queues/0?offset={per_page}&max={per_page}")
    page.locator("#rows a[rel=prev]").click()
    expect(rows.first).to_have_attribute("data-offset", "0")
    page.get_by_label("Go to offset").fill("40")
    page.get_by_role("button", name="Go").click()
    expect(rows.first).to_have_attribute("data-offset", "40")
    assert offsets() == list(range(40, 45))
    expect(page.locator("#rows a[rel=next]")).to_have_count(0)  # the last page: no Next link
    page.goto(f"/topics/Ledger/queues/0?offset=10&max={per_page}")
    save_screenshot(page, screenshots, "queue")


def test_dashboard_updates_live_and_the_group_page_shows_dead_letters(page, api, screenshots):
    dead_letter_once(api, "audit", "AuditLog", "audit-1")
    page.goto("/")
    dlq = page.get_by_test_id("dlq")
    before = int(dlq.inner_text())
    assert before >= 1
    dead_letter_once(api, "audit", "AuditLog", "audit-2")
    expect(dlq).to_have_text(str(before + 1))  # the cards refresh by themselves, no reload
    save_screenshot(page, screenshots, "dashboard")
    page.get_by_role("link", name="Groups", exact=True).click()
    page.get_by_role("link", name="audit", exact=True).click()
    expect(page.locator("main")).to_contain_text("%DLQ%audit")
    save_screenshot(page, screenshots, "group")


def test_pages_work_without_javascript(browser, server, api):
    put = produce(api, "Plain", body="no script needed", keys=["plain-1"])
    context = browser.new_context(base_url=server.base_url, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto("/search")
        expect(page).to_have_url("/login?next=%2Fsearch")  # not signed in: the form, then back
        page.get_by_label("User name").fill("admin")
        page.get_by_label("Password").fill(ADMIN_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url("/search")
        page.get_by_label("Message id, unique key, key or").fill("plain-1")
        page.get_by_role("button", name="Search").click()
        expect(page).to_have_url(f"/messages/{put['offset_msg_id']}")  # the only match opens
        page.get_by_role("link", name="base64", exact=True).click()
        expect(page.locator('pre.body[data-view="base64"]')).to_have_text("bm8gc2NyaXB0IG5lZWRlZA==")
        page.get_by_role("link", name="Retry timeline").click()
        expect(page.locator("svg.timeline")).to_be_visible()
    finally:
        context.close()


def test_the_rest_reference_renders_offline(page):
    page.goto("/docs")
    expect(page.locator(".swagger-ui .title")).to_contain_text("mqlens")
    expect(page.locator(".swagger-ui")).to_contain_text("/api/search")
