"""Redrive jobs on a live cluster: a job over 1,000 real dead letters at 200/s sends each once to the
failed group's retry topic and reports every one; a planned job runs exactly its list; pause, resume
and cancel; and a job whose dead letters' broker is not there pauses itself instead of failing them."""

from __future__ import annotations

import csv
import io

import pytest

from tests.cluster.console import console_on
from tests.cluster.test_cluster_dead_letters import held_in
from tests.cluster.test_remoting_fixture import unique
from tests.live_server import wait_until

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first


def job_of(client, job_id: int) -> dict:
    return client.get(f"/api/redrive-jobs/{job_id}").json()["job"]


def report_rows(client, job_id: int) -> list[dict]:
    r = client.get(f"/api/redrive-jobs/{job_id}/report.csv")
    assert r.status_code == 200, r.text
    return list(csv.DictReader(io.StringIO(r.text)))


def test_a_job_over_a_thousand_dead_letters_at_200_per_second_sends_each_once_with_an_exact_report(
        rocketmq, tmp_path):
    topic, group = unique("RedriveTopic"), unique("RedriveGroup")
    count, retry = 1000, f"%RETRY%{group}"
    sent = rocketmq.produce(topic, count, unique("redrive"))
    rocketmq.run("consume", group, topic, str(count), "120", "fail", "1", timeout_s=240)
    retry_before = held_in(rocketmq, retry)
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        created = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": 200, "dry_run": False},
                              headers={"Idempotency-Key": "redrive-1000"})
        assert created.status_code == 201, created.text
        job = created.json()["job"]
        assert (job["total"], job["state"]) == (count, "running")
        wait_until(lambda: job_of(client, job["id"])["state"] == "done", 60,
                   what="the job to finish")
        done = job_of(client, job["id"])
        assert (done["counts"]["ok"], done["counts"].get("failed", 0), done["progress"]) == (count, 0, 1.0), done
        # The job's rate held: 1,000 at 200/s take at least about five seconds.
        assert done["finished_at_ms"] - done["started_at_ms"] >= 4_000

        rows = report_rows(client, job["id"])
        assert len(rows) == count and {r["status"] for r in rows} == {"ok"}
        assert len({r["dead_letter_id"] for r in rows}) == count and len({r["new_offset_msg_id"] for r in rows}) \
            == count
        assert {r["topic"] for r in rows} == {topic} and all(r["keys"] for r in rows)
        assert {r["destination"] for r in rows} == {retry}
        assert held_in(rocketmq, retry) - retry_before == count  # each sent once, nothing more

        again = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": 200, "dry_run": False},
                            headers={"Idempotency-Key": "redrive-1000"})
        assert again.status_code == 201 and again.json()["job"]["id"] == job["id"], again.text  # no new job
        refused = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": 200})
        assert refused.status_code == 400 and "nothing to redrive" in refused.json()["error"]
    # The group's consumer receives every copy (from its retry topic) and succeeds this time.
    rocketmq.run("consume", group, topic, str(len(sent)), "120", timeout_s=240)


def test_a_planned_job_runs_its_list_and_pauses_resumes_and_cancels(rocketmq, tmp_path):
    topic, group = unique("PlanTopic"), unique("PlanGroup")
    rocketmq.produce(topic, 40, unique("plan"))
    rocketmq.run("consume", group, topic, "40", "60", "fail", "1")
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        planned = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": 10, "dry_run": True})
        assert planned.status_code == 201, planned.text
        job = planned.json()["job"]
        assert (job["state"], job["total"]) == ("planned", 40)
        listed = client.get(f"/api/redrive-jobs/{job['id']}/items").json()["items"]
        assert len(listed) == 40 and {i["status"] for i in listed} == {"queued"}

        assert client.post(f"/api/redrive-jobs/{job['id']}/resume").json()["job"]["state"] == "running"
        wait_until(lambda: job_of(client, job["id"])["counts"].get("ok", 0) >= 5, 30,
                   what="some items sent")
        paused = client.post(f"/api/redrive-jobs/{job['id']}/pause").json()["job"]
        assert paused["state"] == "paused"
        assert client.post(f"/api/redrive-jobs/{job['id']}/cancel").json()["job"]["state"] == "cancelled"
        final = job_of(client, job["id"])
        sent = final["counts"].get("ok", 0)
        assert 5 <= sent < 40 and final["counts"]["skipped"] == 40 - sent
        assert held_in(rocketmq, f"%RETRY%{group}") >= sent

        bad = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": 10,
                                                     "filter": {"reason": "timeout"}})
        assert bad.status_code == 400 and "embedded store" in bad.json()["error"]
        unknown = client.post("/api/redrive-jobs", json={"group": unique("NoSuchGroup"), "rate_per_s": 10})
        assert unknown.status_code in (400, 404) and "error" in unknown.json()
