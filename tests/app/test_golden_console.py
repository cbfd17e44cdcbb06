"""A store RocketMQ 4.9.8 wrote, served read-only: every golden record is found by its offset id
and its unique key through the REST API and the pages, the retried and dead-lettered messages
show their hops and verdicts, writes are refused, and not one byte of the store changes; the
same through a real `mqlens serve --store ... --read-only`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.cli import main
from app.config import Settings
from store.format import topics
from store.format.delay_levels import parse_delay_levels
from tests.app.conftest import assert_error, make_settings, running
from tests.conftest import GOLDEN_GEOMETRY, GOLDEN_GEOMETRY_FLAGS, file_digests
from tests.live_server import LiveServer

GROUP = "GID_golden"
GEOMETRY = dataclasses.asdict(GOLDEN_GEOMETRY)
HTML = {"Accept": "text/html"}


def message_records(manifest: dict) -> list[dict]:
    return [r for r in manifest["commitlogRecords"] if r["kind"] == "MESSAGE"]


def copies_keyed(manifest: dict, key: str) -> dict[str, dict]:
    """The records whose KEYS are `key`, by topic."""
    return {r["topic"]: r for r in message_records(manifest) if r["keys"] == key}


def hop_kinds(body: dict) -> list[tuple]:
    return [(h["kind"], h["group"], h["attempt"]) for h in body["hops"]]


@pytest.fixture
def read_only_settings(tmp_path: Path, golden_store_dir: Path) -> Settings:
    return make_settings(tmp_path / "data", store_dir=golden_store_dir, read_only=True, **GEOMETRY)


@pytest.mark.anyio
async def test_every_golden_record_is_found_and_nothing_changes(read_only_settings, golden_store_dir, golden_manifest,
                                                                clock):
    before = file_digests(golden_store_dir)
    async with running(read_only_settings, clock) as api:
        client = api.client
        for record in message_records(golden_manifest):
            offset_id, unique_key = record["offsetMsgId"], record["uniqKey"]
            r = await client.get(f"/api/messages/by-id/{offset_id}")
            assert r.status_code == 200, (offset_id, r.text)
            message = r.json()["message"]
            assert (message["topic"], message["queue_offset"], message["unique_key"]) == (
                record["topic"], record["queueOffset"], unique_key)
            page = await client.get(f"/messages/{offset_id}", headers=HTML)
            assert page.status_code == 200, (offset_id, page.text[-500:])
            assert record["topic"] in page.text and offset_id in page.text and unique_key in page.text
            assert ">read-only</span>" in page.text
            r = await client.get(f"/api/messages/by-unique-key/{unique_key}")
            assert r.status_code == 200, (unique_key, r.text)
            assert offset_id in [m["offset_msg_id"] for m in r.json()["messages"]]
            found = await client.get("/search", params={"q": unique_key}, headers=HTML)
            if found.status_code == 303:  # the only copy: the search opens it
                assert found.headers["location"] == f"/messages/{offset_id}", unique_key
            else:
                assert found.status_code == 200 and f'href="/messages/{offset_id}"' in found.text, unique_key

        r = await client.post("/api/topics/TopicTest/messages", json={"body": "refused"})
        assert_error(r, 409, "read-only")
        dead = copies_keyed(golden_manifest, "order-1003")[topics.dlq_topic(GROUP)]
        assert_error(await client.post(f"/api/messages/{dead['offsetMsgId']}/resend"), 409, "read-only")
        assert_error(await client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 1}), 409, "read-only")
        r = await client.post(f"/api/groups/{GROUP}/receive", json={"topic": "TopicTest"})
        assert_error(r, 409, "read-only")
    assert file_digests(golden_store_dir) == before, "serving the golden store read-only changed it"
    assert (read_only_settings.data_dir / "mqlens.db").is_file()  # the operator database lives elsewhere


@pytest.mark.anyio
async def test_golden_retries_and_dead_letters_show_their_hops_and_verdicts(read_only_settings, golden_store_dir,
                                                                           golden_manifest, clock):
    delays = parse_delay_levels(golden_manifest["config"]["messageDelayLevel"])
    before = file_digests(golden_store_dir)
    async with running(read_only_settings, clock) as api:

        async def timeline(message_id: str) -> dict:
            r = await api.client.get(f"/messages/{message_id}/timeline.json")
            assert r.status_code == 200, r.text
            page = await api.client.get(f"/messages/{message_id}/timeline", headers=HTML)
            assert page.status_code == 200 and "<svg" in page.text
            body = r.json()
            [verdict] = body["verdicts"]
            assert verdict["group"] == GROUP and f'class="verdict {verdict["state"]}"' in page.text
            assert body["traced"] is False and all(h["derived"] for h in body["hops"])
            return body

        # order-9999: redelivered with 16 reconsumes behind it, failed again, dead-lettered.
        copies = copies_keyed(golden_manifest, "order-9999")
        dlq, retry = copies[topics.dlq_topic(GROUP)], copies[topics.retry_topic(GROUP)]
        body = await timeline(dlq["offsetMsgId"])
        assert hop_kinds(body) == [("redelivered", GROUP, 17), ("failed", GROUP, 17), ("dead_lettered", GROUP, 17)]
        assert [h["offset_msg_id"] for h in body["hops"]] == [retry["offsetMsgId"]] + [dlq["offsetMsgId"]] * 2
        assert "after 16 reconsumes, the group's maximum of 16" in body["hops"][-1]["detail"]
        assert body["verdicts"][0]["state"] == "dead_lettered"
        assert (await timeline(dlq["uniqKey"]))["hops"] == body["hops"]

        # order-1003: sent back with delay level -1, straight to the DLQ.
        copies = copies_keyed(golden_manifest, "order-1003")
        body = await timeline(copies["TopicTest"]["offsetMsgId"])
        assert hop_kinds(body) == [("produced", None, None), ("failed", GROUP, 1), ("dead_lettered", GROUP, 1)]
        assert body["hops"][0]["time_ms"] == copies["TopicTest"]["storeTimestamp"]
        assert "the consumer asked for no more retries" in body["hops"][-1]["detail"]
        assert body["verdicts"][0]["state"] == "dead_lettered"

        # order-1000 and order-1001: retried once at level 3, redelivered; no offsets: unknown.
        for key in ("order-1000", "order-1001 order-2001"):
            copies = copies_keyed(golden_manifest, key)
            scheduled = copies[topics.SCHEDULE_TOPIC]
            body = await timeline(copies["TopicTest"]["uniqKey"])
            assert hop_kinds(body) == [("produced", None, None), ("failed", GROUP, 1), ("retry_scheduled", GROUP, 2),
                                       ("redelivered", GROUP, 2)]
            waiting = body["hops"][2]
            assert (waiting["delay_level"], waiting["due_ms"]) == (3, scheduled["storeTimestamp"] + delays[2])
            assert body["hops"][3]["offset_msg_id"] == copies[topics.retry_topic(GROUP)]["offsetMsgId"]
            verdict = body["verdicts"][0]
            assert verdict["state"] == "unknown" and "no consumer offset" in verdict["detail"]

        # order-1002: sent back with delay level 5 and not redelivered yet: retry pending.
        copies = copies_keyed(golden_manifest, "order-1002")
        scheduled = copies[topics.SCHEDULE_TOPIC]
        body = await timeline(scheduled["offsetMsgId"])
        assert hop_kinds(body) == [("produced", None, None), ("failed", GROUP, 1), ("retry_scheduled", GROUP, 2)]
        verdict = body["verdicts"][0]
        assert (verdict["state"], verdict["next_attempt_ms"]) == ("retry_pending",
                                                                  scheduled["storeTimestamp"] + delays[4])
    assert file_digests(golden_store_dir) == before


def test_serve_a_golden_copy_read_only_over_http(tmp_path: Path, golden_store_dir: Path, golden_manifest):
    before = file_digests(golden_store_dir)
    dead = copies_keyed(golden_manifest, "order-9999")[topics.dlq_topic(GROUP)]
    args = ("--store", str(golden_store_dir), "--read-only", *GOLDEN_GEOMETRY_FLAGS)
    with LiveServer(tmp_path / "data", tmp_path / "server.log", args=args) as server:
        server.start()
        page = httpx.get(f"{server.base_url}/messages/{dead['offsetMsgId']}", headers=HTML, timeout=10)
        assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")  # not signed in
        client = server.client()
        page = client.get(f"/messages/{dead['offsetMsgId']}", headers=HTML)
        assert page.status_code == 200 and dead["offsetMsgId"] in page.text and "read-only" in page.text
        page = client.get(f"/messages/{dead['uniqKey']}/timeline", headers=HTML)
        assert page.status_code == 200 and 'class="verdict dead_lettered"' in page.text
        body = client.get(f"/messages/{dead['uniqKey']}/timeline.json").json()
        assert [h["kind"] for h in body["hops"]] == ["redelivered", "failed", "dead_lettered"]
        r = client.post("/api/topics/TopicTest/messages", json={"body": "x"})
        assert r.status_code == 409 and "read-only" in r.json()["error"]
        client.close()
        assert server.stop() == 0
    assert file_digests(golden_store_dir) == before


def test_serve_refuses_read_only_without_a_store(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("MQLENS_STORE_DIR", raising=False)
    assert main(["serve", "--data", str(tmp_path), "--read-only"]) == 2
    assert "--store" in capsys.readouterr().err
    assert main(["serve", "--data", str(tmp_path), "--store", str(tmp_path / "missing"), "--read-only"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["serve", "--data", str(tmp_path), "--store", str(tmp_path), "--read-only"]) == 2
    assert "no commitlog directory" in capsys.readouterr().err
    with pytest.raises(ValidationError, match="cannot run read-only"):
        Settings(data_dir=tmp_path, read_only=True, demo=True)
