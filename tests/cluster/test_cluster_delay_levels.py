"""Delay levels on a live cluster through the console: read as `mqadmin getBrokerConfig` shows the
broker's messageDelayLevel, written to it (audited, a recorded version, applied after a restart),
rolled back; a malformed table and a caller without the operator role are refused. The fixture's
table is written back at the end (the session's cluster is shared)."""

from __future__ import annotations

import pytest

from tests.cluster.console import console_on

pytestmark = pytest.mark.slow  # a real RocketMQ cluster: handed out first

HTML = {"Accept": "text/html"}
URL = "/api/config/delay-levels"


def brokers_delay_levels(rocketmq) -> str:
    """messageDelayLevel as `mqadmin getBrokerConfig` prints it for the fixture's broker."""
    for line in rocketmq.mqadmin("getBrokerConfig", "-b", "127.0.0.1:10911").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "messageDelayLevel":
            return value.strip()
    raise AssertionError("getBrokerConfig printed no messageDelayLevel")


def test_the_brokers_table_is_read_written_and_rolled_back(rocketmq, tmp_path):
    original = brokers_delay_levels(rocketmq)
    faster = " ".join(["2s"] * 18)
    with console_on(rocketmq, tmp_path) as server, server.client() as client:
        try:
            got = client.get(URL).json()
            assert (got["levels"], got["version"], got["differ"], got["complete"]) == (original, 0, False, True)
            assert got["applies_after_restart"] is True
            assert [(b["broker"], b["address"], b["levels"]) for b in got["brokers"]] \
                == [("broker-a", "127.0.0.1:10911", original)]

            token = client.post("/api/tokens", json={"name": "helpdesk", "role": "support"}).json()["value"]
            refused = client.put(URL, json={"levels": faster}, headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 403 and "operator" in refused.json()["error"]
            for levels in ("1s 5x", "1s\nbrokerPermission=0", "", "0s"):
                r = client.put(URL, json={"levels": levels})
                assert r.status_code in (400, 422) and r.json()["error"], (levels, r.text)
            assert brokers_delay_levels(rocketmq) == original

            written = client.put(URL, json={"levels": faster, "reason": "faster retries", "expected_version": 0})
            assert written.status_code == 200, written.text
            body = written.json()
            assert (body["levels"], body["version"], body["applies_after_restart"]) == (faster, 1, True)
            assert brokers_delay_levels(rocketmq) == faster
            stale = client.put(URL, json={"levels": original, "expected_version": 0})
            assert stale.status_code == 409 and "version 1" in stale.json()["error"]
            [entry] = client.get("/api/audit", params={"action": "set_broker_delay_levels"}).json()["entries"]
            assert (entry["reason"], entry["outcome"]) == ("faster retries", "ok")
            assert entry["detail"]["result"]["before"]["levels"] == original

            history = client.get(f"{URL}/versions").json()
            assert history["current"] == 1
            assert [(v["version"], v["levels"]) for v in history["versions"]] == [(1, faster), (0, original)]
            page = client.get("/config/delay-levels", headers=HTML)
            assert page.status_code == 200 and 'data-testid="restart-notice"' in page.text and faster in page.text

            back = client.post(f"{URL}/rollback", json={"version": 0, "reason": "restore"})
            assert back.status_code == 200 and back.json()["levels"] == original and back.json()["version"] == 2
            assert brokers_delay_levels(rocketmq) == original
            assert client.post(f"{URL}/rollback", json={"version": 99}).status_code == 404
            assert "Traceback" not in server.log_text()
        finally:
            if brokers_delay_levels(rocketmq) != original:
                client.put(URL, json={"levels": original, "reason": "restore the fixture's table"})
