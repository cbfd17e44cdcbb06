"""Lone surrogates (JSON "\\ud800", text UTF-8 cannot hold) anywhere a client sends text: a clear
400, or for a batch an answer per item with the text escaped, never a 500."""

from __future__ import annotations

import pytest

from tests.app.conftest import assert_error, make_settings, running

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


async def test_a_body_that_is_not_text_is_refused_and_base64_is_suggested(tmp_path):
    async with running(make_settings(tmp_path / "data")) as app:
        r = await app.client.post("/api/topics/T/messages", content='{"body": "a\\ud800b"}', headers=JSON)
        assert_error(r, 400, "'body' is not valid text (a lone surrogate)", "body_base64")
        batch = '[{"body": "fine"}, {"body": "\\udfff"}]'
        assert_error(await app.client.post("/api/topics/T/messages", content=batch, headers=JSON), 400, "body")
        assert app.store.topics().get("T") is None, "nothing of a refused request was stored"


@pytest.mark.parametrize("path, body", [
    ("ack", '{"receipt_handle": "\\ud800"}'),
    ("nack", '{"receipt_handle": "x\\ud800"}'),
    ("change-invisible", '{"receipt_handle": "\\udbff\\u0041", "invisible_ms": 1000}'),
])
async def test_a_receipt_handle_that_is_not_text_is_a_400(tmp_path, path, body):
    async with running(make_settings(tmp_path / "data")) as app:
        r = await app.client.post(f"/api/groups/g/{path}", content=body, headers=JSON)
        assert_error(r, 400, "receipt handle")


async def test_a_batch_ack_answers_each_handle_with_the_text_escaped(tmp_path):
    async with running(make_settings(tmp_path / "data")) as app:
        r = await app.client.post("/api/groups/g/ack", content='{"receipt_handles": ["\\ud800", "zz"]}',
                                  headers=JSON)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["receipt_handle"] for x in results] == ["\\ud800", "zz"]
        assert [x["ok"] for x in results] == [False, False] and all("receipt handle" in x["error"] for x in results)
