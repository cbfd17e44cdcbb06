"""A support engineer on a store a real RocketMQ 4.9.8 broker wrote, served read-only: finds a dead
letter by its key in the search box, follows the links to its retry timeline and reads there what
the RocketMQ clients' own message trace tells (each delivery and failure of cg-fail, the dead letter,
the groups that consumed it, retries due by the broker's delay level table). The store copy keeps
every byte RocketMQ wrote. The timeline is kept as a screenshot for the user guide."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import shutil
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, save_screenshot
from tests.conftest import BROKER_GEOMETRY, BROKER_GOLDEN_DIR, file_digests
from tests.live_server import LiveServer

KEY = "fail-3"
GROUP = "cg-fail"
DLQ_TOPIC = f"%DLQ%{GROUP}"
SUCCESS = {"CONSUME_SUCCESS", "SUCCESS"}
GEOMETRY_FLAGS = tuple(arg for name, value in dataclasses.asdict(BROKER_GEOMETRY).items()
                       for arg in (f"--{name.replace('_', '-')}", str(value)))
# cg-fail's story of the message (maxReconsumeTimes=2): three deliveries, each failed; the first two
# failures send it back through SCHEDULE_TOPIC_XXXX and %RETRY%cg-fail, the third to the DLQ.
CG_FAIL_STORY = [("delivered", "1"), ("failed", "1"), ("retry_scheduled", "2"), ("redelivered", "2"),
                 ("delivered", "2"), ("failed", "2"), ("retry_scheduled", "3"), ("redelivered", "3"),
                 ("delivered", "3"), ("failed", "3"), ("dead_lettered", "3")]
HOP_ROWS = """rows => rows.map(row => ({kind: row.dataset.kind,
                                     cells: Array.from(row.cells, cell => cell.innerText.trim())}))"""


class StoreCopy(NamedTuple):
    path: Path
    before: dict[str, bytes]  # file_digests before the console opened it


@pytest.fixture(scope="module")
def broker_store(tmp_path_factory: pytest.TempPathFactory, golden_broker_manifest) -> StoreCopy:
    """A writable copy of the broker's store (writable, so that a write would not be refused by the
    file system but show up as changed bytes), checked to be the bytes RocketMQ wrote."""
    target = tmp_path_factory.mktemp("broker-store") / "store"
    shutil.copytree(BROKER_GOLDEN_DIR / "store", target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    before = file_digests(target)
    assert {f"store/{name}": hashlib.sha256(data).hexdigest() for name, data in before.items()} == {
        f["path"]: f["sha256"] for f in golden_broker_manifest["files"]}
    return StoreCopy(target, before)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, broker_store: StoreCopy) -> Iterator[LiveServer]:
    """`mqlens serve --read-only` on the copy, with the broker's geometry; the delay level table
    is left for the server to infer from the store (it is in broker.conf, not in the store)."""
    root = tmp_path_factory.mktemp("broker-console")
    args = ("--store", str(broker_store.path), "--read-only", *GEOMETRY_FLAGS)
    with LiveServer(root / "data", root / "server.log", {"admin_password": ADMIN_PASSWORD}, args=args) as live:
        live.start()
        yield live
        if live.proc is not None and live.proc.poll() is None:  # the last test stops it itself
            assert live.stop() == 0, live.log_text()[-5000:]


@pytest.fixture(scope="module")
def fail_3(golden_broker_manifest) -> dict:
    """What RocketMQ answered about the dead letter of `fail-3`: its unique key and DLQ record."""
    [dead] = [d for d in golden_broker_manifest["deadLetters"] if d["key"] == KEY]
    [row] = dead["queryMsgByKey"]["rows"]
    [record] = dead["queryMsgByUniqueKey_a"][0]["messages"]
    assert record["Topic"] == DLQ_TOPIC
    store_host = golden_broker_manifest["config"]["storeHostInOffsetMsgIds"].split("=")[0].replace(" ", "")
    return {"msg_id": row["msgId"], "record": record,
            "dlq_offset_msg_id": f"{store_host}{record['CommitLog Offset']:016X}"}


def page_time_ms(text: str) -> int:
    """The console's time format ('2026-11-23 16:16:25.916 UTC') as epoch milliseconds."""
    moment = dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=dt.UTC)
    return round(moment.timestamp() * 1000)


def delay_ms(manifest: dict, level: int) -> int:
    """Level `level` (1-based) of the broker's messageDelayLevel, in milliseconds."""
    spec = manifest["config"]["messageDelayLevel"].split()[level - 1]
    assert spec.endswith("s") and spec[:-1].isdigit(), spec
    return int(spec[:-1]) * 1000


def expected_verdicts(manifest: dict, msg_id: str) -> dict[str, str]:
    """Per group that saw the message (the consumers' own log): consumed, or dead-lettered for cg-fail."""
    outcomes: dict[str, set[str]] = {}
    for group, log in manifest["consumption"].items():
        for delivery in log:
            if delivery["msgId"] == msg_id:
                outcomes.setdefault(group, set()).add(delivery["outcome"])
    assert not outcomes[GROUP] & SUCCESS
    return {group: "consumed" if seen & SUCCESS else "dead lettered" for group, seen in outcomes.items()}


def test_a_support_engineer_follows_a_broker_dead_letter_to_its_traced_timeline(
        page, server, broker_store, fail_3, golden_broker_manifest, screenshots):
    msg_id, record = fail_3["msg_id"], fail_3["record"]
    expect(page.locator("header .badge.warn")).to_have_text("read-only")

    # The search page, the key typed into its box, Enter.
    page.locator("header nav").get_by_role("link", name="Search", exact=True).click()
    expect(page.get_by_role("heading", name="Find a message")).to_be_visible()
    box = page.get_by_label("Message id, unique key, key or")
    box.fill(KEY)
    box.press("Enter")
    rows = page.locator("#results table.results tbody tr")
    # The original in Orders, its two schedule copies (levels 3 and 4), its two retry copies, the dead
    # letter, and the copy the operator re-sent with `mqadmin sendMessage -t %RETRY%cg-fail -k "fail-3 ord-3"`.
    expect(rows).to_have_count(7)
    expect(page).to_have_url(re.compile(r"/search\?q=fail-3&"))
    expect(page.locator("#results .summary")).to_contain_text("looked up as key")
    kinds = Counter(rows.locator(".copy-kind").all_inner_texts())
    assert kinds == Counter({"original": 1, "scheduled": 2, "retry": 3, "dead letter": 1}), kinds
    dead = rows.filter(has_text=DLQ_TOPIC)
    expect(dead).to_have_count(1)
    expect(dead.locator(".copy-kind")).to_have_text("dead letter")
    expect(dead.get_by_role("link", name=fail_3["dlq_offset_msg_id"])).to_be_visible()
    expect(dead).to_contain_text(f"{DLQ_TOPIC}:{record['Queue ID']}:{record['Queue Offset']}")
    expect(dead).to_contain_text(record["Keys"])

    # The dead letter's row links straight to the message's timeline.
    dead.get_by_role("link", name="timeline", exact=True).click()
    expect(page).to_have_url(f"/messages/{msg_id}/timeline")
    expect(page.get_by_role("heading", name="Retry timeline")).to_be_visible()
    expect(page.get_by_test_id("unique-key")).to_have_text(msg_id)
    expect(page.get_by_test_id("keys")).to_have_text(record["Keys"])

    # The clients' trace was merged in: the hops are no reconstruction.
    notice = page.get_by_test_id("client-trace")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("RocketMQ clients' own message trace (RMQ_SYS_TRACE_TOPIC) are merged in")
    assert int(re.match(r"(\d+) entries", notice.inner_text()).group(1)) > 0
    expect(page.get_by_test_id("reconstructed")).to_have_count(0)

    # A verdict per group that saw it: cg-fail dead-lettered after 3 attempts, the others consumed it.
    verdict = page.locator("table.verdicts tbody tr")
    expect(page.locator(f'tr[data-group="{GROUP}"] [data-testid="verdict"]')).to_have_text("dead lettered")
    expect(page.locator(f'tr[data-group="{GROUP}"] td.num')).to_have_text("3")
    expect(page.locator('tr[data-group="cg-ok"] [data-testid="verdict"]')).to_have_text("consumed")
    shown = dict(zip(verdict.evaluate_all("rows => rows.map(r => r.dataset.group)"),
                     page.locator("table.verdicts [data-testid=verdict]").all_inner_texts(), strict=True))
    assert shown == expected_verdicts(golden_broker_manifest, msg_id)
    expect(page.locator("details.resend")).to_have_count(0)  # read-only: nothing to resend from here

    # The hops of cg-fail, told once each: three deliveries, three failures (as the trace reports them),
    # two retries through the schedule topic, and the dead letter.
    expect(page.locator("table.hops tbody tr[data-kind='dead_lettered']")).to_have_count(1)
    hops = page.locator("table.hops tbody tr[data-kind]").evaluate_all(HOP_ROWS)
    cg_fail = [h for h in hops if h["cells"][2] == GROUP]
    assert [(h["kind"], h["cells"][3]) for h in cg_fail] == CG_FAIL_STORY, cg_fail
    counts = Counter(h["kind"] for h in cg_fail)
    assert (counts["delivered"], counts["failed"], counts["dead_lettered"]) == (3, 3, 1)
    for hop in cg_fail:
        if hop["kind"] in ("delivered", "failed"):  # from the client trace, not derived from copies
            assert "derived" not in hop["cells"][4], hop
        if hop["kind"] == "failed":
            assert "FAILED" in hop["cells"][4], hop
    assert [h["kind"] for h in hops if h["cells"][2] == "cg-ok"] == ["delivered", "consumed"]
    assert hops[0]["kind"] == "sent" and "producer group pg-orders" in hops[0]["cells"][4]  # the producer's trace

    # Each retry waits at the level the broker chose (3 + reconsume times) and is due by the broker's
    # table (1s 1s 2s 2s ...: levels 3 and 4 wait 2 s); the schedule hands it on no earlier than due.
    scheduled = [(i, h) for i, h in enumerate(cg_fail) if h["kind"] == "retry_scheduled"]
    assert len(scheduled) == 2
    for (i, hop), level in zip(scheduled, (3, 4), strict=True):
        wait_ms = delay_ms(golden_broker_manifest, level)
        assert wait_ms == 2000
        time_ms = page_time_ms(hop["cells"][1])
        due_ms = time_ms + wait_ms
        due = dt.datetime.fromtimestamp(due_ms / 1000, tz=dt.UTC)
        assert hop["cells"][5] == f"{due:%Y-%m-%d %H:%M:%S}.{due_ms % 1000:03d} UTC (level {level})", hop
        assert hop["cells"][6].startswith(f"SCHEDULE_TOPIC_XXXX:{level - 1}:"), hop  # queue id = level - 1
        redelivered = cg_fail[i + 1]
        assert redelivered["kind"] == "redelivered" and redelivered["cells"][6].startswith(f"%RETRY%{GROUP}:")
        assert page_time_ms(redelivered["cells"][1]) >= due_ms, (hop, redelivered)
    assert not [h for h in hops if h["kind"] != "retry_scheduled" and h["cells"][5]]  # no other hop is due

    # The dead letter is where and when RocketMQ stored it.
    [dead_hop] = [h for h in cg_fail if h["kind"] == "dead_lettered"]
    assert dead_hop["cells"][1] == record["Store Timestamp"].replace(",", ".") + " UTC"
    assert dead_hop["cells"][6] == f"{DLQ_TOPIC}:{record['Queue ID']}:{record['Queue Offset']}"
    assert f"moved to {DLQ_TOPIC}" in dead_hop["cells"][4]

    save_screenshot(page, screenshots, "broker-dead-letter-timeline")

    # The dead-lettered hop's copy opens the dead letter itself: nothing to resend on a read-only store.
    page.locator("table.hops tr[data-kind='dead_lettered']").get_by_role("link").click()
    expect(page.get_by_test_id("offset-msg-id")).to_have_text(fail_3["dlq_offset_msg_id"])
    expect(page.locator("h1")).to_contain_text("dead letter")
    expect(page.get_by_test_id("dead-letter-actions")).to_contain_text(f"Dead letter of {GROUP}")
    expect(page.locator("details.resend")).to_have_count(0)
    expect(page.get_by_test_id("edit-resend")).to_have_count(0)
    expect(page.locator(".properties")).to_contain_text(record["Properties"]["ORIGIN_MESSAGE_ID"])

    # Browsing changed no byte of the store.
    assert file_digests(broker_store.path) == broker_store.before


def test_the_store_copy_keeps_every_byte_after_the_read_only_console_stops(server, broker_store):
    assert server.stop() == 0, server.log_text()[-5000:]
    assert "read-only" in server.log_text()
    after = file_digests(broker_store.path)
    assert sorted(after) == sorted(broker_store.before)  # no file added or removed
    assert [name for name in after if after[name] != broker_store.before[name]] == []
