"""GET /api/clusters and the Cluster page on the embedded store: one broker, this process, whose
settings are the store's own configuration."""

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


async def test_the_embedded_brokers_settings_are_the_stores_configuration(api):
    body = (await api.client.get("/api/clusters/brokers/mqlens/0/settings")).json()
    assert (body["name"], body["broker_id"], body["address"], body["complete"], body["problems"]) == (
        "mqlens", 0, None, True, [])
    settings = body["settings"]
    assert settings["commitlog_file_size"] == str(api.store.config.geometry.commitlog_file_size)
    assert settings["delay_levels"] == api.store.delay_levels.spec and settings["flush"] == api.store.config.flush
    assert list(settings) == sorted(settings)
    page = await api.client.get("/cluster/brokers/mqlens/0", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "commitlog_file_size" in page.text and "embedded store" in page.text
    listing = await api.client.get("/cluster", headers={"Accept": "text/html"})
    assert 'href="/cluster/brokers/mqlens/0"' in listing.text
    for where, status in (("mqlens/1", 404), ("other/0", 404), ("bad%20name/0", 422), ("mqlens/-1", 422),
                          ("mqlens/x", 422)):
        url = f"/api/clusters/brokers/{where}/settings"
        r = await api.client.get(url)
        assert r.status_code == status and r.json()["error"], (url, r.text)
    missing = await api.client.get("/cluster/brokers/other/0", headers={"Accept": "text/html"})
    assert missing.status_code == 404 and "Traceback" not in missing.text
