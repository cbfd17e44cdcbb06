"""Redrive jobs in the app: dry run, run at a rate, pause, resume, cancel, pausing itself when
resent copies come back dead, and items cut by a restart settled from the commit log."""

from __future__ import annotations

import asyncio
import csv
import io
import time

import pytest
from sqlalchemy import select, update

from app.models import RedriveJob, ResendItem
from app.services.redrive import RedriveRunner, every_job_item
from app.services.resend import ACTION_PROPERTY, RESENT_FROM_PROPERTY
from store.format import topics
from tests.app.conftest import assert_error, audit_rows, make_settings, put_messages, running
from tests.app.test_resend import GROUP, receive

pytestmark = pytest.mark.anyio

JOBS = "/api/redrive-jobs"
DEADLINE_S = 30


async def dead_letters(api, count: int) -> list[str]:
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    await put_messages(api, "Orders", [{"body": f"m{n}", "keys": [f"r-{n}"]} for n in range(count)])
    while got := await receive(api, GROUP):
        for m in got:
            await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": m["receipt_handle"]})
    r = await api.client.get(f"/api/dlq/{GROUP}/messages", params={"limit": 500})
    return [m["offset_msg_id"] for m in r.json()["messages"]]


async def wait_for(api, job_id: int, *states: str) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        job = (await api.client.get(f"{JOBS}/{job_id}")).json()["job"]
        if job["state"] in states:
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not reach {states}: {job}")


def copies(api) -> dict[str, int]:
    """Resent copies in the group's pop retry topic, per dead letter."""
    found: dict[str, int] = {}
    name = topics.pop_retry_topic(GROUP, "Orders")
    for queue_id, lo, hi in api.store.topics().get(name, []):
        for offset in range(lo, hi):
            msg = api.store.get_by_queue_offset(name, queue_id, offset)
            found[msg.properties[RESENT_FROM_PROPERTY]] = found.get(msg.properties[RESENT_FROM_PROPERTY], 0) + 1
    return found


async def test_a_dry_run_lists_everything_then_resume_runs_exactly_that(api):
    ids = await dead_letters(api, 12)
    r = await api.client.post(JOBS, json={"group": GROUP, "dry_run": True, "rate_per_s": 500, "reason": "outage"})
    assert r.status_code == 201, r.text
    job = r.json()["job"]
    assert (job["state"], job["total"], job["counts"]["queued"], job["progress"]) == ("planned", 12, 12, 0)
    listed = (await api.client.get(f"{JOBS}/{job['id']}/items")).json()["items"]
    assert sorted(i["dead_letter_id"] for i in listed) == sorted(ids)
    assert {i["destination"] for i in listed} == {topics.pop_retry_topic(GROUP, "Orders")}
    assert copies(api) == {}
    r = await api.client.post(f"{JOBS}/{job['id']}/resume")
    assert r.status_code == 200 and r.json()["job"]["state"] == "running"
    done = await wait_for(api, job["id"], "done")
    assert done["counts"] == {"queued": 0, "pending": 0, "ok": 12, "failed": 0, "skipped": 0}
    assert done["progress"] == 1.0 and copies(api) == dict.fromkeys(ids, 1)
    report = list(csv.DictReader(io.StringIO((await api.client.get(done["report_url"])).text)))
    assert len(report) == 12 and {row["status"] for row in report} == {"ok"}
    inbox = (await api.client.get(f"/api/dlq/{GROUP}/messages")).json()
    assert inbox["counts"]["resent"] == 12
    actions = [(e.action, e.actor) for e in audit_rows(api.sessions) if "redrive" in e.action]
    assert actions == [("create_redrive_job", "bootstrap-admin"), ("control_redrive_job", "bootstrap-admin")]
    # a second job finds nothing waiting
    assert_error(await api.client.post(JOBS, json={"group": GROUP}), 400, "no dead letter matches")


class PaceClock:
    """The runner's seconds, moved by the test only."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def copies_in_order(api) -> list[str]:
    """The dead letter each resent copy came from, in the order the copies were written."""
    name = topics.pop_retry_topic(GROUP, "Orders")
    return [api.store.get_by_queue_offset(name, queue_id, offset).properties[RESENT_FROM_PROPERTY]
            for queue_id, lo, hi in api.store.topics().get(name, []) for offset in range(lo, hi)]


async def test_a_job_keeps_its_rate_on_the_runners_clock_and_sends_in_order(api):
    await dead_letters(api, 60)
    api.app.state.redrive.stop()  # the test turns the runner itself, on a clock only it moves
    pace = PaceClock()
    runner = RedriveRunner(api.store, api.sessions, api.app.state.clock, pace_clock=pace)
    job = (await api.client.post(JOBS, json={"group": GROUP, "dry_run": True, "rate_per_s": 16,
                                             "reason": "pacing"})).json()["job"]
    assert (await api.client.post(f"{JOBS}/{job['id']}/resume")).status_code == 200
    sent = lambda: len(copies_in_order(api))  # noqa: E731
    assert not runner.step() and sent() == 0  # no time has passed: nothing is sent
    for eighth in range(1, 9):  # one second, an eighth at a time: 16 a second, 2 per eighth
        pace.now += 0.125
        assert runner.step()
        assert sent() == 2 * eighth
    assert not runner.step() and sent() == 16  # the clock stood still: nothing more
    pace.now += 60  # a minute without a turn of the runner does not make a burst of 960
    runner.step()
    assert sent() == 16 + 3  # at most a fifth of a second's worth at once
    while (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]["state"] == "running":
        before = sent()
        pace.now += 0.125
        runner.step()
        assert sent() - before <= 2
    done = (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]
    assert done["state"] == "done" and done["counts"]["ok"] == 60
    assert copies_in_order(api) == [item.dead_letter_id for item in every_job_item(api.sessions, job["id"])]


async def test_pause_resume_cancel(api):
    ids = await dead_letters(api, 40)
    api.app.state.redrive.stop()  # the test turns the runner itself, on a clock only it moves
    pace = PaceClock()
    runner = RedriveRunner(api.store, api.sessions, api.app.state.clock, pace_clock=pace)
    job = (await api.client.post(JOBS, json={"group": GROUP, "rate_per_s": 10})).json()["job"]
    runner.step()
    pace.now += 0.5  # 5 messages' worth, of which a batch takes at most a fifth of a second's: 2
    assert runner.step() and sum(copies(api).values()) == 2
    paused = (await api.client.post(f"{JOBS}/{job['id']}/pause")).json()["job"]
    assert paused["state"] == "paused" and paused["counts"]["ok"] == 2
    assert_error(await api.client.post(f"{JOBS}/{job['id']}/pause"), 409, "cannot pause")
    pace.now += 10
    assert not runner.step()  # a paused job sends nothing when the runner comes round
    assert sum(copies(api).values()) == 2
    assert (await api.client.post(f"{JOBS}/{job['id']}/resume")).json()["job"]["state"] == "running"
    cancelled = (await api.client.post(f"{JOBS}/{job['id']}/cancel")).json()["job"]
    assert cancelled["state"] == "cancelled" and cancelled["counts"]["queued"] == 0
    pace.now += 10
    assert not runner.step()  # nor does a cancelled one
    final = (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]
    assert final["counts"] == {"queued": 0, "pending": 0, "ok": 2, "failed": 0, "skipped": 38}
    assert sum(copies(api).values()) == 2 < len(ids)
    assert_error(await api.client.post(f"{JOBS}/{job['id']}/resume"), 409, "cancelled")
    assert_error(await api.client.post(f"{JOBS}/999/pause"), 404, "no redrive job")
    assert_error(await api.client.post(f"{JOBS}/{job['id']}/explode"), 422)


async def test_a_repeated_request_gets_its_job_back_even_when_nothing_waits_any_more(api):
    await dead_letters(api, 5)
    body, key = {"group": GROUP, "rate_per_s": 100}, {"Idempotency-Key": "job-once"}
    first = await api.client.post(JOBS, json=body, headers=key)
    assert first.status_code == 201
    job = await wait_for(api, first.json()["job"]["id"], "done")
    again = await api.client.post(JOBS, json=body, headers=key)
    assert again.status_code == 201 and again.json()["job"]["id"] == job["id"]
    assert sum(copies(api).values()) == 5  # the repeat sent nothing
    assert_error(await api.client.post(JOBS, json=body), 400, "nothing to redrive")
    assert_error(await api.client.post(JOBS, json={**body, "rate_per_s": 7}, headers=key), 409, "different request")


async def test_a_job_pauses_itself_when_its_copies_come_back_dead(api):
    await dead_letters(api, 60)
    job = (await api.client.post(JOBS, json={"group": GROUP, "rate_per_s": 10, "max_dead_share": 0.3})).json()["job"]
    deadline = time.monotonic() + DEADLINE_S
    while (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]["state"] == "running":
        for m in await receive(api, GROUP):  # the consumer still fails every one of them
            await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": m["receipt_handle"]})
        assert time.monotonic() < deadline, "the job did not pause itself"
        await asyncio.sleep(0.05)
    job = (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]
    assert job["state"] == "paused" and "came back dead" in job["state_reason"]
    assert job["dead_again"] > 0.3 * job["counts"]["ok"] and job["counts"]["queued"] > 0


async def test_bad_jobs_are_refused(api):
    await dead_letters(api, 1)
    for body, status in [({"group": GROUP, "rate_per_s": 0}, 422), ({"group": GROUP, "rate_per_s": 10_001}, 422),
                         ({"group": GROUP, "max_dead_share": 0}, 422), ({"group": GROUP, "filter": {"x": 1}}, 422),
                         ({"group": "nobody"}, 404), ({"group": GROUP, "destination": {"topic": "%DLQ%x"}}, 400)]:
        assert_error(await api.client.post(JOBS, json=body), status)


async def test_items_cut_by_a_restart_are_settled_and_nothing_is_sent_twice(data_dir, clock):
    settings = make_settings(data_dir)
    async with running(settings, clock) as api:
        ids = await dead_letters(api, 10)
        job = (await api.client.post(JOBS, json={"group": GROUP, "dry_run": True})).json()["job"]
        # as if the server died mid-batch: two items pending, one of them already resent
        with api.sessions.begin() as s:
            first, second = s.scalars(select(ResendItem).where(ResendItem.job_id == job["id"])
                                      .order_by(ResendItem.id).limit(2)).all()
            first.status = second.status = "pending"
            first.claim, second.claim = first.dead_letter_id, second.dead_letter_id
            s.execute(update(RedriveJob).where(RedriveJob.id == job["id"]).values(state="running"))
            made = first
        dead = api.store.get_by_offset_id(made.dead_letter_id)
        marks = {ACTION_PROPERTY: str(made.action_id), RESENT_FROM_PROPERTY: dead.offset_msg_id}
        api.store.resend_dead_letter(dead.phys_offset, "ops", topic=made.destination, unique_key=made.lookup_key,
                                     marks=marks)
        api.app.state.redrive.stop()  # the "crash": nothing more runs in this server
    async with running(settings, clock) as again:
        done = await wait_for(again, job["id"], "done")
        assert done["counts"]["ok"] == 10 and done["counts"]["failed"] == 0
        assert copies(again) == dict.fromkeys(ids, 1)


async def test_the_job_pages(api):
    await dead_letters(api, 5)
    html = {"Accept": "text/html"}
    inbox = await api.client.get(f"/groups/{GROUP}/dead-letters", headers=html)
    assert 'data-testid="redrive-form"' in inbox.text and "Plan a redrive job for the 5 waiting" in inbox.text
    r = await api.client.post("/redrive-jobs", data={"group": GROUP, "state": "waiting", "rate_per_s": "1000"},
                              headers=html)
    assert r.status_code == 303
    job_url = r.headers["location"]
    page = await api.client.get(job_url, headers=html)
    assert 'data-testid="job-state">planned<' in page.text and "Start: resend these 5" in page.text
    assert (await api.client.post(f"{job_url}/resume", headers=html)).status_code == 303
    job_id = int(job_url.rsplit("/", 1)[1])
    await wait_for(api, job_id, "done")
    page = await api.client.get(job_url, headers={**html, "HX-Request": "true"})
    assert page.status_code == 286 and "<html" not in page.text and "5</strong> of 5 done" in page.text
    twin = (await api.client.get(f"{job_url}.json")).json()
    assert twin["job"]["state"] == "done" and len(twin["items"]) == 5
    listing = await api.client.get("/redrive-jobs", headers=html)
    assert f'href="/redrive-jobs/{job_id}"' in listing.text
    bad = await api.client.post("/redrive-jobs", data={"group": GROUP, "rate_per_s": "fast"}, headers=html)
    assert bad.status_code == 400 and "Rate must be a whole number" in bad.text


async def test_a_jobs_items_come_in_pages(api):
    """A job's items page with a cursor, in the API and the job page (issue 25 #16: 100,000 items,
    14 MB, in one answer)."""
    ids = await dead_letters(api, 12)
    job = (await api.client.post(JOBS, json={"group": GROUP, "dry_run": True})).json()["job"]
    listed, cursor, pages = [], None, 0
    while True:
        r = await api.client.get(f"{JOBS}/{job['id']}/items", params={"limit": 5, **({"cursor": cursor} if cursor
                                                                                       else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        listed += [i["dead_letter_id"] for i in body["items"]]
        pages += 1
        if (cursor := body["next_cursor"]) is None:
            break
        assert len(body["items"]) == 5
        if pages == 1:
            after_five = cursor
    assert pages == 3 and sorted(listed) == sorted(ids) and len(set(listed)) == 12
    assert_error(await api.client.get(f"{JOBS}/{job['id']}/items", params={"limit": 5_000}), 422)
    html = (await api.client.get(f"/redrive-jobs/{job['id']}", params={"cursor": after_five},
                                 headers={"Accept": "text/html"})).text
    assert all(i in html for i in listed[5:]) and not any(i in html for i in listed[:5])
    report = list(csv.DictReader(io.StringIO((await api.client.get(job["report_url"])).text)))
    assert [row["dead_letter_id"] for row in report] == listed


async def test_a_cancel_between_the_runners_choice_and_its_claim_sends_none_of_the_skipped(api):
    """The runner picks its batch, then marks it pending: items a cancel skipped in between stay
    skipped and are not sent."""
    await dead_letters(api, 10)
    api.app.state.redrive.stop()
    job = (await api.client.post(JOBS, json={"group": GROUP, "rate_per_s": 1000})).json()["job"]

    class CancelledMeanwhile(RedriveRunner):
        def _mark_pending(self, s, item):
            if not getattr(self, "cancelled", False):
                self.cancelled = True
                with api.sessions.begin() as other:  # the cancel commits before the claim writes
                    other.execute(update(RedriveJob).where(RedriveJob.id == job["id"]).values(state="cancelled"))
                    other.execute(update(ResendItem).where(ResendItem.job_id == job["id"],
                                                           ResendItem.status == "queued").values(status="skipped"))
            return super()._mark_pending(s, item)

    pace = PaceClock()
    runner = CancelledMeanwhile(api.store, api.sessions, api.app.state.clock, pace_clock=pace)
    runner.step()
    pace.now += 1
    runner.step()
    final = (await api.client.get(f"{JOBS}/{job['id']}")).json()["job"]
    assert final["counts"] == {"queued": 0, "pending": 0, "ok": 0, "failed": 0, "skipped": 10}
    assert copies(api) == {}
