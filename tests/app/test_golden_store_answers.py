"""The older golden store (RocketMQ 4.9.8's store code, no client trace): every key, unique key
and offset id answer of its manifest through the command line and the REST API, read-only."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import sys

import pytest

from tests.app.conftest import make_settings, running
from tests.conftest import GOLDEN_DIR, GOLDEN_GEOMETRY, GOLDEN_GEOMETRY_FLAGS, file_digests, read_golden_manifest

MANIFEST = read_golden_manifest() if (GOLDEN_DIR / "manifest.json").is_file() else {"keyQueries": [],
                                                                                      "offsetMsgIdLookups": []}
KEY_QUERIES = MANIFEST["keyQueries"]
ID_LOOKUPS = MANIFEST["offsetMsgIdLookups"]
PHYS_OF = {r["physicalOffset"]: r for r in MANIFEST.get("commitlogRecords", []) if r["kind"] == "MESSAGE"}


@pytest.fixture(scope="module")
def store_copy(tmp_path_factory):
    target = tmp_path_factory.mktemp("golden") / "store"
    shutil.copytree(GOLDEN_DIR / "store", target)
    before = file_digests(target)
    yield target
    assert file_digests(target) == before, "a read-only lookup changed the store"


def _cli(store, *args) -> dict:
    done = subprocess.run([sys.executable, "-m", "app.cli", *args, "--store", str(store), *GOLDEN_GEOMETRY_FLAGS,
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def api(store_copy, tmp_path_factory) -> dict:
    settings = make_settings(tmp_path_factory.mktemp("api") / "data", store_dir=store_copy, read_only=True,
                             **dataclasses.asdict(GOLDEN_GEOMETRY))

    async def ask_all() -> dict:
        answers = {}
        async with running(settings) as app:
            for q in KEY_QUERIES:
                r = await app.client.get("/api/messages/by-key", params={"key": q["key"], "topic": q["topic"],
                                                                         **_window(q)})
                answers["key", q["topic"], q["key"], q.get("begin"), q.get("end")] = (r.status_code, r.json())
            for lookup in ID_LOOKUPS:
                r = await app.client.get(f"/api/messages/by-id/{lookup['offsetMsgId']}")
                answers["id", lookup["offsetMsgId"]] = (r.status_code, r.json())
        return answers

    return asyncio.run(ask_all())


def _window(query: dict) -> dict:
    return {name: query[name] for name in ("begin", "end") if name in query}


def _phys(messages: list[dict]) -> list[int]:
    return [m["phys_offset"] for m in messages]


@pytest.mark.parametrize("query", KEY_QUERIES, ids=lambda q: f"{q['topic']}#{q['key']}")
def test_key_queries_answer_as_rocketmq_did(query, store_copy, api):
    wanted = query["queryMsgByKey_newest_first"]
    status, body = api["key", query["topic"], query["key"], query.get("begin"), query.get("end")]
    assert status == 200 and _phys(body["messages"]) == wanted
    window = [arg for name, value in _window(query).items() for arg in (f"--{name}", str(value))]
    assert _phys(_cli(store_copy, "query-msg-by-key", "--topic", query["topic"], "--key", query["key"], *window)
                 ["messages"]) == sorted(wanted)  # the command line lists them as mqadmin: oldest first


@pytest.mark.parametrize("lookup", ID_LOOKUPS, ids=lambda q: q["offsetMsgId"])
def test_offset_id_lookups_answer_as_rocketmq_did(lookup, store_copy, api):
    status, body = api["id", lookup["offsetMsgId"]]
    if "lookedUpTopic" not in lookup:  # an id whose offset is no record's: RocketMQ found nothing either
        assert status == 404 and str(lookup["decodedOffset"]) in body["error"]
        done = subprocess.run([sys.executable, "-m", "app.cli", "query-msg-by-id", "--msg-id", lookup["offsetMsgId"],
                               "--store", str(store_copy), *GOLDEN_GEOMETRY_FLAGS], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode != 0 and "no message at commit log offset" in done.stderr
        return
    record = PHYS_OF[lookup["decodedOffset"]]
    cli = _cli(store_copy, "query-msg-by-id", "--msg-id", lookup["offsetMsgId"])
    for found in (body["message"], cli["messages"][0]):
        assert (found["phys_offset"], found["topic"], found["unique_key"]) == (
            lookup["decodedOffset"], lookup["lookedUpTopic"], lookup["lookedUpUniqKey"])
        assert (found["queue_id"], found["queue_offset"], found["store_timestamp"]) == (
            record["queueId"], record["queueOffset"], record["storeTimestamp"])
    assert status == 200
