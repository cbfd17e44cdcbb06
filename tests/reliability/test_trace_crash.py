"""SIGKILL with sync flush and the lifecycle trace on: the trace events are packed into records
written at the group commit, and every put, pull or duplicate send that returned has its events
(stored, delivered, duplicate) after the restart, also when nothing else was written after it."""

from __future__ import annotations

import pytest

from store.broker.trace import TraceKind
from store.message_store import MessageStore
from tests.reliability.killing import run_and_kill
from tests.store.helpers import small_config

PRODUCER = """
import json, sys, threading
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

store = MessageStore.open(sys.argv[1], small_config(flush="sync", trace=True))
printing = threading.Lock()

def say(record):
    with printing:
        sys.stdout.write(json.dumps(record) + "\\n")
        sys.stdout.flush()

def produce(thread):
    for n in range(100_000):
        r = store.put(NewMessage(topic="Traced", body=b"x" * (1 + n % 300), keys=[f"t{thread}-{n}"]))
        say({"put": r.unique_key, "offset_msg_id": r.offset_msg_id})

def consume(queue_id):
    offset = 0
    while True:
        pulled = store.pull("G", "Traced", queue_id, offset, 8)
        offset = pulled.next_offset
        for m in pulled.messages:
            say({"delivered": m.unique_key, "offset_msg_id": m.offset_msg_id})

for t in range(12):
    threading.Thread(target=produce, args=(t,), daemon=True).start()
for q in range(2):
    threading.Thread(target=consume, args=(q,), daemon=True).start()
threading.Event().wait()
"""


# One change at a time, then nothing: no later group commit round writes what the last one left.
LAST_CHANGE = """
import json, sys
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

store = MessageStore.open(sys.argv[1], small_config(flush="sync", trace=True))
step = sys.argv[2]
r = store.put(NewMessage(topic="Traced", body=b"x", unique_key="LAST-1", queue_id=0))
if step == "pull":
    store.pull("G", "Traced", 0, 0, 8)
elif step == "duplicate":
    store.put(NewMessage(topic="Traced", body=b"x", unique_key="LAST-1", queue_id=0))
print(json.dumps({"put": r.unique_key, "offset_msg_id": r.offset_msg_id}), flush=True)
import threading
threading.Event().wait()
"""


@pytest.mark.parametrize("kill_after", [200, 1200])
def test_sigkill_keeps_the_trace_events_of_every_acknowledged_change(tmp_path, kill_after):
    store_dir = tmp_path / "store"
    acknowledged = run_and_kill([PRODUCER, str(store_dir)], kill_after)

    with MessageStore.open(store_dir, small_config(trace=True)) as store:
        assert store.abnormal_shutdown
        puts = [a for a in acknowledged if "put" in a]
        deliveries = [a for a in acknowledged if "delivered" in a]
        assert puts
        for ack in puts:
            events = store.timeline(ack["put"])
            assert [e.offset_msg_id for e in events if e.kind is TraceKind.STORED] == [ack["offset_msg_id"]]
        for ack in deliveries:
            events = store.timeline(ack["delivered"])
            assert any(e.kind is TraceKind.DELIVERED and e.group == "G" for e in events)
        report = store.check()
        assert report.ok, report.problems


@pytest.mark.parametrize(("step", "kinds"), [
    ("put", [TraceKind.STORED]),
    ("pull", [TraceKind.STORED, TraceKind.DELIVERED]),
    ("duplicate", [TraceKind.STORED, TraceKind.DUPLICATE]),
])
def test_sigkill_after_the_last_change_returned_keeps_its_events(tmp_path, step, kinds):
    store_dir = tmp_path / "store"
    [ack] = run_and_kill([LAST_CHANGE, str(store_dir), step], 1)
    with MessageStore.open(store_dir, small_config(trace=True)) as store:
        assert store.abnormal_shutdown
        events = store.timeline(ack["put"])
        assert [e.kind for e in events] == kinds
        assert events[0].offset_msg_id == ack["offset_msg_id"]
