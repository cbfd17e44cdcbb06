"""Every answer a real RocketMQ 4.9.8 broker's admin tools recorded for its store (the
manifest of ../shared/golden/rocketmq-4.9.8-broker) is reproduced by mqlens, on a read-only copy
of that store: by the command line (`python -m app.cli query-msg-by-*`: the answers printed for
a terminal from subprocesses, the --json ones through its entry point in the test's process) and
by the REST API of an app serving the copy read-only.

* `queries.keyQueries` and `deadLetters[].queryMsgByKey` (mqadmin queryMsgByKey): the same rows
  (unique key, queue id, queue offset). mqadmin lists them in commit log order (the broker sorts
  its index hits by offset), and so does the command line; the REST API answers newest first, as
  documented: the exact reverse.
  mqadmin's CODE 208 ("query message by key finished, but no message.") is an empty answer.
* `queries.uniqueKeyQueries` and `deadLetters[].queryMsgByUniqueKey_a` (queryMsgByUniqueKey):
  the 4.9.8 client keeps only the earliest stored copy of a unique key in the topic (with `-a`
  too), mqlens answers every copy, oldest first on the command line as mqadmin would list them and
  newest first in the REST API: its oldest is mqadmin's message, field by field.
* `queries.idQueries` (queryMsgById) and `storedRecordsByOffsetMsgId` (viewMessage, the stored
  record of every send and copy): the one message, field by field, body sha256 included.
* `consumerProgress.<group>`: broker offset, consumer offset and diff per queue and the diff
  total, from the group page, from /metrics and from the queue view of the REST API; cg-bcast
  (broadcasting: CODE 206, no broker offsets) has no committed offset anywhere.
* `topics.perTopic.<topic>` (topicStatus): queue count, min and max offset of every queue.
* `queries.heldBack`: the answers held back from this folder show up as skipped cases.

Not compared: `messageTracks` (whether consumer groups were online when mqadmin ran) and
`traces[]` (queryMsgTraceById), which are not answers about the store's data.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import html
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.app.conftest import make_settings, running
from tests.conftest import BROKER_GEOMETRY, BROKER_GOLDEN_DIR, file_digests

REPO = Path(__file__).resolve().parents[2]
MANIFEST_FILE = BROKER_GOLDEN_DIR / "manifest.json"
MANIFEST: dict = json.loads(MANIFEST_FILE.read_text(encoding="utf-8")) if MANIFEST_FILE.is_file() else {}

pytestmark = [pytest.mark.skipif(not MANIFEST, reason=f"golden broker store not found ({BROKER_GOLDEN_DIR})"),
              pytest.mark.slow]

GEOMETRY_FLAGS = tuple(arg for name, value in dataclasses.asdict(BROKER_GEOMETRY).items()
                       for arg in (f"--{name.replace('_', '-')}", str(value)))
# brokerIP1 127.0.0.1, port 10911: the first 16 hex characters of every offset message id.
STORE_HOST_HEX = "7F00000100002A9F"
NO_MESSAGE = 208  # mqadmin: "query message by key finished, but no message."
NO_CONSUME_STATS = 206  # mqadmin consumerProgress of a group the broker holds no offsets for
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HTML = {"Accept": "text/html"}
CLI_WORKERS = max(2, min(8, os.cpu_count() or 2))


# --- The manifest's answers ---------------------------------------------------------------

QUERIES = MANIFEST.get("queries", {})
KEY_QUERIES = QUERIES.get("keyQueries", [])
UNIQUE_KEY_QUERIES = QUERIES.get("uniqueKeyQueries", [])
ID_QUERIES = QUERIES.get("idQueries", [])
HELD_BACK = QUERIES.get("heldBack", {})
DEAD_LETTERS = MANIFEST.get("deadLetters", [])
DLQ_KEY_QUERIES = [d["queryMsgByKey"] for d in DEAD_LETTERS]
DLQ_UNIQUE_KEY_QUERIES = [q for d in DEAD_LETTERS for q in d["queryMsgByUniqueKey_a"]]
PROGRESS = {group: answer for group, answer in MANIFEST.get("consumerProgress", {}).items() if group != "(all groups)"}
ALL_GROUPS_PROGRESS = MANIFEST.get("consumerProgress", {}).get("(all groups)")
PER_TOPIC = MANIFEST.get("topics", {}).get("perTopic", {})
STORED_RECORDS = MANIFEST.get("storedRecordsByOffsetMsgId", {})
SENT_BODY_SHA = {s["propertiesAfterSend"]["UNIQ_KEY"]: s["bodySha256"] for s in MANIFEST.get("sends", [])
                 if s.get("api") != "sendBatch" and "UNIQ_KEY" in s.get("propertiesAfterSend", {})}


def offset_msg_id(commit_log_offset: int) -> str:
    return f"{STORE_HOST_HEX}{commit_log_offset:016X}"


def epoch_ms(printed: str) -> int:
    """A time mqadmin printed (it ran with TZ=UTC): '2026-11-23 16:16:08,278'."""
    when = datetime.strptime(printed, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
    return (when - EPOCH) // timedelta(milliseconds=1)


def _none_if_null(value: str | None) -> str | None:
    return None if value in (None, "null", "") else value


def expected_message(printed: dict) -> dict:
    """A message mqadmin printed (queryMsgById / queryMsgByUniqueKey), as comparable fields."""
    fields = {
        "topic": printed["Topic"],
        "tags": _none_if_null(printed["Tags"]),
        "keys": _none_if_null(printed["Keys"]),
        "queue_id": printed["Queue ID"],
        "queue_offset": printed["Queue Offset"],
        "phys_offset": printed["CommitLog Offset"],
        "offset_msg_id": printed.get("OffsetID", offset_msg_id(printed["CommitLog Offset"])),
        "unique_key": printed["Properties"].get("UNIQ_KEY"),
        "reconsume_times": printed["Reconsume Times"],
        "born_timestamp": epoch_ms(printed["Born Timestamp"]),
        "store_timestamp": epoch_ms(printed["Store Timestamp"]),
        "born_host": printed["Born Host"],
        "store_host": printed["Store Host"],
        "sys_flag": printed["System Flag"],
        "properties": printed["Properties"],
    }
    assert fields["offset_msg_id"] == offset_msg_id(fields["phys_offset"])  # the manifest agrees with itself
    return fields


def mqlens_message(d: dict) -> dict:
    """The same fields of a message mqlens answered (app.presenters.message_dict)."""
    return {
        "topic": d["topic"], "tags": d["tags"], "keys": " ".join(d["keys"]) or None, "queue_id": d["queue_id"],
        "queue_offset": d["queue_offset"], "phys_offset": d["phys_offset"], "offset_msg_id": d["offset_msg_id"],
        "unique_key": d["unique_key"], "reconsume_times": d["reconsume_times"],
        "born_timestamp": d["born_timestamp"], "store_timestamp": d["store_timestamp"], "born_host": d["born_host"],
        "store_host": d["store_host"], "sys_flag": d["sys_flag"], "properties": d["properties"],
    }


def body_sha256(d: dict) -> str:
    assert d["body_masked"] is False, "the body is masked"
    return hashlib.sha256(base64.b64decode(d["body_base64"])).hexdigest()


def known_body_sha256(offset_id: str, unique_key: str | None) -> tuple[str, str] | None:
    """The sha256 of the body the manifest has for a record: viewMessage's of the record, else
    the producer's of the message it is a copy of (retry, dead-letter and half copies keep the body)."""
    if offset_id in STORED_RECORDS:
        return STORED_RECORDS[offset_id]["bodySha256"], "viewMessage"
    if unique_key in SENT_BODY_SHA:
        return SENT_BODY_SHA[unique_key], "sends[].bodySha256 of the same unique key"
    return None


def assert_same_message(got: dict, printed: dict, where: str) -> None:
    want = expected_message(printed)
    assert mqlens_message(got) == want, f"{where}: mqlens (left) differs from mqadmin (right)"
    known = known_body_sha256(want["offset_msg_id"], want["unique_key"])
    if known is not None:
        sha, source = known
        assert body_sha256(got) == sha, f"{where}: body sha256 differs from the manifest's ({source})"


def rows_of(messages: list[dict]) -> list[tuple[str, int, int]]:
    return [(m["unique_key"], m["queue_id"], m["queue_offset"]) for m in messages]


def mqadmin_rows(query: dict) -> list[tuple[str, int, int]]:
    return [(r["msgId"], r["queueId"], r["queueOffset"]) for r in query["rows"]]


def _query_id(query: dict) -> str:
    return f"{query['topic']}:{query.get('key') or query.get('id')}"


# --- Asking mqlens: the command line ----------------------------------------------------------

def _copy_store(target: Path) -> Path:
    shutil.copytree(BROKER_GOLDEN_DIR / "store", target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


@pytest.fixture(scope="module")
def store_copy(tmp_path_factory) -> Path:
    """One copy of the broker's store for the whole module (everything here only reads it)."""
    return _copy_store(tmp_path_factory.mktemp("broker") / "store")


def cli_commands() -> dict[tuple, list[str]]:
    commands: dict[tuple, list[str]] = {}
    for q in KEY_QUERIES + DLQ_KEY_QUERIES:
        commands[("key", q["topic"], q["key"])] = ["query-msg-by-key", "-t", q["topic"], "-k", q["key"], "--json"]
        if q["error"]:  # and how a person reading the terminal is told
            commands[("key-text", q["topic"], q["key"])] = ["query-msg-by-key", "-t", q["topic"], "-k", q["key"]]
    for q in UNIQUE_KEY_QUERIES + DLQ_UNIQUE_KEY_QUERIES:
        commands[("unique", q["topic"], q["id"])] = ["query-msg-by-unique-key", "-t", q["topic"], "-i", q["id"],
                                                     "--json"]
    for offset_id in [q["id"] for q in ID_QUERIES] + list(STORED_RECORDS):
        commands[("id", offset_id)] = ["query-msg-by-id", "-i", offset_id, "--json"]
    return commands


@pytest.fixture(scope="module")
def cli(store_copy) -> dict[tuple, subprocess.CompletedProcess]:
    """Every lookup asked of the command line once: what a person reads in a terminal from
    `python -m app.cli` processes, a few at a time; the --json answers through the command's own
    entry in this process (a process each would start the interpreter 130 times)."""
    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", *args, "--store", str(store_copy), *GEOMETRY_FLAGS],
                              capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=REPO)

    def run_here(args: list[str]) -> subprocess.CompletedProcess:
        from app.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*args, "--store", str(store_copy), *GEOMETRY_FLAGS])
        return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

    commands = cli_commands()
    in_terminal = {ask: args for ask, args in commands.items() if "--json" not in args}
    with ThreadPoolExecutor(CLI_WORKERS) as pool:
        done = dict(zip(in_terminal, pool.map(run, in_terminal.values()), strict=True))
    done.update((ask, run_here(args)) for ask, args in commands.items() if ask not in done)
    return done


def cli_messages(cli: dict, *ask: str) -> list[dict]:
    done = cli[ask]
    assert done.returncode == 0, f"mqlens {ask} exited {done.returncode}: {done.stderr}"
    answer = json.loads(done.stdout)
    assert answer["truncated"] is False
    return answer["messages"]


# --- Asking mqlens: the REST API of an app serving the copy read-only ---------------------------

@dataclasses.dataclass
class Answer:
    status: int
    text: str

    def json(self) -> dict:
        return json.loads(self.text)


def api_requests() -> dict[tuple, tuple[str, dict]]:
    requests: dict[tuple, tuple[str, dict]] = {}
    for q in KEY_QUERIES + DLQ_KEY_QUERIES:
        requests[("key", q["topic"], q["key"])] = ("/api/messages/by-key", {"key": q["key"], "topic": q["topic"]})
    for q in UNIQUE_KEY_QUERIES + DLQ_UNIQUE_KEY_QUERIES:
        requests[("unique", q["topic"], q["id"])] = (f"/api/messages/by-unique-key/{q['id']}", {"topic": q["topic"]})
    for offset_id in [q["id"] for q in ID_QUERIES] + list(STORED_RECORDS):
        requests[("id", offset_id)] = (f"/api/messages/by-id/{offset_id}", {})
    requests[("topics",)] = ("/api/topics", {})
    requests[("groups",)] = ("/api/groups", {})
    requests[("metrics",)] = ("/metrics", {})
    requests[("dlq", "cg-fail")] = ("/api/dlq/cg-fail/messages", {"limit": 500})
    for group, answer in PROGRESS.items():
        requests[("group", group)] = (f"/api/groups/{quote(group, safe='')}", {})
        requests[("group-page", group)] = (f"/groups/{quote(group, safe='')}", {})
        for row in answer.get("rows") or []:
            requests[("queue", group, row["topic"], row["queueId"])] = (
                f"/api/topics/{quote(row['topic'], safe='')}/queues/{row['queueId']}/messages",
                {"group": group, "max": 1})
    return requests


@pytest.fixture(scope="module")
def api(store_copy, tmp_path_factory) -> dict[tuple, Answer]:
    """Every request asked once of the app serving the copy read-only (`mqlens serve --store
    DIR --read-only` with the broker's geometry)."""
    settings = make_settings(tmp_path_factory.mktemp("api") / "data", store_dir=store_copy, read_only=True,
                             **dataclasses.asdict(BROKER_GEOMETRY))

    async def ask_all() -> dict[tuple, Answer]:
        answers = {}
        async with running(settings) as app:
            for name, (url, params) in api_requests().items():
                r = await app.client.get(url, params=params, headers=HTML if name[0] == "group-page" else None)
                answers[name] = Answer(r.status_code, r.text)
        return answers

    return asyncio.run(ask_all())


def api_json(api: dict, *ask) -> dict:
    answer = api[ask]
    assert answer.status == 200, f"{ask}: {answer.status} {answer.text}"
    body = answer.json()
    assert body["ok"] is True
    return body


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m:
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                      for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1))}
            samples.append((labels, float(m.group(2))))
    return samples


def page_offset_rows(page: str) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """The group page's "Offsets and lag" table: (topic, queue) -> (committed, min, max, lag)."""
    rows = {}
    for topic, queue, cells in re.findall(r'<tr data-topic="([^"]*)" data-queue="(\d+)">(.*?)</tr>', page, re.S):
        numbers = [int(n) for n in re.findall(r'<td class="num">(\d+)', cells)]
        assert len(numbers) == 4, cells
        rows[(html.unescape(topic), int(queue))] = tuple(numbers)
    return rows


# --- Key queries (queryMsgByKey) --------------------------------------------------------------

def check_key_answer(query: dict, messages: list[dict], where: str, *, as_mqadmin: bool) -> None:
    want = mqadmin_rows(query)
    assert all(m["topic"] == query["topic"] and query["key"] in m["keys"] for m in messages), where
    if query["error"]:
        assert query["error"]["code"] == NO_MESSAGE and want == []
        assert messages == [], f"{where}: mqadmin found no message (CODE {NO_MESSAGE}), mqlens found some"
        return
    got = rows_of(messages)
    assert Counter(got) == Counter(want), f"{where}: rows (unique key, queue, offset) differ from mqadmin's"
    if as_mqadmin:
        assert got == want, f"{where}: not oldest first, as mqadmin lists them"
    else:
        assert got == want[::-1], f"{where}: not newest first (mqadmin lists oldest first)"


@pytest.mark.parametrize("query", KEY_QUERIES + DLQ_KEY_QUERIES, ids=_query_id)
def test_key_query_cli(cli, query):
    check_key_answer(query, cli_messages(cli, "key", query["topic"], query["key"]), "CLI query-msg-by-key",
                     as_mqadmin=True)
    if query["error"]:
        done = cli[("key-text", query["topic"], query["key"])]
        assert (done.returncode, done.stdout, done.stderr) == (0, "no message found\n", "")


@pytest.mark.parametrize("query", KEY_QUERIES + DLQ_KEY_QUERIES, ids=_query_id)
def test_key_query_api(api, query):
    body = api_json(api, "key", query["topic"], query["key"])
    assert body["searched_topics"] == [query["topic"]] and body["truncated"] is False
    # An empty answer is a 200 with no message, not a 404.
    check_key_answer(query, body["messages"], "GET /api/messages/by-key", as_mqadmin=False)


# --- Unique-key queries (queryMsgByUniqueKey) ----------------------------------------------------

def check_unique_key_answer(query: dict, messages: list[dict], where: str, *, as_mqadmin: bool) -> None:
    assert query["error"] is None
    [printed] = query["messages"]  # the 4.9.8 client keeps the earliest stored copy only, -a or not
    assert messages, f"{where}: no message"
    assert all(m["unique_key"] == query["id"] and m["topic"] == query["topic"] for m in messages), where
    assert len({m["phys_offset"] for m in messages}) == len(messages), f"{where}: a copy answered twice"
    order = [(m["store_timestamp"], m["phys_offset"]) for m in messages]
    if as_mqadmin:
        assert order == sorted(order), f"{where}: not oldest first, as mqadmin lists them"
    else:
        assert order == sorted(order, reverse=True), f"{where}: not newest first"
    assert_same_message(min(messages, key=lambda m: m["phys_offset"]), printed, f"{where} (its oldest copy)")


@pytest.mark.parametrize("query", UNIQUE_KEY_QUERIES + DLQ_UNIQUE_KEY_QUERIES, ids=_query_id)
def test_unique_key_query_cli(cli, query):
    check_unique_key_answer(query, cli_messages(cli, "unique", query["topic"], query["id"]),
                            "CLI query-msg-by-unique-key", as_mqadmin=True)


@pytest.mark.parametrize("query", UNIQUE_KEY_QUERIES + DLQ_UNIQUE_KEY_QUERIES, ids=_query_id)
def test_unique_key_query_api(api, query):
    body = api_json(api, "unique", query["topic"], query["id"])
    assert body["searched_topics"] == [query["topic"]] and body["truncated"] is False
    check_unique_key_answer(query, body["messages"], "GET /api/messages/by-unique-key", as_mqadmin=False)


def test_unique_key_queries_answer_every_copy_in_the_topic(cli, api):
    """fail-9 was retried twice from %RETRY%cg-fail (queryMsgByKey shows both copies); mqadmin's
    queryMsgByUniqueKey -a printed the first only, mqlens answers both."""
    [query] = [q for q in UNIQUE_KEY_QUERIES if q["topic"] == "%RETRY%cg-fail" and q["showAll"]]
    [by_key] = [q for q in KEY_QUERIES if q["topic"] == "%RETRY%cg-fail" and q["key"] == "fail-9"]
    copies = [row for row in mqadmin_rows(by_key) if row[0] == query["id"]]
    assert len(copies) == 2
    api_messages = api_json(api, "unique", query["topic"], query["id"])["messages"]
    cli_found = cli_messages(cli, "unique", query["topic"], query["id"])
    assert rows_of(cli_found) == copies and rows_of(api_messages) == copies[::-1]


# --- Offset message id queries (queryMsgById) and stored records (viewMessage) -----------------

@pytest.mark.parametrize("query", ID_QUERIES, ids=lambda q: q["id"])
def test_id_query_cli(cli, query):
    assert query["error"] is None
    [printed] = query["messages"]
    [got] = cli_messages(cli, "id", query["id"])
    assert_same_message(got, printed, "CLI query-msg-by-id")


@pytest.mark.parametrize("query", ID_QUERIES, ids=lambda q: q["id"])
def test_id_query_api(api, query):
    assert query["error"] is None
    [printed] = query["messages"]
    assert_same_message(api_json(api, "id", query["id"])["message"], printed, "GET /api/messages/by-id")


def check_view_message(record: dict, got: dict, where: str) -> None:
    def host(value: str) -> str:
        return value.removeprefix("/")

    want = {"offset_msg_id": record["offsetMsgId"], "unique_key": record["msgId"], "topic": record["topic"],
            "tags": record["tags"], "keys": record["keys"], "queue_id": record["queueId"],
            "queue_offset": record["queueOffset"], "phys_offset": record["commitLogOffset"],
            "size": record["storeSize"], "sys_flag": record["sysFlag"], "reconsume_times": record["reconsumeTimes"],
            "born_timestamp": record["bornTimestamp"], "store_timestamp": record["storeTimestamp"],
            "born_host": host(record["bornHost"]), "store_host": host(record["storeHost"]),
            "body_crc": record["bodyCRC"], "body_length": record["bodyLength"], "body_sha256": record["bodySha256"],
            "properties": record["properties"]}
    body = base64.b64decode(got["body_base64"])
    have = {**{k: got[k] for k in want if k in got}, "keys": " ".join(got["keys"]) or None,
            "body_length": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
    assert have == want, f"{where}: mqlens (left) differs from viewMessage (right)"


@pytest.mark.parametrize("offset_id", list(STORED_RECORDS))
def test_stored_record_cli(cli, offset_id):
    [got] = cli_messages(cli, "id", offset_id)
    check_view_message(STORED_RECORDS[offset_id], got, "CLI query-msg-by-id")


@pytest.mark.parametrize("offset_id", list(STORED_RECORDS))
def test_stored_record_api(api, offset_id):
    check_view_message(STORED_RECORDS[offset_id], api_json(api, "id", offset_id)["message"],
                       "GET /api/messages/by-id")


def test_every_send_result_and_its_stored_record_is_covered():
    recorded = [r for s in MANIFEST["sends"] for r in s.get("storedRecords_viewMessage") or []]
    assert recorded and all(STORED_RECORDS[r["offsetMsgId"]] == r for r in recorded)
    for send in MANIFEST["sends"]:
        records = send.get("storedRecords_viewMessage") or []
        if send["result"]["offsetMsgId"]:  # transactional sends have none (their SendResult says null)
            assert [r["offsetMsgId"] for r in records] == send["result"]["offsetMsgId"].split(",")


# --- Dead letters ---------------------------------------------------------------------------

@pytest.mark.parametrize("dead", DEAD_LETTERS, ids=lambda d: d["key"])
def test_dead_letter_inbox_api(api, dead):
    """The DLQ inbox lists each dead letter mqadmin found in %DLQ%cg-fail, as the same record."""
    [printed] = [m for q in dead["queryMsgByUniqueKey_a"] for m in q["messages"]]
    want = expected_message(printed)
    inbox = api_json(api, "dlq", "cg-fail")
    assert inbox["total"] == len(DEAD_LETTERS) and inbox["next_cursor"] is None
    [row] = [r for r in inbox["messages"] if dead["key"] in r["keys"]]
    assert {"offset_msg_id": row["offset_msg_id"], "unique_key": row["unique_key"], "topic": row["topic"],
            "original_topic": row["original_topic"], "keys": " ".join(row["keys"]), "tags": row["tags"],
            "reconsume_times": row["reconsume_times"], "store_timestamp": row["store_timestamp"]} == {
        "offset_msg_id": want["offset_msg_id"], "unique_key": want["unique_key"], "topic": want["topic"],
        "original_topic": want["properties"]["RETRY_TOPIC"], "keys": want["keys"], "tags": want["tags"],
        "reconsume_times": want["reconsume_times"], "store_timestamp": want["store_timestamp"]}


# --- Consumer progress (consumerProgress) ------------------------------------------------------

GROUPS_WITH_ROWS = [g for g, a in PROGRESS.items() if a["error"] is None]
GROUPS_WITHOUT_OFFSETS = [g for g, a in PROGRESS.items() if a["error"] is not None]


def progress_rows(group: str) -> dict[tuple[str, int], dict]:
    return {(r["topic"], r["queueId"]): r for r in PROGRESS[group]["rows"]}


def lag_metrics(api: dict, group: str) -> dict[tuple[str, int], float]:
    assert api[("metrics",)].status == 200
    return {(labels["topic"], int(labels["queue"])): value
            for labels, value in metric_samples(api[("metrics",)].text, "mqlens_consumer_lag")
            if labels["group"] == group}


@pytest.mark.parametrize("group", GROUPS_WITH_ROWS)
def test_consumer_progress_group_page(api, group):
    """The console's group view: committed offset, max offset and lag per queue, and the total."""
    page = api[("group-page", group)]
    assert page.status == 200, page.text[-500:]
    want = {queue: (r["consumerOffset"], r["brokerOffset"], r["diff"]) for queue, r in progress_rows(group).items()}
    have = {queue: (committed, max_offset, lag) for queue, (committed, _, max_offset, lag)
            in page_offset_rows(page.text).items()}
    assert have == want
    total = re.search(r'data-testid="lag">(\d+)<', page.text)
    assert total and int(total.group(1)) == PROGRESS[group]["diffTotal"]


@pytest.mark.parametrize("group", GROUPS_WITH_ROWS)
def test_consumer_progress_metrics(api, group):
    """GET /metrics: mqlens_consumer_lag per queue is mqadmin's diff, on the same queues."""
    lags = lag_metrics(api, group)
    assert lags == {queue: float(r["diff"]) for queue, r in progress_rows(group).items()}
    assert sum(lags.values()) == PROGRESS[group]["diffTotal"]


@pytest.mark.parametrize("group", GROUPS_WITH_ROWS)
def test_consumer_progress_queue_view_api(api, group):
    """GET /api/topics/{t}/queues/{q}/messages?group=G starts at the group's committed offset
    (the consumer offset) and says the queue's max offset (the broker offset)."""
    have, want = {}, {}
    for queue, row in progress_rows(group).items():
        view = api_json(api, "queue", group, *queue)
        have[queue] = (view["max_offset"], view["offset"], view["max_offset"] - view["offset"])
        want[queue] = (row["brokerOffset"], row["consumerOffset"], row["diff"])
    assert have == want


@pytest.mark.parametrize("group", GROUPS_WITHOUT_OFFSETS)
def test_consumer_progress_of_a_group_without_broker_offsets(api, group):
    """mqadmin: CODE 206, the broker holds no offset of cg-bcast (a broadcasting group keeps
    them client-side). mqlens: no committed offset, so no lag per queue either."""
    assert PROGRESS[group]["error"]["code"] == NO_CONSUME_STATS
    assert lag_metrics(api, group) == {}
    page = api[("group-page", group)]
    assert page.status == 200
    assert page_offset_rows(page.text) == {}
    assert "This group has committed no offset on the broker" in page.text
    assert 'data-testid="lag">unknown<' in page.text  # not 0: the broker cannot know how far its clients are
    assert 'data-testid="model-not-recorded"' in page.text
    settings = api_json(api, "group", group)["group"]
    assert settings["name"] == group and settings["message_model_recorded"] is False


def test_consumer_progress_of_all_groups(api):
    """`mqadmin consumerProgress`: every group with a retry topic and its diff total."""
    listed = {}
    for line in ALL_GROUPS_PROGRESS["stdout"].splitlines()[1:]:
        if line.strip():
            columns = line.split()
            listed[columns[0]] = int(columns[-1])
    assert set(listed) == set(PROGRESS)
    groups = {g["name"] for g in api_json(api, "groups")["groups"]}
    assert set(listed) <= groups
    for group, diff_total in listed.items():
        assert sum(lag_metrics(api, group).values()) == diff_total, group


# --- Topic status (topicStatus) ---------------------------------------------------------------

@pytest.mark.parametrize("topic", list(PER_TOPIC))
def test_topic_status_api(api, topic):
    answer = PER_TOPIC[topic]
    assert answer["error"] is None
    [listed] = [t for t in api_json(api, "topics")["topics"] if t["name"] == topic]
    assert listed["queues"] == answer["queueCount"]
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in listed["queue_offsets"]] == [
        (r["queueId"], r["minOffset"], r["maxOffset"]) for r in answer["topicStatus_rows"]]


def test_topic_list_api(api):
    """Every topic of mqadmin topicList, and one more: RMQ_SYS_TRANS_OP_HALF_TOPIC, whose queue
    is on disk though topics.json does not name it (the broker writes op records straight in)."""
    listed = {t["name"] for t in api_json(api, "topics")["topics"]}
    mqadmin = set(MANIFEST["topics"]["topicList"].split())
    assert mqadmin == set(PER_TOPIC)
    assert listed - mqadmin == {"RMQ_SYS_TRANS_OP_HALF_TOPIC"} and mqadmin <= listed
    assert "RMQ_SYS_TRANS_OP_HALF_TOPIC" in MANIFEST["topics"]["consumequeueDirs"]


# --- Held back, and the store unchanged ---------------------------------------------------------

def test_held_back_answers_are_accounted_for():
    total = int(re.search(r"\bN=(\d+)", HELD_BACK["selection"]).group(1))
    assert len(KEY_QUERIES) + len(UNIQUE_KEY_QUERIES) + len(ID_QUERIES) + HELD_BACK["count"] == total


@pytest.mark.parametrize("n", range(1, HELD_BACK.get("count", 0) + 1))
def test_held_back_answer(n):
    pytest.skip(f"held-back query answer {n} of {HELD_BACK['count']}: in {HELD_BACK['file']}")


def test_the_copy_was_rocketmqs_store_and_nothing_changed_it(cli, api, store_copy):
    """Every lookup above ran (both fixtures are done) on a copy that is byte for byte the store
    the broker wrote, and left it so."""
    recorded = {f["path"].removeprefix("store/"): f["sha256"] for f in MANIFEST["files"]}
    now = {path: hashlib.sha256(data).hexdigest() for path, data in file_digests(store_copy).items()}
    assert now == recorded
    assert file_digests(store_copy) == file_digests(BROKER_GOLDEN_DIR / "store")
