"""Times no date can show: a search window past the year 9999 is a clear 400, and a stored born
or store time outside years 1-9999 (a client with a bad clock) is shown raw, never failing a page."""

from __future__ import annotations

import pytest

from app.render import format_ms
from store.clock import FakeClock
from store.message_store import NewMessage
from tests.app.conftest import assert_error, make_settings, running

pytestmark = pytest.mark.anyio

HTML = {"accept": "text/html"}
FAR_BORN = 300_000_000_000_000  # the year 11476
BEFORE_YEAR_1 = -62_135_596_800_001


@pytest.mark.parametrize("params, fragment", [
    ({"q": "k", "begin": "253402300800000"}, "begin is after the year 9999"),
    ({"q": "k", "end": "99999999999999999999"}, "end is after the year 9999"),
    ({"q": "k", "end": "9" * 5000}, "end is after the year 9999"),
])
async def test_a_search_window_past_the_year_9999_is_refused(tmp_path, params, fragment):
    async with running(make_settings(tmp_path / "data")) as app:
        page = await app.client.get("/search", params=params, headers=HTML)
        assert page.status_code == 400 and fragment in page.text
        assert_error(await app.client.get("/search", params=params), 400, fragment)
        edge = await app.client.get("/search", params={"q": "k", "end": "253402300799999"}, headers=HTML)
        assert edge.status_code == 200


@pytest.mark.parametrize("born", [FAR_BORN, BEFORE_YEAR_1])
async def test_pages_of_a_message_with_a_time_no_date_can_show_still_render(tmp_path, born):
    clock = FakeClock()
    async with running(make_settings(tmp_path / "data"), clock) as app:
        result = app.store.put(NewMessage(topic="ClockT", body=b"x", born_timestamp=born))
        for url in (f"/messages/{result.offset_msg_id}", f"/messages/{result.unique_key}/timeline",
                    f"/search?q={result.unique_key}"):
            page = await app.client.get(url, headers=HTML, follow_redirects=True)
            assert page.status_code == 200, (url, page.text[:300])
        message = await app.client.get(f"/messages/{result.offset_msg_id}", headers=HTML)
        assert f"{born} ms since 1970 (outside years 1-9999)" in message.text


def test_format_ms_shows_a_time_outside_the_calendar_raw():
    assert format_ms(0) == "1970-01-01 00:00:00.000 UTC"
    assert format_ms(FAR_BORN) == f"{FAR_BORN} ms since 1970 (outside years 1-9999)"
    assert format_ms(2**63 - 1).endswith("(outside years 1-9999)")
    assert format_ms(BEFORE_YEAR_1).endswith("(outside years 1-9999)")
