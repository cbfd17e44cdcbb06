"""Client credentials with the official client: a signed client works, a wrong secret, a revoked
key or a missing credential (anonymous turned off) is refused, and a producer-only credential
cannot consume."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grpc.conftest import ClientFailed, OfficialClient, grpc_live_server
from tests.live_server import wait_until


@pytest.fixture
def signed_server(tmp_path: Path):
    server = grpc_live_server(tmp_path)
    server.env["MQLENS_GRPC_ANONYMOUS"] = "false"
    with server:
        server.start()
        yield server


def _client(server, tmp_path: Path, name: str, ak: str = "", sk: str = "") -> OfficialClient:
    return OfficialClient(f"127.0.0.1:{server.env['MQLENS_GRPC_PORT']}", tmp_path / name, ak=ak, sk=sk)


def test_signed_clients_work_and_wrong_or_missing_credentials_are_refused(signed_server, tmp_path):
    with signed_server.client() as api:
        made = api.post("/api/client-credentials", json={"role": "both", "description": "orders service"}).json()
        producer_only = api.post("/api/client-credentials", json={"role": "producer"}).json()
    key, secret = made["credential"]["access_key"], made["secret"]
    clients = [_client(signed_server, tmp_path, "good", key, secret),
               _client(signed_server, tmp_path, "wrong", key, secret[:-2] + "xx"),
               _client(signed_server, tmp_path, "anonymous"),
               _client(signed_server, tmp_path, "producer-only", producer_only["credential"]["access_key"],
                       producer_only["secret"])]
    good, wrong, anonymous, limited = clients
    try:
        good.call("producer", topics=["Signed"])
        sent = good.call("send", topic="Signed", body="signed")
        good.call("simple", group="signed-readers", subscriptions={"Signed": "*"}, await_s=1)
        [msg] = wait_until(lambda: good.call("receive", max=1, invisible_s=10)["messages"], 20, "the message")
        assert msg["message_id"] == sent["message_id"]

        for refused in (wrong, anonymous):
            refused.call("producer", topics=["Signed"])
            with pytest.raises(ClientFailed):
                refused.call("send", topic="Signed", body="refused")
        limited.call("producer", topics=["Signed"])
        limited.call("send", topic="Signed", body="may send")
        limited.call("simple", group="signed-readers", subscriptions={"Signed": "*"}, await_s=1)
        with pytest.raises(ClientFailed) as forbidden:
            limited.call("receive", max=1, invisible_s=10)
        assert forbidden.value.kind == "ForbiddenException"

        with signed_server.client() as api:
            assert api.delete(f"/api/client-credentials/{key}").status_code == 200
        with pytest.raises(ClientFailed):
            good.call("send", topic="Signed", body="after revoke")
    finally:
        for client in clients:
            client.close()
    with signed_server.client() as api:
        def refused_reasons() -> set[str]:
            entries = api.get("/api/audit", params={"limit": 500}).json()["entries"]
            return {e["detail"]["reason"] for e in entries if e["action"] == "refuse_client"}
        reasons = wait_until(lambda: len(refused_reasons()) >= 3 and refused_reasons(), 30, "the audited refusals")
    assert {"wrong signature", "no credentials", "revoked access key"} <= reasons, reasons
