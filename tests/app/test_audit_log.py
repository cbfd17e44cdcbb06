"""The audit log: GET /api/audit (and .csv) and the audit page, with filters and paging."""

from __future__ import annotations

import csv
import io

import pytest

from tests.app.conftest import assert_error, bearer
from tests.app.test_dead_letters import INBOX, fail

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}


async def test_every_action_is_there_with_who_what_why_and_outcome(api, clock):
    viewer = (await api.client.post("/api/tokens", json={"name": "vera", "role": "viewer"})).json()["value"]
    clock.advance(1000)
    since = clock.now_ms()
    await api.client.put("/api/config/delay-levels", json={"levels": "1s 2s 3s", "reason": "TICKET-7"})
    await fail(api, "audited")
    [row] = (await api.client.get(INBOX)).json()["messages"]
    r = await api.client.post(f"/api/messages/{row['offset_msg_id']}/reveal", json={"reason": "customer call"},
                              headers=bearer(viewer))
    assert r.status_code == 200 and r.json()["message"]["body_text"] == "body of audited"
    r = await api.client.post("/api/dlq/GID_dlq/resend", json={"message_ids": [row["offset_msg_id"]],
                                                                "reason": "fixed"})
    new_id = r.json()["results"][0]["new_offset_msg_id"]

    entries = (await api.client.get("/api/audit", params={"since": since})).json()["entries"]
    actions = [(e["action"], e["actor"], e["role"], e["outcome"]) for e in entries]
    assert actions[:2] == [("resend_dead_letters", "bootstrap-admin", "admin", "ok"),
                           ("reveal_body", "vera", "viewer", "ok")]
    assert ("set_delay_levels", "bootstrap-admin", "admin", "ok") in actions
    levels = next(e for e in entries if e["action"] == "set_delay_levels")
    assert levels["reason"] == "TICKET-7" and levels["detail"]["request"] == {"levels": "1s 2s 3s"}
    by_viewer = (await api.client.get("/api/audit", params={"actor": "vera"}, headers=bearer(viewer))).json()
    assert [e["action"] for e in by_viewer["entries"]] == ["reveal_body"]
    about = (await api.client.get("/api/audit", params={"message": row["offset_msg_id"]})).json()["entries"]
    assert [e["action"] for e in about] == ["resend_dead_letters", "reveal_body"]
    made = (await api.client.get("/api/audit", params={"message": new_id})).json()["entries"]
    assert [e["action"] for e in made] == ["resend_dead_letters"]
    groups = (await api.client.get("/api/audit", params={"target": "group:"})).json()["entries"]
    assert groups and all(e["target"].startswith("group:") for e in groups)

    # paging and CSV
    first = (await api.client.get("/api/audit", params={"limit": 2})).json()
    second = (await api.client.get("/api/audit", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert [e["id"] for e in first["entries"]][-1] > second["entries"][0]["id"]
    rows = list(csv.DictReader(io.StringIO((await api.client.get("/api/audit.csv", params={"actor": "vera"})).text)))
    assert [r["action"] for r in rows] == ["reveal_body"] and rows[0]["reason"] == "customer call"
    assert_error(await api.client.get("/api/audit", params={"cursor": "x"}), 400, "malformed cursor")
    assert_error(await api.client.get("/api/audit", params={"limit": 0}), 422)

    # the page, and the message page's link to it
    page = await api.client.get("/audit", params={"message": row["offset_msg_id"]}, headers=HTML)
    assert page.status_code == 200 and "resend dead letters" in page.text and "reveal body" in page.text
    msg_page = await api.client.get(f"/messages/{row['offset_msg_id']}", headers=HTML)
    assert f'href="/audit?message={row["offset_msg_id"]}"' in msg_page.text
    assert (await api.client.get("/audit.json")).json()["entries"]
