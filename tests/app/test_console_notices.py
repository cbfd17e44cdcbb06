"""What the console tells a person after acting and where it leads them: a "saved" notice after
saving delay levels, group settings or an offset reset; a refused repeated resend that links back
and offers the forced resend with a reason; an offset-reset form that starts on a topic the group
consumes and says its times are UTC; redrive lists that tell the dead letters apart; and
sentences that read right."""

from __future__ import annotations

import csv
import io
import re

import pytest

from tests.app.conftest import put_messages
from tests.app.test_dead_letters import fail
from tests.app.test_redrive import wait_for
from tests.app.test_resend import GROUP, receive

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}


async def follow(api, response) -> str:
    assert response.status_code == 303, response.text
    page = await api.client.get(response.headers["location"], headers=HTML)
    assert page.status_code == 200, page.text
    return page.text


def notice(page: str) -> str | None:
    found = re.search(r'data-testid="saved">([^<]*)<', page)
    return found.group(1) if found else None


async def test_saving_and_rolling_back_delay_levels_say_saved(api):
    plain = await api.client.get("/config/delay-levels", headers=HTML)
    assert notice(plain.text) is None
    saved = await api.client.post("/config/delay-levels", data={"levels": "2s 4s", "expected_version": "0"},
                                  headers=HTML)
    assert notice(await follow(api, saved)) == "Saved as version 1: in use now."
    await follow(api, await api.client.post("/config/delay-levels", data={"levels": "2s 8s", "expected_version": "1"},
                                            headers=HTML))
    rolled = await api.client.post("/config/delay-levels/rollback", data={"version": "1", "expected_version": "2"},
                                   headers=HTML)
    assert notice(await follow(api, rolled)) == "Saved as version 3: in use now."
    twin = (await api.client.get("/config/delay-levels.json", params={"saved": "3"})).json()
    assert twin["saved"] == 3
    assert (await api.client.get("/config/delay-levels.json", params={"saved": "99"})).json()["saved"] is None


async def test_the_offset_reset_form_starts_on_a_consumed_topic_in_utc_and_says_done(api):
    await put_messages(api, "Alpha", {"body": "not consumed by the group"})
    await put_messages(api, "Zeta", [{"body": "a"}, {"body": "b"}])
    for m in await receive(api, GROUP, topic="Zeta"):
        await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": m["receipt_handle"]})
    page = (await api.client.get(f"/groups/{GROUP}", headers=HTML)).text
    options = re.findall(r"<option( selected)?>(Alpha|Zeta)</option>", page)
    assert options == [(" selected", "Zeta"), ("", "Alpha")]
    assert "Time (UTC) or offset" in page and notice(page) is None
    assert (await api.client.get(f"/groups/{GROUP}.json")).json()["consumed_topics"][0] == "Zeta"

    preview = await api.client.post(f"/groups/{GROUP}/offsets/reset", headers=HTML,
                                    data={"topic": "Zeta", "to": "time", "value": "2026-11-21T08:30"})
    assert preview.status_code == 200
    assert re.search(r'data-testid="reset-time">[^<]*<strong>2026-11-21 08:30:00.000 UTC</strong>', preview.text)
    done = await api.client.post(f"/groups/{GROUP}/offsets/reset", headers=HTML,
                                 data={"topic": "Zeta", "to": "earliest", "confirm": "true"})
    assert notice(await follow(api, done)) == (f"Offsets on Zeta reset: {GROUP}'s consumers go on from the "
                                               "committed offsets below.")

    version = (await api.client.get(f"/api/groups/{GROUP}")).json()["group"]["version"]
    settings = await api.client.post(f"/groups/{GROUP}/settings", headers=HTML, data={
        "max_reconsume_times": "5", "consume_mode": "concurrent", "expected_version": version})
    assert notice(await follow(api, settings)) == "Settings saved: max reconsume times 5, concurrent."


async def test_a_repeated_resend_links_back_and_offers_the_forced_resend_with_a_reason(api):
    await fail(api, "again-1")
    [row] = (await api.client.get(f"/api/dlq/{GROUP}/messages")).json()["messages"]
    form = {"group": GROUP, "message_id": row["offset_msg_id"], "destination": "group", "confirm": "true"}
    first = await api.client.post("/dead-letters/resend", data={**form, "idempotency_key": "k1"}, headers=HTML)
    assert first.status_code == 200, first.text

    again = await api.client.post("/dead-letters/resend", data={**form, "idempotency_key": "k2"}, headers=HTML)
    assert again.status_code == 409
    assert "resent already" in again.text
    assert f'href="/groups/{GROUP}/dead-letters" data-testid="back"' in again.text
    force_form = again.text[again.text.index('data-testid="force-form"'):]
    force_form = force_form[:force_form.index("</form>")]
    assert '<input type="hidden" name="force" value="true">' in force_form
    assert f'<input type="hidden" name="message_id" value="{row["offset_msg_id"]}">' in force_form
    assert re.search(r'<input name="reason" value="" required', force_form)
    key = re.search(r'name="idempotency_key" value="([^"]+)"', force_form).group(1)

    twin = await api.client.post("/dead-letters/resend", data={**form, "idempotency_key": "k3"},
                                 headers={"Accept": "application/json"})
    assert twin.status_code == 409
    body = twin.json()
    assert body["ok"] is False and "resent already" in body["error"]
    assert [e["dead_letter_id"] for e in body["earlier"]] == [row["offset_msg_id"]]

    forced = await api.client.post("/dead-letters/resend", headers=HTML, data={
        **form, "force": "true", "reason": "customer asked twice", "idempotency_key": key})
    assert forced.status_code == 200 and "resent to" in forced.text
    assert (await api.client.get(f"/api/dlq/{GROUP}/messages")).json()["counts"]["resent"] == 1


async def test_the_redrive_job_page_and_report_tell_the_dead_letters_apart(api):
    await fail(api, "refund-7", reason="card expired")
    page = await follow(api, await api.client.post("/redrive-jobs", headers=HTML,
                                                   data={"group": GROUP, "rate_per_s": "1000"}))
    job_url = re.search(r'hx-get="(/redrive-jobs/\d+)"|action="(/redrive-jobs/\d+)/resume"', page)
    job_path = job_url.group(1) or job_url.group(2)
    twin = (await api.client.get(f"{job_path}.json")).json()
    [item] = twin["items"]
    assert item["keys"] == ["refund-7"] and item["topic"] == "Orders" and item["reason"].endswith("card expired")
    assert item["born_timestamp"] > 0
    assert '<td data-testid="item-keys">refund-7</td><td>Orders</td>' in page and "card expired" in page

    job_id = int(job_path.rsplit("/", 1)[1])
    started = await follow(api, await api.client.post(f"{job_path}/resume", headers=HTML))
    assert re.search(r'data-testid="job-state-reason">· (started by [^<]+|every item handled)<', started)
    done = await wait_for(api, job_id, "done")
    assert done["state_reason"] == "every item handled"
    report = await api.client.get(f"/api/redrive-jobs/{job_id}/report.csv")
    [row] = list(csv.DictReader(io.StringIO(report.text)))
    assert (row["keys"], row["topic"], row["status"]) == ("refund-7", "Orders", "ok")
    assert row["reason"].endswith("card expired") and int(row["born_timestamp"]) == item["born_timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row["born_time_utc"])


async def test_sentences_read_right(api):
    await fail(api, "one-attempt")
    [row] = (await api.client.get(f"/api/dlq/{GROUP}/messages")).json()["messages"]
    assert row["reason"].startswith("1 delivery attempt failed; last: boom")
    timeline = (await api.client.get(f"/messages/{row['offset_msg_id']}/timeline.json")).json()
    [dead] = [h for h in timeline["hops"] if h["kind"] == "dead_lettered"]
    assert "1 delivery attempt failed" in dead["detail"]
    search = await api.client.get("/search", params={"q": "one-attempt"}, headers=HTML)
    summary = re.search(r'<p class="summary">(.*?)</p>', search.text, re.S).group(1)
    assert re.sub(r"\s+", " ", summary).strip().startswith("2 messages · looked up as <strong>key</strong> · in ")

    for n in range(5):
        await fail(api, f"slow-{n}")
    job = (await api.client.post("/api/redrive-jobs", json={"group": GROUP, "dry_run": True, "rate_per_s": 1})
           ).json()["job"]  # one a second: running for seconds
    said = {}
    for command in ("resume", "pause", "resume", "cancel"):
        r = await api.client.post(f"/api/redrive-jobs/{job['id']}/{command}")
        assert r.status_code == 200, r.text
        said.setdefault(command, []).append((r.json()["job"]["state"], r.json()["job"]["state_reason"]))
    who = "bootstrap-admin"  # the token the test client sends
    assert said == {"resume": [("running", f"started by {who}"), ("running", f"resumed by {who}")],
                    "pause": [("paused", f"paused by {who}")], "cancel": [("cancelled", f"cancelled by {who}")]}
