"""Auto-renew of PushConsumer deliveries, on a real store with a fake clock: a delivery held by a
connected client stays invisible past its first invisible time under the same handle; one whose
client went away, or that was acked, is no longer renewed and comes back."""

from __future__ import annotations

import anyio
import pytest

from app.grpc.renewal import AUTO_RENEW_INVISIBLE_MS, AutoRenewer
from store.clock import FakeClock
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

START_MS = 1_700_000_000_000
GROUP, TOPIC = "billing", "Orders"


@pytest.fixture
def clock():
    return FakeClock(START_MS)


@pytest.fixture
def store(tmp_path, clock):
    s = MessageStore.open(tmp_path / "store", small_config(), clock=clock)
    yield s
    s.close()


def _deliveries(store, count: int) -> list:
    for i in range(count):
        store.put(NewMessage(topic=TOPIC, body=b"m%d" % i))
    return store.receive(GROUP, TOPIC, count, AUTO_RENEW_INVISIBLE_MS, backoff_after_timeout=False)


def test_connected_clients_deliveries_are_renewed_and_the_others_come_back(store, clock):
    connected = {"push-1"}
    renewer = AutoRenewer(store.renew_many, lambda client_id: client_id in connected)
    kept, gone, acked = _deliveries(store, 3)
    renewer.hold("push-1", GROUP, [kept.receipt_handle, acked.receipt_handle])
    renewer.hold("push-2", GROUP, [gone.receipt_handle])
    store.ack(GROUP, acked.receipt_handle)
    renewer.release(acked.receipt_handle)

    for _ in range(3):  # three renewals, each two thirds of the way through the invisible time
        clock.advance(AUTO_RENEW_INVISIBLE_MS * 2 // 3)
        assert anyio.run(renewer.renew_once) == 1
    assert len(renewer) == 1  # the departed client's delivery is no longer held
    store.revive_due()
    [back] = store.receive(GROUP, TOPIC, 5, AUTO_RENEW_INVISIBLE_MS, backoff_after_timeout=False)
    assert (back.message.queue_offset, back.message.queue_id, back.delivery_attempt) == (
        gone.message.queue_offset, gone.message.queue_id, 2)
    store.ack(GROUP, kept.receipt_handle)  # still the first handle, well past its first invisible time


def test_a_delivery_the_store_refuses_to_renew_is_dropped(store, clock):
    renewer = AutoRenewer(store.renew_many, lambda client_id: True)
    [delivery] = _deliveries(store, 1)
    renewer.hold("push-1", GROUP, [delivery.receipt_handle])
    store.change_invisible(GROUP, delivery.receipt_handle, 60_000)  # the client's ChangeInvisibleDuration
    assert anyio.run(renewer.renew_once) == 0 and len(renewer) == 0
