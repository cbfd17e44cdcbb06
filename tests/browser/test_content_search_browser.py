"""Content search in the browser: found by a word of its body only, the hit linked to its message
page; a viewer sees the hit with the body masked; Cancel stops a search that would run for long.
Each page is kept as a screenshot."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from tests.browser.conftest import save_screenshot, sign_in

BODY_WORD = "quetzalcoatl"
VIEWER = ("vivian", "vivian-password-1")


def produce(api: httpx.Client, topic: str, **fields) -> dict:
    r = api.post(f"/api/topics/{topic}/messages", json=fields)
    assert r.status_code == 200, r.text
    return r.json()["results"][0]


def search_contents(page, text: str, *, regex: bool = False) -> None:
    page.goto("/search")
    page.get_by_test_id("content-search-link").click()
    page.get_by_label("Text to find").fill(text)
    if regex:
        page.get_by_label("Regular expression").check()
    page.get_by_role("button", name="Search contents").click()


def test_found_by_a_word_of_its_body_only_and_masked_for_a_viewer(page, new_page, api, screenshots):
    for i in range(30):
        produce(api, "Deliveries", body=f"parcel {i} delivered", keys=[f"parcel-{i}"], tags="delivered")
    wanted = produce(api, "Deliveries", body=f"parcel 77 swallowed by {BODY_WORD} at the depot", keys=["parcel-77"],
                     tags="lost")
    search_contents(page, BODY_WORD)
    expect(page.get_by_test_id("search-state")).to_have_text("finished")
    hits = page.get_by_test_id("search-hits")
    expect(hits.locator("tbody tr")).to_have_count(1)
    expect(hits.locator("mark")).to_have_text(BODY_WORD)
    save_screenshot(page, screenshots, "content-search")
    hits.get_by_role("link", name=wanted["offset_msg_id"]).click()
    expect(page).to_have_url(f"{page.url.split('/messages/')[0]}/messages/{wanted['offset_msg_id']}")

    assert api.post("/api/users", json={"name": VIEWER[0], "password": VIEWER[1], "role": "viewer"}).status_code == 201
    viewer = new_page()
    sign_in(viewer, *VIEWER)
    search_contents(viewer, BODY_WORD)
    expect(viewer.get_by_test_id("search-state")).to_have_text("finished")
    row = viewer.get_by_test_id("search-hits").locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("hit-snippet")).to_have_text("(masked)")
    expect(row).to_contain_text(wanted["offset_msg_id"])
    assert "swallowed" not in viewer.content()
    save_screenshot(viewer, screenshots, "content-search-viewer")


def test_cancel_stops_the_scan(page, api, screenshots):
    produce(api, "Deliveries", body="a" * 40 + "b")
    search_contents(page, r"(a+)+$", regex=True)  # backtracks for hours on that body
    expect(page.get_by_test_id("search-state")).to_have_text("running")
    page.get_by_test_id("search-cancel").click()
    expect(page.get_by_test_id("search-state")).to_have_text("cancelled")
    expect(page.get_by_test_id("search-cancel")).to_have_count(0)
    save_screenshot(page, screenshots, "content-search-cancelled")
