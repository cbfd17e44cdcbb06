"""The registry of RocketMQ 5 clients the gRPC front reports: what each client told, online until
it terminates or stays silent, gone ones forgotten after a while, a bounded number kept (gone
ones dropped first), hostile texts cut to size, and many threads reporting at once."""

from __future__ import annotations

import threading

import pytest

from app.services.client_sessions import (
    MAX_ID_CHARS,
    MAX_TOPICS,
    PRODUCER,
    PUSH_CONSUMER,
    SIMPLE_CONSUMER,
    SWEEP_EVERY_MS,
    ClientSessions,
)
from store.clock import FakeClock

SILENT_MS = 120_000
FORGET_MS = 600_000
PRODUCER_ID = "host-a@101@1@2k4x0"
CONSUMER_ID = "host-b@202@1@2k4x9"


def registry(clock: FakeClock, **overrides) -> ClientSessions:
    return ClientSessions(clock, **{"silent_after_ms": SILENT_MS, "forget_after_ms": FORGET_MS, **overrides})


def one(sessions: ClientSessions, client_id: str):
    [found] = [c for c in sessions.snapshot() if c.client_id == client_id]
    return found


def test_a_client_is_described_by_its_calls_settings_and_heartbeats():
    clock = FakeClock()
    sessions = registry(clock)
    started = clock.now_ms()
    sessions.seen(CONSUMER_ID, address="10.0.0.7:53122", language="PYTHON", version="5.1.2")
    clock.advance(5)
    sessions.settings(CONSUMER_ID, kind=PUSH_CONSUMER, group="GID_orders",
                      subscriptions={"Orders": "TagA||TagB", "Refunds": "*"}, language="PYTHON", version="5.1.2",
                      address="10.0.0.7:53122")
    clock.advance(1000)
    sessions.heartbeat(CONSUMER_ID, PUSH_CONSUMER, "GID_orders")
    sessions.receive_started(CONSUMER_ID)
    sessions.receive_started(CONSUMER_ID)
    sessions.receive_ended(CONSUMER_ID)

    c = one(sessions, CONSUMER_ID)
    assert (c.state, c.kind, c.group, c.language, c.version, c.address) == (
        "online", PUSH_CONSUMER, "GID_orders", "PYTHON", "5.1.2", "10.0.0.7:53122")
    assert c.subscriptions == {"Orders": "TagA||TagB", "Refunds": "*"} and c.topics == ()
    assert (c.first_seen_ms, c.settings_at_ms, c.last_heartbeat_ms, c.last_seen_ms) == (
        started, started + 5, started + 1005, started + 1005)
    assert c.in_flight_receives == 1 and c.is_consumer and c.gone_at_ms is None

    sessions.settings(PRODUCER_ID, kind=PRODUCER, topics=["Orders", "Orders", "Audit"], language="JAVA",
                      version="5.0.7")
    p = one(sessions, PRODUCER_ID)
    assert p.topics == ("Orders", "Audit") and p.group is None and not p.is_consumer
    # settings sent again replace the earlier ones
    sessions.settings(CONSUMER_ID, kind=PUSH_CONSUMER, group="GID_orders", subscriptions={"Orders": "TagC"})
    assert one(sessions, CONSUMER_ID).subscriptions == {"Orders": "TagC"}


def test_a_heartbeat_fills_in_what_the_settings_have_not_told():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.heartbeat("early@1@1@1", SIMPLE_CONSUMER, "GID_s")
    c = one(sessions, "early@1@1@1")
    assert (c.kind, c.group, c.settings_at_ms) == (SIMPLE_CONSUMER, "GID_s", None)
    sessions.settings("early@1@1@1", kind=SIMPLE_CONSUMER, group="GID_t", subscriptions={"T": "*"})
    sessions.heartbeat("early@1@1@1", SIMPLE_CONSUMER, "GID_s")  # the settings win
    assert one(sessions, "early@1@1@1").group == "GID_t"


def test_filters_and_order_of_the_snapshot():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.settings("p1", kind=PRODUCER, topics=["Orders"])
    sessions.settings("c2", kind=SIMPLE_CONSUMER, group="GID_b", subscriptions={"Orders": "*"})
    sessions.settings("c1", kind=PUSH_CONSUMER, group="GID_a", subscriptions={"Payments": "*"})
    sessions.settings("c0", kind=PUSH_CONSUMER, group="GID_b", subscriptions={"Payments": "*"})
    sessions.terminated("c0")
    assert [c.client_id for c in sessions.snapshot()] == ["p1", "c1", "c2", "c0"]  # online first
    assert [c.client_id for c in sessions.snapshot(group="GID_b")] == ["c2", "c0"]
    assert [c.client_id for c in sessions.snapshot(topic="Orders")] == ["p1", "c2"]
    assert [c.client_id for c in sessions.snapshot(group="GID_b", topic="Payments")] == ["c0"]
    assert sessions.snapshot(group="nobody") == []
    counts = sessions.counts()
    assert (counts.producers, counts.consumers, counts.others, counts.gone, counts.online) == (1, 2, 0, 1, 3)


def test_a_silent_client_goes_then_is_forgotten_and_comes_back_when_it_calls():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.settings(CONSUMER_ID, kind=PUSH_CONSUMER, group="G", subscriptions={"T": "*"})
    for _ in range(11):  # heartbeats every 10 s keep it online
        clock.advance(10_000)
        sessions.heartbeat(CONSUMER_ID, PUSH_CONSUMER, "G")
    assert one(sessions, CONSUMER_ID).state == "online"
    last = clock.now_ms()
    clock.advance(SILENT_MS - 1)
    assert one(sessions, CONSUMER_ID).state == "online"
    clock.advance(1)
    gone = one(sessions, CONSUMER_ID)
    assert (gone.state, gone.gone_why, gone.gone_at_ms, gone.last_seen_ms) == ("gone", "silent", clock.now_ms(), last)
    assert sessions.counts().gone == 1 and sessions.counts().online == 0

    sessions.seen(CONSUMER_ID, address="10.0.0.9:1")  # it calls again: online, what it told is kept
    back = one(sessions, CONSUMER_ID)
    assert (back.state, back.gone_why, back.group, back.address) == ("online", None, "G", "10.0.0.9:1")

    clock.advance(SILENT_MS)
    assert one(sessions, CONSUMER_ID).state == "gone"
    clock.advance(FORGET_MS - 1)
    assert one(sessions, CONSUMER_ID).state == "gone"
    clock.advance(1)
    assert sessions.snapshot() == [] and sessions.counts().gone == 0


def test_a_receive_in_flight_keeps_a_quiet_client_online():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.receive_started(CONSUMER_ID)
    clock.advance(SILENT_MS * 3)
    assert one(sessions, CONSUMER_ID).state == "online"
    sessions.receive_ended(CONSUMER_ID)  # the answer is a sign of life too
    assert one(sessions, CONSUMER_ID).last_seen_ms == clock.now_ms()
    clock.advance(SILENT_MS)
    assert one(sessions, CONSUMER_ID).state == "gone"
    sessions.receive_ended(CONSUMER_ID)  # one more end than starts: never below zero, and it is back
    c = one(sessions, CONSUMER_ID)
    assert c.in_flight_receives == 0 and c.state == "online"


def test_a_terminated_client_stays_gone_until_it_sends_new_settings():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.settings(PRODUCER_ID, kind=PRODUCER, topics=["Orders"])
    sessions.receive_started(PRODUCER_ID)
    clock.advance(7)
    sessions.terminated(PRODUCER_ID)
    c = one(sessions, PRODUCER_ID)
    assert (c.state, c.gone_why, c.gone_at_ms) == ("gone", "terminated", clock.now_ms())
    for late in (lambda: sessions.seen(PRODUCER_ID), lambda: sessions.heartbeat(PRODUCER_ID, PRODUCER),
                 lambda: sessions.receive_started(PRODUCER_ID), lambda: sessions.receive_ended(PRODUCER_ID)):
        clock.advance(1)
        late()
        assert one(sessions, PRODUCER_ID).state == "gone"
    assert one(sessions, PRODUCER_ID).in_flight_receives == 0
    sessions.terminated(PRODUCER_ID)  # again, and for a client never seen: nothing happens
    sessions.terminated("never-seen")
    assert [c.client_id for c in sessions.snapshot()] == [PRODUCER_ID]
    sessions.settings(PRODUCER_ID, kind=PRODUCER, topics=["Orders"])
    assert one(sessions, PRODUCER_ID).state == "online"
    # a silent client that then terminates is told as terminated
    clock.advance(SILENT_MS)
    sessions.snapshot()
    sessions.terminated(PRODUCER_ID)
    assert one(sessions, PRODUCER_ID).gone_why == "terminated"


def test_the_number_kept_is_bounded_the_gone_ones_dropped_first_oldest_first():
    clock = FakeClock()
    sessions = registry(clock, max_sessions=5)
    for i in range(5):
        sessions.seen(f"c{i}")
        clock.advance(1)
    sessions.terminated("c3")
    clock.advance(1)
    sessions.terminated("c1")
    sessions.seen("new-1")  # room made by dropping c3, gone first
    assert {c.client_id for c in sessions.snapshot()} == {"c0", "c1", "c2", "c4", "new-1"}
    sessions.seen("new-2")  # then c1
    assert {c.client_id for c in sessions.snapshot()} == {"c0", "c2", "c4", "new-1", "new-2"}
    sessions.seen("c0")  # c0 heard from again: c2 is now the least recently heard from
    sessions.seen("new-3")
    assert {c.client_id for c in sessions.snapshot()} == {"c0", "c4", "new-1", "new-2", "new-3"}

    flood = registry(clock, max_sessions=100)
    for i in range(10_000):  # a caller making up a client id per call
        flood.seen(f"made-up-{i}")
    kept = flood.snapshot()
    assert len(kept) == 100 and kept[-1].client_id == "made-up-9999"


def test_hostile_texts_are_cut_and_empty_ids_ignored():
    clock = FakeClock()
    sessions = registry(clock)
    for bad in ("", None):
        sessions.seen(bad)  # type: ignore[arg-type]
        sessions.settings(bad, kind=PRODUCER)  # type: ignore[arg-type]
        sessions.heartbeat(bad)  # type: ignore[arg-type]
        sessions.receive_started(bad)  # type: ignore[arg-type]
    assert sessions.snapshot() == []
    long_id = "x" * 10_000
    sessions.settings(long_id, kind="k" * 500, group="g" * 5000, topics=[f"t{i}" * 100 for i in range(1000)],
                      subscriptions={f"s{i}": "e" * 100_000 for i in range(1000)}, language="l" * 500,
                      version="v" * 500, address="a" * 5000)
    sessions.seen(long_id + "different tail")  # cut to the same id: the same client
    [c] = sessions.snapshot()
    assert c.client_id == "x" * MAX_ID_CHARS
    assert len(c.kind) == 64 and len(c.group) == 255 and len(c.language) == 64 and len(c.version) == 64
    assert len(c.address) == 128 and len(c.topics) == MAX_TOPICS and len(c.subscriptions) == MAX_TOPICS
    assert all(len(t) <= 255 for t in c.topics) and all(len(e) == 1024 for e in c.subscriptions.values())
    sessions.settings("odd", kind=PUSH_CONSUMER, subscriptions={"T": "", "": "x"}, topics=["", "T2"])
    odd = one(sessions, "odd")
    assert odd.subscriptions == {"T": "*"} and odd.topics == ("T2",)


def test_snapshots_are_copies():
    clock = FakeClock()
    sessions = registry(clock)
    sessions.settings("c", kind=PUSH_CONSUMER, group="G", subscriptions={"T": "*"})
    [c] = sessions.snapshot()
    c.subscriptions["U"] = "*"
    assert one(sessions, "c").subscriptions == {"T": "*"}


def test_settings_are_checked():
    with pytest.raises(ValueError):
        ClientSessions(FakeClock(), silent_after_ms=0)
    with pytest.raises(ValueError):
        ClientSessions(FakeClock(), max_sessions=0)


def test_many_threads_report_at_once():
    clock = FakeClock()
    sessions = registry(clock, max_sessions=50)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def client_calls(thread: int) -> None:
        try:
            start.wait()
            for n in range(2000):
                client_id = f"t{thread}-c{n % 40}"
                sessions.seen(client_id, address=f"10.0.0.{thread}:{n}")
                sessions.receive_started(client_id)
                if n % 7 == 0:
                    sessions.settings(client_id, kind=PUSH_CONSUMER, group=f"G{thread}", subscriptions={"T": "*"})
                sessions.receive_ended(client_id)
                if n % 50 == 0:
                    sessions.terminated(client_id)
                    clock.advance(SWEEP_EVERY_MS)
                    sessions.snapshot(group=f"G{thread}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client_calls, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    kept = sessions.snapshot()
    assert len(kept) <= 50 and len({c.client_id for c in kept}) == len(kept)
    assert all(c.in_flight_receives == 0 for c in kept)  # every start was matched by its end
    counts = sessions.counts()
    assert counts.online + counts.gone == len(kept)
