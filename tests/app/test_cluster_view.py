"""GET /api/clusters and the Cluster page on the embedded store: one broker, this process."""

from __future__ import annotations

import pytest

from tests.app.conftest import make_settings, put_messages, running

pytestmark = pytest.mark.anyio


async def test_the_embedded_store_is_one_master_broker_of_its_own(api):
    before = (await api.client.get("/api/clusters")).json()
    await put_messages(api, "Orders", {"body": "hello"})
    body = (await api.client.get("/api/clusters")).json()
    assert (body["backend"], body["complete"], body["problems"], body["name_servers"]) == ("embedded", True, [], [])
    [cluster] = body["clusters"]
    [broker] = cluster["brokers"]
    assert (broker["role"], broker["broker_id"], broker["address"], broker["answered"]) == ("master", 0, None, True)
    assert broker["version"].startswith("mqlens ")
    assert broker["commitlog_max_offset"] == api.store.commitlog.end > before["clusters"][0]["brokers"][0][
        "commitlog_max_offset"]
    page = await api.client.get("/cluster", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "embedded store" in page.text and broker["version"] in page.text


async def test_the_cluster_api_needs_a_signed_in_viewer(data_dir, clock):
    async with running(make_settings(data_dir), clock, as_admin=False) as anonymous:
        assert (await anonymous.client.get("/api/clusters")).status_code == 401
