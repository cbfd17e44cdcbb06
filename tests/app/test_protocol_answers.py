"""HTTP-level answers a script relies on (issue #14): 405 names every method of the path in Allow,
a body that is not JSON is a 415, and request bodies are bounded per route and per batch (413)."""

from __future__ import annotations

import base64

import pytest

from tests.app.conftest import assert_error, make_settings, running

pytestmark = pytest.mark.anyio


async def test_405_lists_every_method_the_path_takes(api):
    r = await api.client.delete("/api/groups/GID_x")
    assert_error(r, 405, "allowed: GET, PUT")
    assert r.headers["Allow"] == "GET, PUT"
    r = await api.client.patch("/api/topics/Orders/messages")
    assert r.status_code == 405 and r.headers["Allow"] == "POST"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml",
                                          "multipart/form-data; boundary=x", None])
async def test_a_body_that_is_not_said_to_be_json_is_415(api, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    r = await api.client.post("/api/topics/Orders/messages", content=b'{"body": "x"}', headers=headers)
    assert_error(r, 415, "send Content-Type: application/json")
    assert api.store.topics().get("Orders") is None


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
async def test_json_bodies_are_taken(api, content_type):
    r = await api.client.post("/api/topics/Orders/messages", content=b'{"body": "x"}',
                              headers={"Content-Type": content_type})
    assert r.status_code == 200, r.text


async def test_a_request_without_a_body_needs_no_content_type(api):
    r = await api.client.post("/api/groups/GID_x/receive", content=b"", headers={"Content-Type": "text/plain"})
    assert r.status_code == 422  # no body where one is needed: the validation names it


async def test_routes_without_message_bodies_take_small_bodies_only(data_dir, clock):
    async with running(make_settings(data_dir, max_small_request_bytes=4096, max_request_bytes=64 * 1024),
                       clock) as api:
        big_reason = {"max_reconsume_times": 3, "reason": "r" * 5000}
        assert_error(await api.client.put("/api/groups/GID_x", json=big_reason), 413, "larger than 4096 bytes")
        r = await api.client.post("/api/topics/Orders/messages", json={"body": "b" * 20_000})
        assert r.status_code == 200, r.text


async def test_the_bodies_of_a_batch_are_bounded_together(data_dir, clock):
    async with running(make_settings(data_dir, max_batch_bytes=1000), clock) as api:
        part = base64.b64encode(b"\1" * 400).decode()
        r = await api.client.post("/api/topics/Orders/messages", json=[{"body_base64": part}] * 3)
        assert_error(r, 413, "1200 bytes together: at most 1000")
        assert api.store.topics().get("Orders") is None
        assert (await api.client.post("/api/topics/Orders/messages",
                                      json=[{"body_base64": part}] * 2)).status_code == 200
        assert (await api.client.post("/api/topics/Orders/messages", json={"body": "x" * 2000})).status_code == 200
