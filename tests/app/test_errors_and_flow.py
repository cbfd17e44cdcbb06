"""The one error shape (404, 405, 422, 500) and flow control (429 with Retry-After)."""

from __future__ import annotations

import logging

import pytest

import app.services.groups
from app.services.flow import PutGate
from store.errors import CorruptRecordError, FlowControlError
from tests.app.conftest import assert_error, make_settings, running

pytestmark = pytest.mark.anyio


async def test_unknown_route_is_404(api):
    assert_error(await api.client.get("/api/no-such-thing"), 404, "/api/no-such-thing")


async def test_wrong_method_is_405_with_allow(api):
    r = await api.client.delete("/api/groups")
    assert_error(r, 405, "DELETE")
    assert "GET" in r.headers["allow"]


async def test_validation_error_is_422_naming_the_field(api):
    assert_error(await api.client.put("/api/groups/g1", json={"retry_queues": "two"}), 422, "retry_queues")


async def test_unexpected_exception_is_a_generic_500_and_logged(api, monkeypatch, caplog):
    def explode(store):
        raise RuntimeError("secret internals at /some/path")

    monkeypatch.setattr(app.services.groups, "list_groups", explode)
    with caplog.at_level(logging.ERROR, logger="mqlens.app"):
        r = await api.client.get("/api/groups")
    message = assert_error(r, 500, "internal server error")
    assert "secret" not in r.text and "Traceback" not in r.text and "RuntimeError" not in r.text
    assert message == "internal server error (details are in the server log)"
    assert any(rec.exc_info and "secret internals" in str(rec.exc_info[1]) for rec in caplog.records)
    assert (await api.client.get("/healthz")).status_code == 200  # the server goes on


async def test_a_store_error_not_meant_for_callers_is_a_generic_500(api, monkeypatch):
    def corrupt(store):
        raise CorruptRecordError("/data/store/commitlog/0", 12, "bad CRC")

    monkeypatch.setattr(app.services.groups, "list_groups", corrupt)
    r = await api.client.get("/api/groups")
    assert_error(r, 500)
    assert "CRC" not in r.text and "/data" not in r.text


async def test_flow_control_error_from_anywhere_is_429_with_retry_after(api, monkeypatch):
    def busy(store):
        raise FlowControlError("the store is busy", retry_after_s=7)

    monkeypatch.setattr(app.services.groups, "list_groups", busy)
    r = await api.client.get("/api/groups")
    assert_error(r, 429, "busy")
    assert r.headers["retry-after"] == "7"


async def test_no_put_slots_is_429(data_dir):
    async with running(make_settings(data_dir, max_pending_puts=0)) as api:
        r = await api.client.post("/api/topics/Orders/messages", json={"body": "x"})
        assert_error(r, 429, "too many puts")
        assert r.headers["retry-after"] == "1"
        assert "Orders" not in api.store.topics()


async def test_puts_beyond_the_bound_are_429_until_a_slot_frees(data_dir):
    async with running(make_settings(data_dir, max_pending_puts=2)) as api:
        gate: PutGate = api.app.state.put_gate
        assert gate.try_acquire() and gate.try_acquire()  # two puts in progress
        r = await api.client.post("/api/topics/Orders/messages", json={"body": "x"})
        assert_error(r, 429)
        assert int(r.headers["retry-after"]) >= 1
        gate.release()
        r = await api.client.post("/api/topics/Orders/messages", json={"body": "x"})
        assert r.status_code == 200, r.text
        assert gate.in_use == 1  # the put gave its slot back
        gate.release()


async def test_a_failed_put_gives_its_slot_back(api):
    gate: PutGate = api.app.state.put_gate
    assert_error(await api.client.post("/api/topics/Orders/messages", json={"body_base64": "!"}), 400)
    assert gate.in_use == 0


def test_put_gate_bounds():
    gate = PutGate(1)
    with gate.slot():
        assert gate.in_use == 1 and not gate.try_acquire()
        with pytest.raises(FlowControlError), gate.slot():
            pass
    assert gate.in_use == 0
    with pytest.raises(ValueError), gate.slot():
        raise ValueError("inside")
    assert gate.in_use == 0
    with pytest.raises(RuntimeError):
        gate.release()
    with pytest.raises(ValueError):
        PutGate(-1)


async def test_openapi_document(api):
    r = await api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["info"]["title"] == "mqlens"
    produce = doc["paths"]["/api/topics/{topic}/messages"]["post"]
    assert {"200", "400", "403", "422", "429"} <= set(produce["responses"])
    for path in ("/api/groups", "/api/groups/{group}", "/api/topics", "/api/topics/{topic}",
                 "/api/config/delay-levels", "/healthz"):
        assert path in doc["paths"]
    assert (await api.client.get("/healthz")).json() == {"ok": True, "store": "open"}
