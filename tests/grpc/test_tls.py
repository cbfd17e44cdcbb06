"""The gRPC front over TLS, with a certificate signed by a CA the test makes: the official client
trusting that CA sends and receives; a client without TLS gets nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grpc.certificates import make_ca_and_server_cert
from tests.grpc.conftest import ClientFailed, OfficialClient
from tests.live_server import LiveServer, free_port, wait_until


@pytest.fixture
def tls_server(tmp_path: Path):
    ca, cert, key = make_ca_and_server_cert(tmp_path / "tls")
    port = free_port()
    server = LiveServer(tmp_path / "data", tmp_path / "server.log", settings={"grpc_port": port})
    server.args = ("--grpc-tls-cert", str(cert), "--grpc-tls-key", str(key))
    with server:
        server.start()
        yield server, f"127.0.0.1:{port}", ca


def test_the_official_client_sends_and_receives_over_tls(tls_server, tmp_path):
    server, endpoint, ca = tls_server
    env = {"CLIENT_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)}
    client = OfficialClient(endpoint, tmp_path / "client", env=env)
    try:
        client.call("producer", topics=["Secure"])
        sent = client.call("send", topic="Secure", body="over tls")
        client.call("simple", group="secure-readers", subscriptions={"Secure": "*"}, await_s=1)
        [msg] = wait_until(lambda: client.call("receive", max=1, invisible_s=10)["messages"], 20, "the message")
        assert (msg["message_id"], msg["body"]) == (sent["message_id"], "over tls")
    finally:
        client.close()
    assert "(TLS)" in server.log_text()


def test_a_client_without_tls_cannot_send_to_the_tls_port(tls_server, tmp_path):
    _, endpoint, _ = tls_server
    client = OfficialClient(endpoint, tmp_path / "plain")
    try:
        client.call("producer", topics=["Secure"])
        with pytest.raises(ClientFailed):
            client.call("send", topic="Secure", body="in the clear")
    finally:
        client.close()


def test_a_busy_grpc_port_stops_the_start_with_a_clear_message(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LiveServer(tmp_path / "data", tmp_path / "server.log", settings={"grpc_port": port})
        with server:
            with pytest.raises(AssertionError, match="server exited"):
                server.start()
            assert f"the gRPC front cannot listen on 127.0.0.1:{port}" in server.log_text()
