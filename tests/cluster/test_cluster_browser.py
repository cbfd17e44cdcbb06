"""The console on a live RocketMQ cluster in a real browser: an operator signs in, lands on the
Cluster page, follows a topic to its queues per broker and a group to its lag and consumers
(screenshots for the user guide)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import (  # noqa: F401 (fixtures)
    ADMIN_PASSWORD,
    browser,
    page_factory,
    save_screenshot,
    screenshots,
    sign_in,
)
from tests.cluster.console import console_on
from tests.cluster.test_remoting_fixture import unique


@pytest.fixture
def cluster_page(browser, rocketmq, tmp_path) -> Iterator:  # noqa: F811
    """A page signed in as the first admin of a console attached to the fixture."""
    with console_on(rocketmq, tmp_path, {"admin_password": ADMIN_PASSWORD}) as server, \
            page_factory(browser, server.base_url) as make:
        page = make()
        sign_in(page, "admin", ADMIN_PASSWORD)
        yield page


def test_an_operator_sees_the_cluster_its_topics_and_a_groups_lag(cluster_page, rocketmq, screenshots):  # noqa: F811
    page = cluster_page
    topic, group = unique("BrowserTopic"), unique("BrowserGroup")
    rocketmq.produce(topic, 5, unique("b"))
    rocketmq.run("consume", group, topic, "5", "60")

    page.goto("/")
    expect(page).to_have_url(re.compile(r"/cluster$"))
    brokers = page.get_by_test_id("brokers")
    expect(brokers.locator("tr[data-broker='broker-a']")).to_contain_text("V4_9_8")
    expect(brokers).to_contain_text("master")
    expect(page.get_by_role("link", name="Cluster")).to_have_attribute("aria-current", "page")
    save_screenshot(page, screenshots, "cluster")

    page.get_by_role("link", name="Topics").click()
    page.get_by_role("link", name=topic, exact=True).click()
    queues = page.get_by_test_id("queues")
    expect(queues.locator("tr[data-broker='broker-a']").first).to_be_visible()
    expect(queues).to_contain_text("broker-a")

    page.get_by_role("link", name="Groups").click()
    page.get_by_role("link", name=group, exact=True).click()
    offsets = page.get_by_test_id("offsets")
    expect(offsets).to_contain_text(topic)
    expect(offsets).to_contain_text("broker-a")
    save_screenshot(page, screenshots, "cluster-group")

    page.goto(f"/topics/{topic}/queues/0")  # the queue browser is on the embedded store only
    expect(page.locator("body")).to_contain_text("live RocketMQ cluster")
