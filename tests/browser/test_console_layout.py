"""The console as a person sees it, on a laptop (1366 px) and a phone (390 px): a Resend
confirmation opens inside the window and its button can be pressed; the inbox offers only what the
role may do and what there is to do; the timeline draws one line per group and says when later
steps are out of sight."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, save_screenshot, sign_in
from tests.browser.test_console_browser import dead_letter_once, produce
from tests.live_server import LiveServer

WIDTHS = {1366: 768, 390: 844}
RESEND_LIMIT = 3  # what a support user may resend at once on this test server
PASSWORDS = {"admin": ADMIN_PASSWORD, "sue": "sue-support-pw", "otto": "otto-operator-pw"}
ROLES = {"sue": "support", "otto": "operator"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("layout")
    settings = {"flush": "sync", "commitlog_file_size": 1024 * 1024, "cq_file_size": 20 * 1024,
                "index_slots": 512, "index_entries": 4096, "admin_password": ADMIN_PASSWORD,
                "resend_limit": RESEND_LIMIT}
    with LiveServer(root / "data", root / "server.log", settings) as live:
        live.start()
        with live.client() as api:
            for name, role in ROLES.items():
                r = api.post("/api/users", json={"name": name, "password": PASSWORDS[name], "role": role})
                assert r.status_code == 201, r.text
        yield live
        assert live.stop() == 0


@pytest.fixture
def open_page(new_page) -> Callable:
    """Pages of a given width signed in as a given user; each checked for script errors."""

    def make(width: int, user: str = "admin"):
        page = new_page(viewport={"width": width, "height": WIDTHS[width]})
        sign_in(page, user, PASSWORDS[user])
        return page

    return make


def assert_inside_window(page, locator) -> None:
    """The element, scrolled to, lies wholly inside the browser window."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    window = page.viewport_size
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= window["width"] + 1, (box, window)  # 1: rounding
    assert box["y"] >= 0 and box["y"] + box["height"] <= window["height"] + 1, (box, window)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_timeline_resend_confirmation_opens_inside_the_window(open_page, api, screenshots, width):
    group = f"invoicing-{width}"
    put = dead_letter_once(api, group, f"Invoices{width}", f"invoice-{width}")
    page = open_page(width)
    page.goto(f"/messages/{put['offset_msg_id']}/timeline")
    row = page.locator(f'tr[data-group="{group}"]')
    row.locator("details.resend summary").click()
    form = row.locator("details.resend form")
    expect(form).to_be_visible()
    assert_inside_window(page, form)
    if width == 390:
        save_screenshot(page, screenshots, "timeline-resend-confirm-phone")
    form.get_by_role("button", name=f"Resend to {group}").click()
    expect(page.get_by_test_id("resent-sentence")).to_contain_text(f"1 message back to group {group} only")
    # back on the timeline, the group's line goes from its dead letter through the resend
    page.goto(f"/messages/{put['offset_msg_id']}/timeline")
    resent = page.locator("svg.timeline circle.hop.resent")
    expect(resent).to_have_count(1)
    [line] = [line for line in page.locator("svg.timeline").evaluate(POINTS_BY_LINE) if line["group"] == group]
    assert f"{resent.get_attribute('cx')},{resent.get_attribute('cy')}" in line["points"], line


@pytest.mark.parametrize("width", WIDTHS)
def test_the_inbox_resend_confirmation_opens_inside_the_window(open_page, api, width):
    group = f"inbox-confirm-{width}"
    dead_letter_once(api, group, f"Receipts{width}", f"receipt-{width}")
    page = open_page(width)
    page.goto(f"/groups/{group}/dead-letters")
    row = page.locator("table.inbox tbody tr").first
    row.locator("details.resend summary").click()
    form = row.locator("details.resend form")
    expect(form).to_be_visible()
    assert_inside_window(page, form)
    form.get_by_role("button", name=f"Resend to {group}").click()
    expect(page.get_by_test_id("resent-sentence")).to_contain_text(f"1 message back to group {group} only")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_inbox_offers_only_what_the_role_may_do(open_page, api, width):
    group = f"limits-{width}"
    for n in range(RESEND_LIMIT + 2):
        dead_letter_once(api, group, f"Limits{width}", f"limit-{width}-{n}")
    matching = RESEND_LIMIT + 2

    support = open_page(width, "sue")
    support.goto(f"/groups/{group}/dead-letters")
    expect(support.get_by_role("button", name="Resend selected…")).to_be_visible()
    expect(support.get_by_role("button", name=f"Resend all {matching} matching…")).to_have_count(0)
    expect(support.get_by_test_id("resend-all-limit")).to_contain_text(
        f"{matching} match: you may resend at most {RESEND_LIMIT} at once")
    twin = support.request.get(f"/groups/{group}/dead-letters.json").json()
    assert twin["offers"] == {"resend_all": False, "resend_limit": RESEND_LIMIT, "redrive": False}
    support.goto(f"/groups/{group}/dead-letters?key=limit-{width}-1")  # narrowed to what support may resend
    expect(support.get_by_role("button", name="Resend all 1 matching…")).to_be_visible()

    operator = open_page(width, "otto")
    operator.goto(f"/groups/{group}/dead-letters")
    expect(operator.get_by_role("button", name=f"Resend all {matching} matching…")).to_be_visible()
    expect(operator.get_by_role("button", name=f"Plan a redrive job for the {matching} waiting…")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_redrive_job_is_offered_when_nothing_waits(open_page, api, width):
    group = f"all-resent-{width}"
    put = dead_letter_once(api, group, f"Settled{width}", f"settled-{width}")
    dead_id = api.get(f"/api/dlq/{group}/messages").json()["messages"][0]["offset_msg_id"]
    r = api.post(f"/api/dlq/{group}/resend", json={"message_ids": [dead_id]})
    assert r.status_code == 200, r.text
    assert put["offset_msg_id"] != dead_id
    operator = open_page(width, "otto")
    operator.goto(f"/groups/{group}/dead-letters")
    expect(operator.locator("table.inbox tbody tr")).to_have_count(1)
    expect(operator.get_by_test_id("count-waiting")).to_have_text("0")
    expect(operator.get_by_role("button", name="Plan a redrive job", exact=False)).to_have_count(0)
    assert operator.request.get(f"/groups/{group}/dead-letters.json").json()["offers"]["redrive"] is False


def fan_out(api: httpx.Client, width: int) -> tuple[dict, str, str]:
    """One message two groups take in turn: the first consumes it, the second fails it into its
    dead-letter queue; their hops interleave in time."""
    topic, consumed, failed = f"Fanout{width}", f"ledger-{width}", f"mailer-{width}"
    assert api.put(f"/api/groups/{failed}", json={"max_reconsume_times": 0}).status_code == 200
    put = produce(api, topic, body="fan out", keys=[f"fan-{width}"])
    takes = {}
    for group in (consumed, failed):
        [takes[group]] = api.post(f"/api/groups/{group}/receive", json={"topic": topic, "max": 1}).json()["messages"]
    assert api.post(f"/api/groups/{consumed}/ack",
                    json={"receipt_handle": takes[consumed]["receipt_handle"]}).status_code == 200
    assert api.post(f"/api/groups/{failed}/nack", json={"receipt_handle": takes[failed]["receipt_handle"],
                                                        "reason": "smtp down"}).status_code == 200
    return put, consumed, failed


POINTS_BY_LINE = """svg => [...svg.querySelectorAll("polyline.hop-path")].map(line => ({
    group: line.dataset.group,
    points: line.getAttribute("points").trim().split(/\\s+/),
    groups: line.getAttribute("points").trim().split(/\\s+/).map(xy => {
        const [x, y] = xy.split(",");
        const hop = svg.querySelector(`circle.hop[cx="${x}"][cy="${y}"]`);
        return hop ? hop.dataset.group : null;
    }),
}))"""

CROSSINGS = """svg => {
    // hops of another group that a group's line passes through (within the hop's radius)
    const near = (c, [ax, ay], [bx, by]) => {
        const [px, py, r] = [+c.getAttribute("cx"), +c.getAttribute("cy"), +c.getAttribute("r")];
        const t = Math.max(0, Math.min(1, ((px - ax) * (bx - ax) + (py - ay) * (by - ay)) /
                                          ((bx - ax) ** 2 + (by - ay) ** 2 || 1)));
        return Math.hypot(ax + t * (bx - ax) - px, ay + t * (by - ay) - py) <= r;
    };
    const crossed = [];
    for (const line of svg.querySelectorAll("polyline.hop-path")) {
        const corners = line.getAttribute("points").trim().split(/\\s+/).map(xy => xy.split(",").map(Number));
        for (const hop of svg.querySelectorAll("circle.hop")) {
            if (hop.dataset.group === line.dataset.group || hop.dataset.group === "") continue;
            if (corners.slice(1).some((b, i) => near(hop, corners[i], b))) crossed.push(line.dataset.group);
        }
    }
    return crossed;
}"""

OUT_OF_SIGHT = """box => {
    const right = box.getBoundingClientRect().right;
    return [...box.querySelectorAll("circle.hop")].filter(c => {
        const hop = c.getBoundingClientRect();
        return (hop.left + hop.right) / 2 > right;
    }).length;
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_timeline_draws_one_line_per_group_and_announces_steps_out_of_sight(open_page, api, screenshots,
                                                                               width):
    put, consumed, failed = fan_out(api, width)
    page = open_page(width)
    page.goto(f"/messages/{put['offset_msg_id']}/timeline")
    svg = page.locator("svg.timeline")
    expect(svg).to_be_visible()
    lanes = svg.locator("g.lane")
    expect(lanes).to_have_count(3)  # the producer / broker and one per group
    lines = svg.evaluate(POINTS_BY_LINE)
    assert sorted(line["group"] for line in lines if line["group"]) == sorted([consumed, failed])
    for line in lines:
        # a group's line goes from the broker's hop it forked from through its own group's hops only
        hops_passed = [group for group in line["groups"] if group is not None]  # None: a bend, no hop
        assert hops_passed[0] in ("", line["group"]), line
        assert set(hops_passed[1:]) == {line["group"]}, line
    assert svg.evaluate(CROSSINGS) == []
    hops = page.locator("table.hops tbody tr")
    assert svg.locator("circle.hop").count() == hops.count()

    assert page.evaluate("document.documentElement.scrollWidth") <= width  # only the drawing scrolls sideways
    box = page.locator(".timeline-scroll")
    note = page.get_by_test_id("timeline-more")
    fits = box.evaluate("b => b.scrollWidth <= b.clientWidth")
    assert fits == (width == 1366)  # six hops fit a laptop's window, not a phone's
    if fits:
        expect(note).to_be_hidden()
    else:
        hidden = box.evaluate(OUT_OF_SIGHT)
        assert hidden > 0
        expect(note).to_be_visible()
        expect(note).to_contain_text(f"{hidden} later step{'' if hidden == 1 else 's'}")
        save_screenshot(page, screenshots, "timeline-phone")
        box.evaluate("b => { b.scrollLeft = b.scrollWidth; }")
        expect(note).to_be_hidden()  # every step in sight now
    if width == 1366:
        save_screenshot(page, screenshots, "timeline-groups")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_header_fits_the_window(open_page, width):
    page = open_page(width)
    page.goto("/")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    brand = page.locator("header.top .brand").bounding_box()
    sign_out = page.get_by_role("button", name="Sign out").bounding_box()
    assert sign_out["x"] + sign_out["width"] <= width
    assert sign_out["height"] < 2 * brand["height"]  # "Sign out" on one line
    if width == 1366:  # a laptop: the whole header on one row, the account at its end
        assert abs((sign_out["y"] + sign_out["height"] / 2) - (brand["y"] + brand["height"] / 2)) < 8, (sign_out, brand)
