"""PUT /api/groups/{group}/offsets is the offset reset of one queue: one permission (configure),
audited, and followed by pull and pop alike."""

from __future__ import annotations

import pytest

from tests.app.conftest import assert_error, audit_rows, bearer, put_messages
from tests.app.test_offset_reset import ack_all

pytestmark = pytest.mark.anyio
GROUP = "GID_reset"
URL = f"/api/groups/{GROUP}/offsets"


async def token(api, role: str) -> str:
    r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
    assert r.status_code == 201, r.text
    return r.json()["value"]


async def test_a_client_token_cannot_move_a_group_offset(api):
    await put_messages(api, "Orders", [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 0}])
    assert await ack_all(api) == 2
    before = api.store.offsets.get("Orders", GROUP, 0)
    client = await token(api, "client")
    r = await api.client.put(URL, json={"topic": "Orders", "queue_id": 0, "offset": 0}, headers=bearer(client))
    assert_error(r, 403, "t-client (client) may not do this", "operator or admin")
    assert api.store.offsets.get("Orders", GROUP, 0) == before
    assert audit_rows(api.sessions, action="reset_offsets") == []


async def test_an_offset_put_is_an_audited_reset_that_receives_follow(api):
    await put_messages(api, "Orders", [{"body": f"m{n}", "queue_id": 0} for n in range(3)])
    assert await ack_all(api) == 3
    r = await api.client.put(URL, json={"topic": "Orders", "queue_id": 0, "offset": 1, "reason": "replay two"})
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "group": GROUP, "topic": "Orders", "queue_id": 0, "offset": 1, "previous": 3}
    [entry] = audit_rows(api.sessions, action="reset_offsets")
    assert (entry.target, entry.reason, entry.outcome) == (f"group:{GROUP}", "replay two", "ok")
    assert await ack_all(api) == 2  # pop goes on from the new offset, as the reset says
