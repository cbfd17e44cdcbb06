"""Kill -9 of the server while official clients send with sync flush: after the restart every
send a client saw succeed is in the store, and the clients go on by themselves."""

from __future__ import annotations

import pytest

from tests.live_server import wait_until

pytestmark = pytest.mark.slow

TOPIC = "Ledger"
KILLS = 2


def test_every_acknowledged_send_survives_kill_9_and_clients_reconnect(official_client, grpc_server):
    producers = [official_client(f"producer-{i}") for i in range(2)]
    for i, producer in enumerate(producers):
        producer.call("producer", topics=[TOPIC])
        producer.call("keep_sending", topic=TOPIC, prefix=f"p{i}")
    acked_before = 0
    for _ in range(KILLS):
        wait_until(lambda floor=acked_before: sum(len(p.call("sending")["acked"]) for p in producers) > floor + 50,
                   60, "more sends acknowledged")
        grpc_server.kill()
        acked_before = sum(len(p.call("sending")["acked"]) for p in producers)
        grpc_server.start()
    wait_until(lambda: sum(len(p.call("sending")["acked"]) for p in producers) > acked_before + 50, 60,
               "sends acknowledged after the last restart: the clients reconnected")
    acked = [message_id for p in producers for message_id in p.call("sending", stop=True)["acked"]]
    with grpc_server.client() as api:
        missing = [m for m in acked if not api.get(f"/api/messages/by-unique-key/{m}").json()["messages"]]
    assert len(acked) > 50 * (KILLS + 1) and missing == []
