"""Where a transactional message stands, from what the broker stored: its half message in
RMQ_SYS_TRANS_HALF_TOPIC (re-put there each time the broker checks with the producer), an op
record in RMQ_SYS_TRANS_OP_HALF_TOPIC for each half message settled (its body is the half
message's queue offset; newer brokers may list several, comma separated), for a commit the
copy put to the real topic, and for a half message checked too often without an answer its copy
in TRANS_CHECK_MAX_TIME_TOPIC."""

from __future__ import annotations

from dataclasses import dataclass

from app.services import lookup
from backend.embedded import MAX_TRANSACTION_ENDS_READ
from store.format import topics
from store.format.codec import TRANSACTION_COMMIT, StoredMessage

HALF_TOPIC = topics.TRANS_HALF_TOPIC
CHECK_TIMES = topics.TRANSACTION_CHECK_TIMES


@dataclass(frozen=True)
class TransactionStanding:
    state: str  # "committed", "rolled_back", "discarded" or "waiting"
    detail: str
    half_offset_msg_id: str


def transaction_standing(source: lookup.Source, copies: list[StoredMessage]) -> TransactionStanding | None:
    """None for a message that was not sent in a transaction, or for one neither committed nor
    discarded where the backend cannot read the transactions' ends (a live cluster)."""
    halves = sorted((m for m in copies if m.topic == HALF_TOPIC), key=lambda m: m.queue_offset)
    if not halves:
        return None
    newest = halves[-1]
    checks = newest.properties.get(CHECK_TIMES)
    asked = f" after the broker asked the producer {checks} time{'s' if checks != '1' else ''}" if checks else ""
    committed = [m for m in copies if m.topic != HALF_TOPIC and m.transaction_type == TRANSACTION_COMMIT]
    if committed:
        delivered = [m for m in committed if not topics.holds_for_later(m.topic)]
        if delivered:
            return TransactionStanding("committed", f"committed{asked}: delivered to {delivered[0].topic}",
                                       newest.offset_msg_id)
        real_topic = committed[0].properties.get(topics.REAL_TOPIC, "?")
        return TransactionStanding("committed", f"committed{asked}: waits in {committed[0].topic} for its delivery "
                                   f"time, then goes to {real_topic}", newest.offset_msg_id)
    discarded = [m for m in copies if m.topic == topics.TRANS_CHECK_MAX_TIME_TOPIC]
    if discarded:
        times = discarded[-1].properties.get(CHECK_TIMES) or checks or "0"
        return TransactionStanding("discarded", f"discarded after the broker asked the producer {times} "
                                   f"time{'s' if times != '1' else ''} without an answer: never delivered (moved to "
                                   f"{discarded[-1].topic})", newest.offset_msg_id)
    ends = lookup.backend_of(source).settled_half_offsets()
    if ends is None:
        return None
    settled, complete = ends
    if newest.queue_offset in settled:
        return TransactionStanding("rolled_back", f"rolled back{asked}: never delivered", newest.offset_msg_id)
    if not complete:
        return TransactionStanding("waiting", f"no end found among the newest {MAX_TRANSACTION_ENDS_READ:,} "
                                   "transaction ends: older ends were not read", newest.offset_msg_id)
    return TransactionStanding("waiting", f"waiting for the producer's check{asked}: neither committed nor "
                               "rolled back yet", newest.offset_msg_id)

