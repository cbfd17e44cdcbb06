"""Resetting a group's consumer offsets: previewed, applied, audited, followed by pull and pop."""

from __future__ import annotations

import pytest

from tests.app.conftest import assert_error, audit_rows, put_messages
from tests.app.test_resend import receive

pytestmark = pytest.mark.anyio
GROUP = "GID_reset"
URL = f"/api/groups/{GROUP}/offsets/reset"


async def ack_all(api) -> int:
    got = await receive(api, GROUP)
    for m in got:
        assert (await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": m["receipt_handle"]})
                ).status_code == 200
    return len(got)


async def test_preview_then_reset_to_earliest_and_receive_again(api, clock):
    await api.client.put("/api/topics/Orders", json={"queues": 2})
    await put_messages(api, "Orders", [{"body": f"m{n}", "queue_id": n % 2} for n in range(6)])
    assert await ack_all(api) == 6
    preview = await api.client.post(URL, json={"topic": "Orders", "to": "earliest", "dry_run": True})
    assert preview.status_code == 200 and preview.json()["applied"] is False
    assert [(q["queue_id"], q["before"], q["after"], q["lag_before"], q["lag_after"])
            for q in preview.json()["queues"]] == [(0, 3, 0, 0, 3), (1, 3, 0, 0, 3)]
    assert await receive(api, GROUP) == []  # a preview moves nothing
    r = await api.client.post(URL, json={"topic": "Orders", "to": "earliest", "queue_id": 1, "reason": "replay"})
    assert r.status_code == 200 and r.json()["applied"] is True
    assert api.store.offsets.get("Orders", GROUP, 1) == 0 and api.store.offsets.get("Orders", GROUP, 0) == 3
    assert await ack_all(api) == 3  # pop follows the reset: queue 1 is received again
    [entry] = audit_rows(api.sessions, action="reset_offsets")
    assert (entry.target, entry.reason, entry.outcome) == (f"group:{GROUP}", "replay", "ok")
    r = await api.client.post(URL, json={"topic": "Orders", "to": {"offset": 1}})
    assert [q["after"] for q in r.json()["queues"]] == [1, 1]
    r = await api.client.post(URL, json={"topic": "Orders", "to": {"time": clock.now_ms() + 10_000}})
    assert [q["after"] for q in r.json()["queues"]] == [3, 3]


async def test_the_group_api_answers_each_queues_committed_offset_max_offset_and_lag(api):
    await api.client.put("/api/topics/Orders", json={"queues": 2})
    await put_messages(api, "Orders", [{"body": f"m{n}", "queue_id": n % 2} for n in range(6)])
    assert await ack_all(api) == 6
    r = await api.client.post(URL, json={"topic": "Orders", "to": {"offset": 1}, "queue_id": 0})
    assert r.status_code == 200
    await put_messages(api, "Orders", [{"body": "late", "queue_id": 1}])
    state = (await api.client.get(f"/api/groups/{GROUP}")).json()
    orders = [q for q in state["queues"] if q["topic"] == "Orders"]
    queue = {"topic": "Orders", "min_offset": 0, "expired": False}
    assert orders == [{**queue, "queue_id": 0, "committed": 1, "max_offset": 3, "lag": 2},
                      {**queue, "queue_id": 1, "committed": 3, "max_offset": 4, "lag": 1}]
    assert state["lag"] == sum(q["lag"] for q in state["queues"]) >= 3
    assert state["group"]["name"] == GROUP


async def test_bad_resets(api):
    await put_messages(api, "Orders", {"body": "x"})
    assert_error(await api.client.post(URL, json={"topic": "Nope", "to": "latest"}), 404, "no messages")
    assert_error(await api.client.post(URL, json={"topic": "Orders", "to": "latest", "queue_id": 99}), 404, "no queue")
    assert_error(await api.client.post(URL, json={"topic": "Orders", "to": "tomorrow"}), 422)
    assert_error(await api.client.post(URL, json={"topic": "Orders", "to": {"offset": -1}}), 400)
    assert_error(await api.client.post("/api/groups/bad group/offsets/reset", json={"topic": "Orders",
                                                                                     "to": "latest"}), 400)


async def test_the_group_page_changes_settings_and_resets_offsets(api):
    html = {"Accept": "text/html"}
    await put_messages(api, "Orders", [{"body": "a"}, {"body": "b"}])
    await ack_all(api)
    page = await api.client.get(f"/groups/{GROUP}", headers=html)
    assert 'data-testid="group-settings"' in page.text and 'data-testid="offset-reset"' in page.text
    version = (await api.client.get(f"/api/groups/{GROUP}")).json()["group"]["version"]
    r = await api.client.post(f"/groups/{GROUP}/settings", headers=html, data={
        "max_reconsume_times": "5", "consume_mode": "concurrent", "expected_version": version, "reason": "calmer"})
    assert r.status_code == 303 and api.store.metadata.group(GROUP).max_reconsume_times == 5
    stale = await api.client.post(f"/groups/{GROUP}/settings", headers=html, data={
        "max_reconsume_times": "9", "consume_mode": "concurrent", "expected_version": version})
    assert stale.status_code == 409 and "changed since version" in stale.text
    preview = await api.client.post(f"/groups/{GROUP}/offsets/reset", headers=html,
                                    data={"topic": "Orders", "to": "earliest"})
    assert preview.status_code == 200 and 'data-testid="reset-preview"' in preview.text
    assert sum(hi - (api.store.offsets.get("Orders", GROUP, q) or 0) for q, _, hi in api.store.topics()["Orders"]) == 0
    done = await api.client.post(f"/groups/{GROUP}/offsets/reset", headers=html,
                                 data={"topic": "Orders", "to": "earliest", "confirm": "true"})
    assert done.status_code == 303 and await ack_all(api) == 2
    bad = await api.client.post(f"/groups/{GROUP}/offsets/reset", headers=html,
                                data={"topic": "Orders", "to": "offset", "value": "x"})
    assert bad.status_code == 400 and "Offset must be a whole number" in bad.text
