"""Broker faults in the middle of the dead-letter inbox and of a redrive job, on a cluster of two real
brokers: broker-b killed while the inbox waits on it (a partial answer naming it, complete again once
it is back); killed while a job resends (the job pauses itself, resumes by itself once broker-b is
back and sends every dead letter exactly once); paused while a send waits on it (the send's item
stays pending and is settled: still exactly one copy each). One two-broker cluster for the file."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.console import console_on
from tests.cluster.mqadmin_tables import topic_status_rows
from tests.cluster.test_cluster_redrive import job_of, report_rows
from tests.cluster.test_cluster_two_brokers import BROKER_B_HOST, topic_on_both
from tests.cluster.test_remoting_fixture import unique
from tests.live_server import wait_until

pytestmark = pytest.mark.slow  # real RocketMQ brokers: handed out first

HTML = {"Accept": "text/html"}
BROKER_A_ADDRESS = "127.0.0.1:10911"
FAULT_SETTINGS = {"cluster_request_timeout_ms": 3000, "cluster_deadline_ms": 5000}


def dead_letters_on_both(two_brokers, prefix: str, count: int) -> tuple[str, str]:
    """A topic on both brokers and a group that failed its `count` messages into %DLQ%group on both
    (produce round robin over both brokers' queues; the consumer sends each back to its own broker)."""
    rocketmq = two_brokers.cluster
    topic, group = topic_on_both(two_brokers, f"{prefix}Topic"), unique(f"{prefix}Group")
    rocketmq.produce(topic, count, unique(prefix.lower()))
    rocketmq.run("consume", group, topic, str(count), "90", "fail", "1")
    assert held_per_broker(rocketmq, f"%DLQ%{group}") == {"broker-a": count // 2, "broker-b": count // 2}
    return topic, group


def held_per_broker(rocketmq, topic: str) -> dict[str, int]:
    """Messages each broker holds in `topic` (mqadmin topicStatus), brokers holding none left out."""
    held: dict[str, int] = {}
    for (broker, _), (low, high) in topic_status_rows(rocketmq.mqadmin("topicStatus", "-t", topic)).items():
        held[broker] = held.get(broker, 0) + high - low
    return {broker: n for broker, n in held.items() if n}


def on_broker_b(offset_msg_id: str) -> bool:
    return offset_msg_id.startswith(BROKER_B_HOST)


def inbox_ids(client, group: str) -> set[str] | None:
    """Every dead letter of the group, once the inbox answers complete; else None."""
    body = client.get(f"/api/dlq/{group}/messages", params={"limit": 500}).json()
    return {m["offset_msg_id"] for m in body["messages"]} if body.get("complete") else None


def test_broker_b_killed_mid_inbox_leaves_a_partial_answer_naming_it_until_it_is_back(two_brokers, tmp_path):
    two_brokers.ensure_running()
    broker_b, count = two_brokers.broker_b, 8
    _, group = dead_letters_on_both(two_brokers, "InboxFault", count)
    with console_on(two_brokers.cluster, tmp_path, FAULT_SETTINGS) as server, server.client() as client, \
            ThreadPoolExecutor(1) as pool:
        everything = wait_until(lambda: inbox_ids(client, group), 30, "the whole inbox")
        assert len(everything) == count and len({i for i in everything if on_broker_b(i)}) == count // 2
        on_a = {i for i in everything if not on_broker_b(i)}

        broker_b.pause()  # registered still, so asked; it answers nothing
        page = client.get(f"/groups/{group}/dead-letters", headers=HTML)
        assert page.status_code == 200 and 'data-testid="inbox-problems"' in page.text, page.text
        assert "broker-b" in page.text and broker_b.address in page.text
        assert all(i in page.text for i in on_a)

        already_waiting = broker_b.unread_bytes()  # the page's request to it is still unread
        started = time.monotonic()
        asking = pool.submit(client.get, f"/api/dlq/{group}/messages", params={"limit": 500})
        wait_until(lambda: broker_b.unread_bytes() > already_waiting, 10, "the inbox to ask broker-b")
        broker_b.kill()
        answer = asking.result(timeout=30)
        assert time.monotonic() - started < 5.5
        body = answer.json()
        assert answer.status_code == 200 and body["complete"] is False, answer.text
        assert {m["offset_msg_id"] for m in body["messages"]} == on_a
        [problem] = body["problems"]
        assert "broker-b" in problem and broker_b.address in problem and "broker-a" not in problem

        broker_b.start()
        assert wait_until(lambda: inbox_ids(client, group), 30, "the inbox to read broker-b again") == everything
        assert "Traceback" not in server.log_text()


def start_job(client, group: str, rate_per_s: int, destination: object = "group") -> dict:
    created = client.post("/api/redrive-jobs", json={"group": group, "rate_per_s": rate_per_s, "dry_run": False,
                                                     "destination": destination})
    assert created.status_code == 201, created.text
    return created.json()["job"]


def paused_by_the_cluster(client, job_id: int) -> dict | None:
    job = job_of(client, job_id)
    return job if job["state"] == "paused" and "the cluster did not answer" in (job["state_reason"] or "") else None


def check_each_sent_once(client, job_id: int, dead_letters: int, retry_before: dict[str, int],
                         retry_after: dict[str, int], expected: dict[str, int]) -> None:
    """The job is done, its report lists each dead letter once with status ok, and each broker's
    %RETRY%group grew by exactly the copies it was sent."""
    done = job_of(client, job_id)
    assert (done["counts"]["ok"], done["counts"]["failed"], done["counts"]["pending"]) == (dead_letters, 0, 0), done
    rows = report_rows(client, job_id)
    assert len(rows) == dead_letters and {r["status"] for r in rows} == {"ok"}
    assert len({r["dead_letter_id"] for r in rows}) == dead_letters
    assert len({r["new_offset_msg_id"] for r in rows}) == dead_letters
    grew = {b: retry_after.get(b, 0) - retry_before.get(b, 0) for b in ("broker-a", "broker-b")}
    assert grew == expected, (retry_before, retry_after)


def test_broker_b_killed_mid_redrive_pauses_the_job_which_resumes_by_itself_and_sends_each_once(
        two_brokers, tmp_path):
    two_brokers.ensure_running()
    rocketmq, broker_b, count = two_brokers.cluster, two_brokers.broker_b, 40
    _, group = dead_letters_on_both(two_brokers, "RedriveFault", count)
    retry = f"%RETRY%{group}"
    retry_before = held_per_broker(rocketmq, retry)
    with console_on(rocketmq, tmp_path, FAULT_SETTINGS) as server, server.client() as client:
        job = start_job(client, group, rate_per_s=4)
        assert job["total"] == count
        wait_until(lambda: job_of(client, job["id"])["counts"]["ok"] >= 6, 30, "some items sent")
        broker_b.kill()
        paused = wait_until(lambda: paused_by_the_cluster(client, job["id"]), 30, "the job to pause itself")
        assert "broker-b" in paused["state_reason"] or broker_b.address in paused["state_reason"], paused
        assert paused["counts"]["failed"] == 0 and paused["counts"]["ok"] < count, paused

        broker_b.start()
        wait_until(lambda: job_of(client, job["id"])["state"] == "done", 60, "the job to resume and finish")
        check_each_sent_once(client, job["id"], count, retry_before, held_per_broker(rocketmq, retry),
                             {"broker-a": count // 2, "broker-b": count // 2})
        assert "Traceback" not in server.log_text()


def test_a_send_broker_b_left_unanswered_stays_pending_and_is_settled_once_it_is_back(two_brokers, tmp_path):
    """The group's dead letters are on broker-a, and only broker-b takes its retry topic (broker-a's
    is read-only: a broker being drained), so every copy goes to broker-b: a pause catches a send."""
    two_brokers.ensure_running()
    rocketmq, broker_b, count = two_brokers.cluster, two_brokers.broker_b, 10
    topic, group = unique("UnansweredTopic"), unique("UnansweredGroup")
    retry = f"%RETRY%{group}"
    rocketmq.mqadmin("updateTopic", "-b", BROKER_A_ADDRESS, "-t", topic, "-w", "4", "-r", "4")
    rocketmq.produce(topic, count, unique("unanswered"))
    rocketmq.run("consume", group, topic, str(count), "90", "fail", "1")
    assert held_per_broker(rocketmq, f"%DLQ%{group}") == {"broker-a": count}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda args: rocketmq.mqadmin("updateTopic", *args), (
            ("-b", BROKER_A_ADDRESS, "-t", retry, "-w", "1", "-r", "1", "-p", "4"),
            ("-b", broker_b.address, "-t", retry, "-w", "1", "-r", "1"))))
    retry_before = held_per_broker(rocketmq, retry)
    with console_on(rocketmq, tmp_path, FAULT_SETTINGS) as server, server.client() as client:
        job = start_job(client, group, rate_per_s=2)
        wait_until(lambda: job_of(client, job["id"])["counts"]["ok"] >= 2, 30, "some items sent")
        broker_b.pause()
        paused = wait_until(lambda: paused_by_the_cluster(client, job["id"]), 30, "the send to time out")
        assert paused["counts"]["pending"] == 1 and paused["counts"]["failed"] == 0, paused
        assert "broker-b" in paused["state_reason"] and "send" in paused["state_reason"], paused
        broker_b.kill()  # the copy it never read is lost with it
        broker_b.wait_unregistered()
        assert paused_by_the_cluster(client, job["id"]), "resumed while the broker that holds the answer is gone"

        broker_b.start()
        wait_until(lambda: job_of(client, job["id"])["state"] == "done", 60, "the job to settle and finish")
        check_each_sent_once(client, job["id"], count, retry_before, held_per_broker(rocketmq, retry),
                             {"broker-a": 0, "broker-b": count})
        assert "Traceback" not in server.log_text()
