"""What a resend answers: `ok` only when every item was resent (or replayed), and a 4xx with a
status per item when it resent nothing."""

from __future__ import annotations

import pytest

from tests.app.conftest import put_messages
from tests.app.test_resend import BULK, GROUP, dead_letter, resends

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}
NOT_THERE = "0123456789ABCDEF0123456789ABCDEF"


def error_with_results(response, status: int) -> list[str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["ok"] is False and body["status"] == status and body["error"]
    return [item["status"] for item in body["results"]]


async def test_a_request_whose_only_id_is_no_dead_letter_is_a_404(api):
    await dead_letter(api)
    r = await api.client.post(BULK, json={"message_ids": [NOT_THERE]})
    assert error_with_results(r, 404) == ["not_found"]
    assert "no dead letter" in r.json()["error"]
    assert resends(api) == []


async def test_a_request_naming_only_messages_that_are_not_dead_letters_is_a_400(api):
    await dead_letter(api)
    [plain] = await put_messages(api, "Orders", {"body": "fine"})
    r = await api.client.post(BULK, json={"message_ids": [plain["offset_msg_id"], NOT_THERE]})
    assert error_with_results(r, 400) == ["failed", "not_found"]
    assert "not in a dead-letter topic" in r.json()["results"][0]["error"]


async def test_ok_only_when_every_item_was_resent(api):
    _, first = await dead_letter(api, "a")
    _, second = await dead_letter(api, "b")
    r = await api.client.post(BULK, json={"message_ids": [first, NOT_THERE]})
    assert r.status_code == 200 and r.json()["ok"] is False
    assert [x["status"] for x in r.json()["results"]] == ["ok", "not_found"]
    r = await api.client.post(BULK, json={"message_ids": [second]}, headers={"Idempotency-Key": "k2"})
    assert r.status_code == 200 and r.json()["ok"] is True
    again = await api.client.post(BULK, json={"message_ids": [second]}, headers={"Idempotency-Key": "k2"})
    assert again.status_code == 200 and again.json()["ok"] is True and again.json()["replayed"] is True


async def test_the_console_resend_of_nothing_answers_404_with_each_result(api):
    await dead_letter(api)
    form = {"group": GROUP, "message_id": NOT_THERE, "destination": "group", "confirm": "true"}
    page = await api.client.post("/dead-letters/resend", data=form, headers=HTML)
    assert page.status_code == 404
    assert 'data-status="not_found"' in page.text and "Back to the dead letters" in page.text
    twin = await api.client.post("/dead-letters/resend", data=form, headers={"Accept": "application/json"})
    assert twin.status_code == 404 and twin.json()["ok"] is False
