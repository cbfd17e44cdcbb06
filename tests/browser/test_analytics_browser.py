"""The analytics page in a real browser: an operator starts a dlq-report over a store with dead
letters, watches it run (the page updates itself, never reloaded), and reads its charts. The job
is the real one: `python -m app.cli pipeline run dlq-report` in a process of its own, Spark and
all. Screenshots for the guide."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import save_screenshot
from tests.browser.test_console_browser import dead_letter_once

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

SPARK_TIMEOUT_MS = 600_000  # a Spark job on two shared cores, its start-up included


def test_an_operator_runs_a_dlq_report_and_reads_its_charts(page, api, screenshots):
    for n in range(4):
        dead_letter_once(api, "billing-analytics", "Invoices", f"invoice-{n}")
    for n in range(2):
        dead_letter_once(api, "shipping-analytics", "Parcels", f"parcel-{n}")

    nav = page.locator("header nav").get_by_role("link", name="Analytics")
    page.goto("/analytics")
    expect(nav).to_have_attribute("aria-current", "page")
    page.get_by_label("Job").select_option("dlq-report")
    page.get_by_label("Why").fill("which groups fail the most?")
    page.get_by_role("button", name="Start the job").click()

    expect(page.locator("h1")).to_have_text(re.compile(r"Run \d+ · dlq-report"))
    state = page.get_by_test_id("run-state")
    expect(state).to_have_text("running")
    expect(page.get_by_test_id("run-progress")).to_be_visible()
    # Spark's tasks as the job reports them, while it runs: a bar with a value, and the words
    tasks = page.locator('progress[data-testid="run-progress"][value]')
    expect(tasks).to_be_visible(timeout=SPARK_TIMEOUT_MS)  # drawn only while the run is going
    expect(page.get_by_test_id("run-counts")).to_contain_text(re.compile(r"\d+ of \d+ Spark tasks"))
    expect(page.get_by_test_id("run-stage")).not_to_be_empty()
    save_screenshot(page, screenshots, "analytics-running")

    expect(state).to_have_text("succeeded", timeout=SPARK_TIMEOUT_MS)  # by itself: the page polls
    expect(page.get_by_test_id("run-progress")).to_have_count(0)
    expect(page.get_by_test_id("run-summary")).to_contain_text("dlq-report")
    daily = page.get_by_role("img", name="Dead letters per day, by group")
    expect(daily).to_be_visible()
    expect(daily.locator("rect.series-0")).not_to_have_count(0)
    expect(page.get_by_test_id("chart-daily").locator("ul.legend")).to_contain_text("billing-analytics")
    keys = page.get_by_role("img", name="Top failing keys")
    expect(keys).to_be_visible()
    expect(keys.locator("text.category").first).to_have_text("customer-7 (billing-analytics)")  # on all four
    expect(keys).to_contain_text("parcel-1 (shipping-analytics)")
    expect(page.get_by_role("img", name="Retries per group")).to_be_visible()
    expect(page.get_by_role("img", name="Time to the dead-letter queue, by group")).to_be_visible()
    summary = page.locator('table[data-table="summary"] tbody tr')
    expect(summary.filter(has_text="billing-analytics")).to_contain_text("4")
    save_screenshot(page, screenshots, "analytics-run")

    nav.click()
    expect(page.get_by_test_id("runs").locator("tbody tr").first).to_have_attribute("data-state", "succeeded")
    save_screenshot(page, screenshots, "analytics")
