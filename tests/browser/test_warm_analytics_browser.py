"""The analytics page on a warm console, in a real browser: `mqlens serve` keeps a warm Spark (its
default, which the other browser tests turn off), an operator starts a dlq-report over a store of
10,000 records and sees its charts within 60 s of the click for the first job after the start and
within 20 s for the next one. The jobs are the real ones, run by the real kept driver.

Those limits hold on an idle 2-core machine, as when the test runs alone (`-n 0`). Beside other
test workers, which keep the cores busy with Spark and real brokers, they are stretched three
times; MQLENS_TEST_SLOWDOWN (a factor) sets the stretch itself, and the test prints the seconds it
saw."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, save_screenshot
from tests.browser.test_console_browser import dead_letter_once
from tests.live_server import LiveServer

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

RECORDS = 10_000
BATCH = 1000
SHARED_MACHINE = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
SLOWDOWN = float(os.environ.get("MQLENS_TEST_SLOWDOWN", "3" if SHARED_MACHINE else "1"))
FIRST_JOB_S = 60 * SLOWDOWN  # the first job after the console's start
WARM_JOB_S = 20 * SLOWDOWN  # any later one


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("warm")
    settings = {"flush": "async", "commitlog_file_size": 4 * 1024 * 1024, "cq_file_size": 20 * 4096,
                "index_slots": 4096, "index_entries": 16_384, "admin_password": ADMIN_PASSWORD,
                "pipeline_warm": "true", "pipeline_master": "local[2]", "pipeline_warm_memory": "1g"}
    with LiveServer(root / "data", root / "server.log", settings) as live:
        live.start()
        try:
            yield live
        finally:
            drivers = list((root / "data" / "warm-spark").glob("*/pid"))
            assert live.stop() == 0
            for pid_file in drivers:  # the server's stop ends an idle driver; a failed test may leave a busy one
                with contextlib.suppress(ProcessLookupError, ValueError, OSError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def fill_store(api, dead: int) -> None:
    """RECORDS messages: `dead` of them dead-lettered in two groups (their dead-letter copies come
    on top), the rest orders nobody consumes."""
    for n in range(dead):
        if n % 3:
            dead_letter_once(api, "billing-warm", "Invoices", f"invoice-{n}")
        else:
            dead_letter_once(api, "shipping-warm", "Parcels", f"parcel-{n}")
    for start in range(0, RECORDS - dead, BATCH):
        size = min(BATCH, RECORDS - dead - start)
        r = api.post("/api/topics/Orders/messages", json=[
            {"body": f'{{"order": {n}, "amount": 42.5}}', "keys": [f"order-{n}"], "tags": "paid"}
            for n in range(start, start + size)])
        assert r.status_code == 200, r.text


def run_dlq_report(page, why: str, within_s: float) -> float:
    """Start a dlq-report from the analytics page; the seconds from the click to its charts."""
    page.goto("/analytics")
    page.get_by_label("Job").select_option("dlq-report")
    page.get_by_label("Why").fill(why)
    began = time.monotonic()
    page.get_by_role("button", name="Start the job").click()
    expect(page.locator("h1")).to_have_text(re.compile(r"Run \d+ · dlq-report"))
    daily = page.get_by_role("img", name="Dead letters per day, by group")
    expect(daily).to_be_visible(timeout=within_s * 1000)
    seconds = time.monotonic() - began
    print(f"dlq-report of {RECORDS:,} messages ({why}): charts {seconds:.1f} s after the click")
    expect(page.get_by_test_id("run-state")).to_have_text("succeeded")
    expect(daily.locator("rect.series-0")).not_to_have_count(0)
    expect(page.get_by_test_id("chart-daily").locator("ul.legend")).to_contain_text("billing-warm")
    return seconds


def test_a_dlq_report_answers_in_seconds_on_a_warm_console(page, api, screenshots):
    fill_store(api, dead=9)
    run_dlq_report(page, "first job after the start", FIRST_JOB_S)
    summary = page.locator('table[data-table="summary"] tbody tr')
    expect(summary.filter(has_text="billing-warm")).to_contain_text("6")
    run_dlq_report(page, "the console is warm", WARM_JOB_S)
    expect(page.get_by_test_id("run-summary")).to_contain_text("dlq-report")
    save_screenshot(page, screenshots, "analytics-warm-run")
