"""What the audit log says of an action: a reason for one-click resends and for pausing or
resuming a redrive job, the delay-level table before and after a change, a rollback as a
rollback (from which version to which), and times in ISO 8601 UTC beside epoch milliseconds."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

import pytest

from tests.app.conftest import audit_rows, bearer
from tests.app.test_redrive import dead_letters
from tests.app.test_resend import GROUP, dead_letter

pytestmark = pytest.mark.anyio

HTML = {"Accept": "text/html"}
LEVELS = "/api/config/delay-levels"


def form_of(html: str, action: str) -> str:
    found = re.search(r'<form[^>]*action="' + re.escape(action) + r'".*?</form>', html, re.S)
    assert found, f"no form posting to {action}"
    return found.group(0)


async def test_a_one_click_resend_offers_an_optional_reason(api):
    _, dead_id = await dead_letter(api)
    support = (await api.client.post("/api/tokens", json={"name": "sam", "role": "support"})).json()["value"]
    page = (await api.client.get(f"/messages/{dead_id}", headers={**HTML, **bearer(support)})).text
    form = form_of(page, "/dead-letters/resend")
    assert 'name="confirm"' in form and re.search(r'<input[^>]*name="reason"', form)
    assert "required" not in re.search(r'<input[^>]*name="reason"[^>]*>', form).group(0)
    r = await api.client.post("/dead-letters/resend", headers={**HTML, **bearer(support)},
                              data={"group": GROUP, "message_id": dead_id, "destination": "group", "confirm": "true",
                                    "reason": "customer asked, ticket 5"})
    assert r.status_code == 200, r.text
    [entry] = audit_rows(api.sessions, action="resend_dead_letters")
    assert (entry.actor, entry.reason) == ("sam", "customer asked, ticket 5")


async def test_pausing_and_resuming_a_redrive_job_records_an_optional_reason(api):
    await dead_letters(api, 10)
    job = (await api.client.post("/api/redrive-jobs", json={"group": GROUP, "dry_run": True,
                                                            "rate_per_s": 1})).json()["job"]
    url = f"/api/redrive-jobs/{job['id']}"
    page = (await api.client.get(f"/redrive-jobs/{job['id']}", headers=HTML)).text
    assert re.search(r'<input[^>]*name="reason"', form_of(page, f"/redrive-jobs/{job['id']}/resume"))
    r = await api.client.post(f"/redrive-jobs/{job['id']}/resume", data={"reason": "billing is back"}, headers=HTML)
    assert r.status_code == 303
    r = await api.client.post(f"{url}/pause", json={"reason": "deploy window"})
    assert r.status_code == 200, r.text
    r = await api.client.post(f"{url}/resume")  # the reason is optional
    assert r.status_code == 200, r.text
    rows = audit_rows(api.sessions, action="control_redrive_job")
    assert [(json.loads(e.detail)["command"], e.reason) for e in rows] == [
        ("resume", "billing is back"), ("pause", "deploy window"), ("resume", None)]


async def test_a_delay_level_change_records_the_table_before_and_after(api):
    before = (await api.client.get(LEVELS)).json()
    assert (await api.client.put(LEVELS, json={"levels": "1s 2s"})).status_code == 200
    assert (await api.client.put(LEVELS, json={"levels": "1s 5s 9s"})).status_code == 200
    entries = (await api.client.get("/api/audit", params={"action": "set_delay_levels"})).json()["entries"]
    second, first = (e["detail"]["result"] for e in entries)
    assert first["before"] == {"version": before["version"], "levels": before["levels"]}
    assert first["after"] == {"version": 1, "levels": "1s 2s"}
    assert second["before"] == {"version": 1, "levels": "1s 2s"} and second["after"] == {"version": 2,
                                                                                          "levels": "1s 5s 9s"}


async def test_a_rollback_is_audited_as_a_rollback_from_one_version_to_another(api):
    for levels in ("1s 2s", "1s 5s 9s"):
        assert (await api.client.put(LEVELS, json={"levels": levels})).status_code == 200
    r = await api.client.post(f"{LEVELS}/rollback", json={"version": 1, "reason": "too slow"})
    assert r.status_code == 200 and r.json()["version"] == 3
    [entry] = (await api.client.get("/api/audit", params={"action": "rollback_delay_levels"})).json()["entries"]
    assert entry["reason"] == "rollback to version 1: too slow" and entry["outcome"] == "ok"
    assert entry["detail"]["request"] == {"version": 1}
    result = entry["detail"]["result"]
    assert (result["from_version"], result["to_version"], result["version"]) == (2, 1, 3)
    assert result["before"] == {"version": 2, "levels": "1s 5s 9s"} and result["after"] == {"version": 3,
                                                                                             "levels": "1s 2s"}
    sets = (await api.client.get("/api/audit", params={"action": "set_delay_levels"})).json()["entries"]
    assert len(sets) == 2


async def test_the_audit_csv_has_iso_8601_utc_times_beside_epoch_ms(api, clock):
    clock.advance(1234)
    assert (await api.client.put(LEVELS, json={"levels": "1s 2s"})).status_code == 200
    rows = list(csv.DictReader(io.StringIO((await api.client.get("/api/audit.csv")).text)))
    assert rows
    for row in rows:
        at = dt.datetime.fromtimestamp(int(row["at_ms"]) / 1000, tz=dt.UTC)
        assert row["at"] == at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(row['at_ms']) % 1000:03d}Z"
    assert rows[0]["at"].endswith(".234Z")
