"""SIGKILL while many threads put single messages with sync flush (group commit): no
acknowledged message is lost, and each is found by offset id, key and queue offset."""

from __future__ import annotations

import pytest

from store.message_store import MessageStore
from tests.reliability.killing import run_and_kill
from tests.store.helpers import small_config

PRODUCER = """
import json, sys, threading
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

store = MessageStore.open(sys.argv[1], small_config(flush="sync"))
printing = threading.Lock()

def produce(thread):
    for n in range(100_000):
        key = f"t{thread}-{n}"
        r = store.put(NewMessage(topic=f"Sync{thread % 3}", body=key.encode() * (1 + n % 30), keys=[key]))
        line = json.dumps({"key": key, "topic": r.topic, "queue_id": r.queue_id, "queue_offset": r.queue_offset,
                           "offset_msg_id": r.offset_msg_id, "unique_key": r.unique_key})
        with printing:
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()

for t in range(16):
    threading.Thread(target=produce, args=(t,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("kill_after", [150, 900])
def test_sigkill_during_threaded_sync_puts_loses_no_acknowledged_message(tmp_path, kill_after):
    store_dir = tmp_path / "store"
    acknowledged = run_and_kill([PRODUCER, str(store_dir)], kill_after)

    with MessageStore.open(store_dir, small_config()) as store:
        assert store.abnormal_shutdown
        for ack in acknowledged:
            msg = store.get_by_offset_id(ack["offset_msg_id"])
            assert msg.keys == [ack["key"]] and msg.unique_key == ack["unique_key"]
            [by_key] = store.query_by_key(ack["topic"], ack["key"]).messages
            assert by_key.phys_offset == msg.phys_offset
            at_offset = store.get_by_queue_offset(ack["topic"], ack["queue_id"], ack["queue_offset"])
            assert at_offset.phys_offset == msg.phys_offset
        report = store.check()
        assert report.ok, report.problems
