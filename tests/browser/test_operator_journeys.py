"""Support and operator journeys in a real browser: a support user finds a dead letter by its key,
resends it with one click and sees the copy consumed on its timeline; a viewer sees no resend
button and a masked body; an operator edits the delay levels with the preview, saves and rolls
back, and runs a redrive job; the audit page names each action. Screenshots for the guide."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.browser.conftest import save_screenshot, sign_in
from tests.browser.test_console_browser import dead_letter_once

PASSWORDS = {"sam": ("support", "sam-support-pw"), "vic": ("viewer", "vic-viewer-pw"),
             "olga": ("operator", "olga-operator-pw")}
GROUP = "billing-journey"


def add_users(api: httpx.Client) -> None:
    for name, (role, password) in PASSWORDS.items():
        r = api.post("/api/users", json={"name": name, "password": password, "role": role})
        assert r.status_code in (201, 409), r.text


def as_user(new_page, name: str):
    page = new_page()
    sign_in(page, name, PASSWORDS[name][1])
    return page


def test_support_viewer_operator_and_the_audit(new_page, api, screenshots):
    add_users(api)
    put = dead_letter_once(api, GROUP, "Checkout", "order-4711")

    # support: find it by its key, resend it with one click from its message page
    page = as_user(new_page, "sam")
    page.get_by_role("searchbox", name="Search messages").fill("order-4711")
    page.keyboard.press("Enter")
    results = page.locator("#results table.results tbody tr")
    expect(results).to_have_count(2)
    results.filter(has_text="dead letter").locator("a[href^='/messages/']").first.click()
    expect(page.get_by_test_id("dead-letter-actions")).to_contain_text(f"Dead letter of {GROUP}")
    page.get_by_text("Resend", exact=True).click()
    expect(page.locator("details.resend form")).to_contain_text(
        f"1 message back to group {GROUP} only, through %RETRY%{GROUP}_Checkout")
    save_screenshot(page, screenshots, "resend-confirm")
    page.get_by_role("button", name=f"Resend to {GROUP}").click()
    expect(page.get_by_test_id("resent-sentence")).to_contain_text(f"1 message back to group {GROUP} only")
    save_screenshot(page, screenshots, "resent")

    # the group's consumer takes the copy and acknowledges it
    [copy] = api.post(f"/api/groups/{GROUP}/receive", json={"topic": "Checkout"}).json()["messages"]
    assert copy["unique_key"] == put["unique_key"] and copy["delivery_attempt"] == 1
    assert api.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": copy["receipt_handle"]}).status_code == 200
    page.locator("table.results").get_by_role("link", name="timeline").click()
    expect(page.locator(f'tr[data-group="{GROUP}"] [data-testid="verdict"]')).to_have_text("consumed")
    expect(page.locator("table.hops, table.wide").last).to_contain_text("resent")
    save_screenshot(page, screenshots, "timeline-resent")

    # the inbox says so too
    page.goto(f"/groups/{GROUP}/dead-letters")
    row = page.locator("table.inbox tbody tr").first
    expect(row.get_by_test_id("state")).to_have_text("resent")
    expect(row.get_by_test_id("copy-state")).to_have_text("consumed")
    save_screenshot(page, screenshots, "dead-letter-inbox")

    # viewer: no resend button, a masked body that a reveal shows (audited)
    viewer = as_user(new_page, "vic")
    dead_id = api.get(f"/api/dlq/{GROUP}/messages").json()["messages"][0]["offset_msg_id"]
    viewer.goto(f"/messages/{dead_id}")
    expect(viewer.get_by_test_id("masked-body")).to_be_visible()
    expect(viewer.locator("details.resend")).to_have_count(0)
    expect(viewer.locator("pre.body")).to_have_count(0)
    save_screenshot(viewer, screenshots, "viewer-masked")
    viewer.get_by_label("Why").fill("customer asked what they sent")
    viewer.get_by_role("button", name="Reveal body").click()
    expect(viewer.locator("pre.body")).to_contain_text("order-4711")
    viewer.goto(f"/groups/{GROUP}/dead-letters")
    expect(viewer.locator("table.inbox tbody tr")).not_to_have_count(0)
    expect(viewer.get_by_role("button", name="Resend selected…")).to_have_count(0)

    # operator: edit the delay levels with the preview, save, save again, roll back
    operator = as_user(new_page, "olga")
    operator.goto("/config/delay-levels")
    levels = operator.get_by_label("Levels (space-separated")
    levels.fill("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    expect(operator.get_by_test_id("preview-levels")).to_contain_text("20m")
    levels.fill("1s 5s 10x")
    expect(operator.get_by_test_id("preview-error")).to_be_visible()
    levels.fill("1s 5s 10s 20s 40s")
    expect(operator.get_by_test_id("preview-warning")).to_contain_text("past the table's end")
    expect(operator.get_by_test_id("preview-dlq")).to_contain_text("reaches the dead-letter queue")
    operator.get_by_label("Why").fill("INC-42 faster retries")
    save_screenshot(operator, screenshots, "delay-levels-preview")
    operator.get_by_role("button", name="Save as version 1").click()
    expect(operator.get_by_test_id("current-version")).to_have_text("version 1")
    operator.get_by_label("Levels (space-separated").fill("1s 5s 10s 20s 40s 80s")
    operator.get_by_role("button", name="Save as version 2").click()
    expect(operator.get_by_test_id("current-version")).to_have_text("version 2")
    operator.get_by_role("button", name="Roll back to 1").click()
    expect(operator.get_by_test_id("current-version")).to_have_text("version 3")
    expect(operator.get_by_test_id("current-levels")).to_have_text("1s 5s 10s 20s 40s")
    expect(operator.get_by_test_id("history")).to_contain_text("rollback to version 1")
    save_screenshot(operator, screenshots, "delay-levels-history")

    # the audit page names every one of these actions, and who did them
    operator.goto("/audit")
    audit = operator.get_by_test_id("audit")
    for who, action in [("sam", "resend dead letters"), ("vic", "reveal body"), ("olga", "set delay levels")]:
        expect(audit.locator("tr", has_text=who).filter(has_text=action).first).to_be_visible()
    save_screenshot(operator, screenshots, "audit")


def test_an_operator_plans_and_runs_a_redrive_job(new_page, api, screenshots):
    add_users(api)
    for n in range(30):
        dead_letter_once(api, "redrive-journey", "Refunds", f"refund-{n}")
    page = as_user(new_page, "olga")
    page.goto("/groups/redrive-journey/dead-letters")
    page.get_by_label("Rate (messages/s)").fill("10")
    page.get_by_role("button", name="Plan a redrive job for the 30 waiting…").click()
    expect(page.get_by_test_id("job-state")).to_have_text("planned")
    expect(page.locator("table.results tbody tr")).to_have_count(30)
    page.get_by_role("button", name="Start: resend these 30").click()
    expect(page.get_by_test_id("job-state")).to_have_text("running")
    expect(page.get_by_test_id("job-counts")).to_contain_text(re.compile(r"\b[1-9]\d* resent"))  # moves by itself
    save_screenshot(page, screenshots, "redrive-job")
    expect(page.get_by_test_id("job-state")).to_have_text("done", timeout=30_000)
    expect(page.get_by_test_id("job-counts")).to_contain_text("30 resent")


def test_the_dashboard_says_when_the_server_stops_answering(page):
    page.goto("/")
    page.route("**/dashboard", lambda route: route.abort())  # the server is gone: refreshes fail
    banner = page.locator("#error-banner")
    expect(banner).to_contain_text("The server has not answered since", timeout=30_000)
    expect(banner).to_contain_text("the figures below are stale")
    page.unroute("**/dashboard")
    expect(banner).to_have_text("", timeout=30_000)  # answers again: the notice goes


HOSTILE = """<!doctype html><html><body>
<form id="f" method="post" action="{base}/config/delay-levels">
  <input name="levels" value="1s"><input name="expected_version" value="{version}">
  <input name="allow_dropped_levels" value="true"></form>
<script>
  fetch("{base}/config/delay-levels", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"content-type": "application/x-www-form-urlencoded"}},
    body: "levels=2s&expected_version={version}&allow_dropped_levels=true"}});
  navigator.sendBeacon("{base}/config/delay-levels",
    new Blob(["levels=3s&expected_version={version}"], {{type: "application/x-www-form-urlencoded"}}));
  setTimeout(() => document.getElementById("f").submit(), 300);
</script></body></html>"""


def test_a_hostile_page_cannot_change_anything_for_a_signed_in_admin(page, server, api):
    before = api.get("/api/config/delay-levels").json()
    audit_before = len(api.get("/api/audit", params={"action": "set_delay_levels"}).json()["entries"])
    evil = "http://127.0.0.1:1/evil"  # another port of the same host: same-site, so the session cookie goes along
    page.route(evil, lambda route: route.fulfill(content_type="text/html", body=HOSTILE.format(
        base=server.base_url, version=before["version"])))
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if r.url.endswith("/config/delay-levels") else None)
    page.goto(evil)
    expect(page.locator(".error")).to_contain_text("refused", timeout=30_000)  # the form lands on a 403 page
    # The form and the beacon reach the server and are refused; Chromium may stop the no-cors fetch
    # itself (private network access), and the server refuses it too (tests/app/test_access.py).
    assert statuses and set(statuses) == {403}, statuses
    assert api.get("/api/config/delay-levels").json() == before
    assert len(api.get("/api/audit", params={"action": "set_delay_levels"}).json()["entries"]) == audit_before
