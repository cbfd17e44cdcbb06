"""The ring of retired receipt handles: why a handle is refused, for the newest `capacity` of
them, in memory taken once (issue #14: an ordered dict of them grew the server by megabytes
over a soak)."""

from __future__ import annotations

import tracemalloc

import pytest

from store.broker.retired_handles import RetiredHandles


def test_says_why_a_remembered_handle_was_retired_and_nothing_for_another():
    retired = RetiredHandles(4)
    retired.add("h1", "acknowledged")
    retired.add("h2", "nacked")
    assert retired.why("h1") == "acknowledged"
    assert retired.why("h2") == "nacked"
    assert retired.why("h3") is None


def test_the_oldest_are_forgotten_once_the_ring_is_full():
    retired = RetiredHandles(3)
    for n in range(5):
        retired.add(f"h{n}", f"reason {n}")
    assert [retired.why(f"h{n}") for n in range(5)] == [None, None, "reason 2", "reason 3", "reason 4"]


def test_a_handle_retired_twice_gives_its_latest_reason_across_the_wrap():
    retired = RetiredHandles(3)
    retired.add("h", "expired")
    retired.add("x", "x")
    retired.add("y", "y")
    retired.add("h", "replaced")  # lands in slot 0, while slot 0 held the first "h": overwritten
    retired.add("z", "z")
    assert retired.why("h") == "replaced"
    retired = RetiredHandles(3)
    retired.add("a", "a")
    retired.add("h", "first")  # slot 1
    retired.add("b", "b")
    retired.add("h", "second")  # slot 0, after the wrap: newer although its slot is lower
    assert retired.why("h") == "second"


def test_memory_does_not_grow_with_handles_retired():
    retired = RetiredHandles(10_000)
    reason = "receipt handle no longer valid: the message was already acknowledged"
    for n in range(10_000):
        retired.add(f"handle-{n}", reason)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for n in range(10_000, 110_000):
            retired.add(f"handle-{n}", reason)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096
    assert retired.why("handle-109999") == reason
    assert retired.why("handle-99999") is None


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        RetiredHandles(0)
