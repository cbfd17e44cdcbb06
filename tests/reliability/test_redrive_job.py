"""Acceptance (issue #10, criterion 3): a redrive job over 10,000 dead letters at 1,000
messages/s through the real server: it shows its progress as it goes and ends with an exact
report; a job killed with the server mid-run resumes after a restart with nothing sent twice;
cancel stops a job. How a job keeps to its rate is tested on a clock the test moves
(tests/app/test_redrive.py): a busy machine only makes this run longer.

The copies are counted in the store afterwards, opened read-only."""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path

import httpx
import pytest

from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig
from tests.live_server import LiveServer, wait_until
from tests.reliability.test_resend_crash import prepare

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

SETTINGS = {"commitlog_file_size": 16 * 1024 * 1024, "cq_file_size": 20 * 32_768, "index_slots": 32_768,
            "index_entries": 262_144}
BIG, KILLED, CANCELLED = "GID_big", "GID_killed", "GID_cancelled"
DEADLINE_S = 300  # a wait for a state, not a time limit: a busy machine is slower


def job(client: httpx.Client, job_id: int) -> dict:
    r = client.get(f"/api/redrive-jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()["job"]


def start(client: httpx.Client, group: str, rate: int) -> dict:
    r = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": rate, "reason": "acceptance"})
    assert r.status_code == 201, r.text
    return r.json()["job"]


def copies(store: MessageStore, group: str) -> Counter:
    found: Counter = Counter()
    name = topics.pop_retry_topic(group, f"T_{group}")
    for queue_id, lo, hi in store.topics().get(name, []):
        for offset in range(lo, hi):
            found[store.get_by_queue_offset(name, queue_id, offset).properties[topics.RESENT_FROM]] += 1
    return found


def test_redrive_jobs_through_the_real_server(tmp_path: Path):
    data = tmp_path / "data"
    big = prepare(data / "store", BIG, 10_000, SETTINGS, topic=f"T_{BIG}")
    killed = prepare(data / "store", KILLED, 3_000, SETTINGS, topic=f"T_{KILLED}")
    cancelled = prepare(data / "store", CANCELLED, 2_000, SETTINGS, topic=f"T_{CANCELLED}")
    with LiveServer(data, tmp_path / "server.log", SETTINGS) as server:
        server.start()
        with server.client() as client:
            # 10,000 at 1,000/s: progress seen on the way, an exact report
            first = start(client, BIG, 1000)
            seen = set()

            def finished() -> bool:
                state = job(client, first["id"])
                seen.add(round(state["progress"], 1))
                return state["state"] == "done"

            wait_until(finished, DEADLINE_S, "the 10,000-message job", poll_s=0.25)
            done = job(client, first["id"])
            assert done["counts"] == {"queued": 0, "pending": 0, "ok": 10_000, "failed": 0, "skipped": 0}
            assert len(seen - {0.0, 1.0}) >= 3, f"progress was not seen moving: {sorted(seen)}"
            report = list(csv.DictReader(io.StringIO(client.get(done["report_url"]).text)))
            assert len(report) == 10_000 and all(row["status"] == "ok" for row in report)

            # killed mid-run, then started again: it goes on and sends nothing twice
            second = start(client, KILLED, 500)
            wait_until(lambda: job(client, second["id"])["counts"]["ok"] >= 1000, DEADLINE_S, "a third sent")
        server.kill()
        server.start()
        with server.client() as client:
            wait_until(lambda: job(client, second["id"])["state"] == "done", DEADLINE_S, "the job resumed")
            assert job(client, second["id"])["counts"]["ok"] == 3_000

            # cancel stops a job: what it sent stays, the rest is skipped
            third = start(client, CANCELLED, 200)
            wait_until(lambda: job(client, third["id"])["counts"]["ok"] >= 100, DEADLINE_S, "some sent")
            assert client.post(f"/api/redrive-jobs/{third['id']}/cancel").status_code == 200
            stopped = job(client, third["id"])
            assert stopped["state"] == "cancelled" and stopped["counts"]["queued"] == 0
            sent_when_cancelled = stopped["counts"]["ok"] + stopped["counts"]["pending"]
        assert server.stop() == 0

    with MessageStore.open(data / "store", StoreConfig(geometry=StoreGeometry(**SETTINGS)), read_only=True) as store:
        assert copies(store, BIG) == Counter(dict.fromkeys(big, 1))
        assert copies(store, KILLED) == Counter(dict.fromkeys(killed, 1))
        stopped_copies = copies(store, CANCELLED)
        assert set(stopped_copies.values()) == {1} and set(stopped_copies) <= set(cancelled)
        assert len(stopped_copies) <= sent_when_cancelled < len(cancelled)
