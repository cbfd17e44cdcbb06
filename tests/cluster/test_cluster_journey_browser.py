"""The support journey on a live RocketMQ cluster in a real browser: a consumer group fails keyed
messages into its dead-letter queue while another consumes them; a support user finds one by its
key, follows it to its message page and its traced retry timeline, opens the group's inbox and
resends it with one click. The group's consumer gets it once, the other group never, and clicking
again sends nothing (screenshots for the user guide)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import browser, page_factory, save_screenshot, screenshots, sign_in  # noqa: F401
from tests.cluster.console import console_on
from tests.cluster.test_cluster_dead_letters import held_in
from tests.cluster.test_cluster_timeline import fail_in_one_group_consume_in_another, settled_timeline
from tests.cluster.test_remoting_fixture import unique
from tests.live_server import LiveServer

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

SUPPORT = ("sam", "sam-support-password")


@pytest.fixture
def console(rocketmq, tmp_path) -> Iterator[LiveServer]:
    with console_on(rocketmq, tmp_path) as server:
        yield server


def test_support_finds_a_dead_letter_by_key_sees_its_timeline_and_resends_it_once(
        rocketmq, console, browser, screenshots):  # noqa: F811
    topic, failing, consuming = unique("JourneyTopic"), unique("JourneyFail"), unique("JourneyOk")
    prefix = unique("order")
    key, retry, dlq = f"{prefix}-0", f"%RETRY%{failing}", f"%DLQ%{failing}"
    sent = rocketmq.produce(topic, 2, prefix)
    fail_in_one_group_consume_in_another(rocketmq, topic, 2, failing, consuming)

    with console.client() as admin:
        assert admin.post("/api/users", json={"name": SUPPORT[0], "password": SUPPORT[1], "role": "support"}
                          ).status_code == 201
        settled_timeline(admin, sent[0]["msgId"], failing, consuming)
        retry_before = held_in(rocketmq, retry)

        with page_factory(browser, console.base_url) as make:
            page = make()
            sign_in(page, *SUPPORT)

            # the key in the search box: its copies, the dead letter among them
            page.get_by_role("searchbox", name="Search messages").fill(key)
            page.keyboard.press("Enter")
            rows = page.locator("#results table.results tbody tr")
            expect(rows.filter(has_text=topic).first).to_be_visible()
            dead_row = rows.filter(has_text=dlq)
            expect(dead_row).to_have_count(1)
            save_screenshot(page, screenshots, "cluster-search")

            # the dead letter's page offers the resend and leads to the timeline
            dead_row.locator("a[href^='/messages/']").first.click()
            expect(page.get_by_test_id("dead-letter-actions")).to_contain_text(f"Dead letter of {failing}")
            expect(page.locator("details.resend summary")).to_be_visible()
            page.get_by_role("link", name="Retry timeline").click()

            # the timeline, from the copies and the clients' trace: one verdict per group
            expect(page.get_by_test_id("client-trace")).to_be_visible()
            verdict = page.locator(f'tr[data-group="{failing}"] [data-testid="verdict"]')
            expect(verdict).to_have_text("dead lettered")
            expect(page.locator(f'tr[data-group="{consuming}"] [data-testid="verdict"]')).to_have_text("consumed")
            expect(page.locator('table.hops tr[data-kind="failed"]')).to_have_count(2)
            expect(page.get_by_test_id("partial-answer")).to_have_count(0)
            save_screenshot(page, screenshots, "cluster-timeline")

            # the same timeline in a second tab, its Resend button ready for a second click
            stale = make()
            sign_in(stale, *SUPPORT)
            stale.goto(page.url)
            stale.locator(f'tr[data-group="{failing}"]').get_by_text("Resend", exact=True).click()

            # the failed group's inbox, filtered to this message: one click resends it
            page.locator(f'tr[data-group="{failing}"]').get_by_test_id("group-inbox").click()
            inbox = page.locator("table.inbox tbody tr")
            expect(inbox).to_have_count(1)
            expect(inbox.get_by_test_id("state")).to_have_text("waiting")
            expect(inbox).to_contain_text(key)
            expect(page.get_by_test_id("oldest-waiting")).to_have_text("not read")  # on its last page, unread
            save_screenshot(page, screenshots, "cluster-inbox")
            inbox.get_by_text("Resend", exact=True).click()
            form = inbox.locator("details.resend form")
            expect(form).to_contain_text(f"1 message back to group {failing} only, through {retry}")
            clicked = form.evaluate("f => Object.fromEntries(new FormData(f))")
            form.get_by_role("button", name=f"Resend to {failing}").click()
            expect(page.get_by_test_id("resent-sentence")).to_contain_text(f"1 message back to group {failing} only")
            expect(page.locator("tr[data-status='ok']")).to_contain_text(f"resent to {retry}")
            save_screenshot(page, screenshots, "cluster-resent")
            assert held_in(rocketmq, retry) == retry_before + 1

            # the same form sent again answers what the first did, and sends nothing
            again = page.request.post("/dead-letters/resend", form=clicked, headers={"Origin": console.base_url})
            assert again.status == 200 and "this click was already done" in again.text()

            # the second tab's button, clicked after: "resent already", nothing sent
            stale.get_by_role("button", name=f"Resend to {failing}").click()
            expect(stale.locator("h1")).to_contain_text("Resent already")
            expect(stale.get_by_test_id("resent-before")).to_contain_text(SUPPORT[0])
            assert held_in(rocketmq, retry) == retry_before + 1

            # the dead letter's page says who resent it, and offers no second plain resend
            stale.get_by_test_id("resent-before").locator("a[href^='/messages/']").first.click()
            expect(stale.get_by_test_id("last-resend")).to_contain_text(f"by {SUPPORT[0]} to {retry}")
            expect(stale.locator("details.resend")).to_have_count(0)

        out = rocketmq.run("consume", failing, topic, "1", "60")
        assert "distinctKeys=1 deliveries=1 done=true" in out, out
        group = admin.get(f"/api/groups/{failing}").json()
        assert sum(q["lag"] for q in group["queues"] if q["topic"] == retry) == 0
        assert admin.get(f"/api/groups/{consuming}").json()["lag"] == 0
        assert held_in(rocketmq, retry) == retry_before + 1
        assert "Traceback" not in console.log_text()
