"""The delay-level editor: versions made from a known version, levels in use kept, history with
changes, rollback, the schedule preview, and the page."""

from __future__ import annotations

import pytest

from tests.app.conftest import assert_error, audit_rows, bearer, put_messages

pytestmark = pytest.mark.anyio

URL = "/api/config/delay-levels"
HTML = {"Accept": "text/html"}


async def test_an_edit_of_an_older_version_is_refused_with_the_current_one(api):
    r = await api.client.put(URL, json={"levels": "1s 2s 3s", "expected_version": 0, "reason": "faster"})
    assert r.status_code == 200 and r.json()["version"] == 1
    stale = await api.client.put(URL, json={"levels": "5s 6s", "expected_version": 0})
    assert_error(stale, 409, "changed since version 0", "version 1 is now in use (1s 2s 3s)")
    assert_error(await api.client.put(URL, json={"levels": "5s 6s"}, headers={"If-Match": '"0"'}), 409, "version 1")
    r = await api.client.put(URL, json={"levels": "5s 6s 7s"}, headers={"If-Match": '"1"'})
    assert r.status_code == 200 and r.json()["version"] == 2
    assert_error(await api.client.put(URL, json={"levels": "5s"}, headers={"If-Match": "soon"}), 400, "If-Match")


async def test_dropping_levels_in_use_needs_allowing(api):
    await put_messages(api, "Orders", [{"body": "later", "delay_level": 5}, {"body": "soon", "delay_level": 2}])
    r = await api.client.put(URL, json={"levels": "1s 2s 3s"})
    assert_error(r, 409, "drops levels in use: 5 (1 waiting)", "Allow dropped levels")
    preview = (await api.client.get(f"{URL}/preview", params={"levels": "1s 2s 3s"})).json()
    assert any("drops levels in use: 5 (1 waiting)" in w for w in preview["warnings"])
    r = await api.client.put(URL, json={"levels": "1s 2s 3s", "allow_dropped_levels": True})
    assert r.status_code == 200


async def test_history_and_rollback(api):
    for levels, why in [("1s 2s", "first"), ("1s 5s 9s", "slower")]:
        assert (await api.client.put(URL, json={"levels": levels, "reason": why})).status_code == 200
    r = await api.client.post(f"{URL}/rollback", json={"version": 1, "reason": "the slow one hurt",
                                                       "expected_version": 2})
    assert r.status_code == 200 and r.json() == {"ok": True, "levels": "1s 2s", "version": 3}
    body = (await api.client.get(f"{URL}/versions")).json()
    assert body["current"] == 3
    newest, middle, oldest, original = body["versions"]
    assert (newest["version"], newest["reason"]) == (3, "rollback to version 1: the slow one hurt")
    assert newest["changes"] == ["level 2: 5s -> 2s", "level 3 removed (was 9s)"]
    assert middle["changes"] == ["level 2: 2s -> 5s", "level 3 added: 9s"] and middle["actor"] == "bootstrap-admin"
    assert oldest["changes"][:2] == ["level 2: 5s -> 2s", "level 3 removed (was 10s)"] and original["version"] == 0
    assert_error(await api.client.post(f"{URL}/rollback", json={"version": 9}), 404, "no delay level version 9")
    assert_error(await api.client.post(f"{URL}/rollback", json={"version": 2, "expected_version": 1}), 409)
    assert [e.reason for e in audit_rows(api.sessions)][-1] == "rollback to version 1: the slow one hurt"


async def test_the_preview_shows_a_groups_schedule_and_when_it_reaches_the_dlq(api):
    assert (await api.client.put("/api/groups/g3", json={"max_reconsume_times": 3})).status_code == 200
    body = (await api.client.get(f"{URL}/preview", params={"levels": "1s 2s 10s 30s 1m", "group": "g3"})).json()
    assert [(r["retry"], r["level"], r["delay_ms"], r["since_first_failure_ms"]) for r in body["schedule"]] == [
        (1, 3, 10_000, 10_000), (2, 4, 30_000, 40_000), (3, 5, 60_000, 100_000)]
    assert body["dead_letter_after_ms"] == 100_000 and body["warnings"] == []
    short = (await api.client.get(f"{URL}/preview", params={"levels": "1s 2s 10s", "group": "g3"})).json()
    assert [r["level"] for r in short["schedule"]] == [3, 3, 3]
    assert "retries 2 to 3 ask for levels past the table's end" in short["warnings"][0]
    bad = (await api.client.get(f"{URL}/preview", params={"levels": "1s 2x"})).json()
    assert bad["valid"] is False and bad["error"]
    assert_error(await api.client.get(f"{URL}/preview", params={"levels": "1s", "group": "bad group!"}), 400)


async def test_the_page_edits_previews_and_rolls_back(api):
    viewer = (await api.client.post("/api/tokens", json={"name": "v", "role": "viewer"})).json()["value"]
    page = await api.client.get("/config/delay-levels", headers=HTML)
    assert 'data-testid="editor"' in page.text and "Save as version 1" in page.text
    seen = await api.client.get("/config/delay-levels", headers={**HTML, **bearer(viewer)})
    assert seen.status_code == 200 and 'data-testid="editor"' not in seen.text
    fragment = await api.client.get("/config/delay-levels/preview", params={"levels": "1s 5q"},
                                    headers={**HTML, "HX-Request": "true"})
    assert "<html" not in fragment.text and 'data-testid="preview-error"' in fragment.text
    r = await api.client.post("/config/delay-levels", data={"levels": "2s 4s", "expected_version": "0",
                                                            "reason": "try"}, headers=HTML)
    assert r.status_code == 303
    stale = await api.client.post("/config/delay-levels", data={"levels": "3s", "expected_version": "0"},
                                  headers=HTML)
    assert stale.status_code == 409 and "changed since version 0" in stale.text
    page = await api.client.get("/config/delay-levels", headers=HTML)
    assert 'data-testid="current-version">version 1<' in page.text
    r = await api.client.post("/config/delay-levels", data={"levels": "2s 8s", "expected_version": "1"},
                              headers=HTML)
    page = await api.client.get("/config/delay-levels", headers=HTML)
    assert "Roll back to 1" in page.text and "level 2: 4s -&gt; 8s" in page.text
    r = await api.client.post("/config/delay-levels/rollback", data={"version": "1", "expected_version": "2"},
                              headers=HTML)
    assert r.status_code == 303
    assert (await api.client.get(URL)).json() == {"ok": True, "levels": "2s 4s", "version": 3}
