"""Where a message stands for each consumer group, from its hops and what the store knows of the
groups' progress (consumer offsets and receive state): consumed, retry pending (and when),
dead-lettered, pending, or unknown when nothing in the store can tell."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from app.services.timeline_hops import Hop
from backend.protocol import InFlight, RecordedProgress
from store.format import topics

VerdictState = Literal["consumed", "retry_pending", "dead_lettered", "pending", "unknown"]

COPY_HOPS = ("produced", "released", "resent")  # a copy in a plain topic: every group may consume it


@dataclass(frozen=True)
class Verdict:
    group: str
    state: VerdictState
    detail: str
    next_attempt_ms: int | None = None
    attempts: int | None = None  # delivery attempts known so far

    def to_json(self) -> dict:
        return asdict(self)


class ConsumerProgress:
    """What the backend records of the groups: committed consumer offsets and receive state."""

    def __init__(self, recorded: RecordedProgress):
        self._offsets = recorded.offsets
        self._receive = recorded.receive

    @property
    def any_recorded(self) -> bool:
        return bool(self._offsets or self._receive)

    def groups_on(self, topic: str) -> set[str]:
        found = {group for offsets_topic, group in self._offsets if offsets_topic == topic}
        return found | {group for group, receive_topic in self._receive if receive_topic == topic}

    def offset(self, topic: str, group: str, queue_id: int) -> int | None:
        return self._offsets.get((topic, group), {}).get(queue_id)

    def handed_out_past(self, topic: str, group: str, queue_id: int, queue_offset: int) -> bool:
        """Receive handed the message out to the group and no longer tracks it: it was acknowledged."""
        state = self._receive.get((group, topic))
        return (state is not None and state.cursors.get(queue_id, 0) > queue_offset
                and (queue_id, queue_offset) not in state.in_flight)

    def in_flight(self, topic: str, group: str, queue_id: int, queue_offset: int) -> InFlight | None:
        state = self._receive.get((group, topic))
        return state.in_flight.get((queue_id, queue_offset)) if state is not None else None


@dataclass
class _Standing:
    state: VerdictState
    detail: str
    copy: Hop | None = None  # the copy the group has yet to consume, when one waits for it
    next_attempt_ms: int | None = None
    attempts: int | None = None


def _after_hop(standing: _Standing, hop: Hop) -> _Standing:
    attempts = max(standing.attempts or 0, hop.attempt or 0) or None
    if hop.kind == "delivered":
        return _Standing("pending", f"attempt {hop.attempt} delivered, not acknowledged", hop, None, attempts)
    if hop.kind == "consumed":
        return _Standing("consumed", hop.detail, None, None, attempts)
    if hop.kind == "failed":
        if hop.due_ms is not None:
            return _Standing("retry_pending", hop.detail, None, hop.due_ms, attempts)
        return _Standing("pending", hop.detail, None, None, attempts)
    if hop.kind == "retry_scheduled":
        return _Standing("retry_pending", hop.detail, None, hop.due_ms, attempts)
    if hop.kind == "redelivered":
        return _Standing("pending", hop.detail, hop, None, max(standing.attempts or 0, (hop.attempt or 1) - 1) or None)
    if hop.kind == "dead_lettered":
        return _Standing("dead_lettered", hop.detail, None, None, attempts)
    return standing


def _settle(group: str, standing: _Standing, progress: ConsumerProgress, traced: bool) -> Verdict:
    """A group left waiting for a copy: consumed when its offset or receive state says so."""
    copy = standing.copy
    if standing.state != "pending" or copy is None or copy.topic is None:
        return Verdict(group, standing.state, standing.detail, standing.next_attempt_ms, standing.attempts)
    topic, queue_id, queue_offset = copy.topic, copy.queue_id or 0, copy.queue_offset or 0
    where = f"{topic}:{queue_id}:{queue_offset}"
    flight = progress.in_flight(topic, group, queue_id, queue_offset)
    if flight is not None:
        if flight.handed_out:
            return Verdict(group, "pending", f"attempt {flight.attempt} of {where} is being consumed "
                           "(invisible until its next attempt time)", flight.due_ms, flight.attempt)
        why = f": {flight.last_failure}" if flight.last_failure else ""
        return Verdict(group, "retry_pending", f"attempt {flight.attempt} of {where} failed{why}",
                       flight.due_ms, flight.attempt)
    offset = progress.offset(topic, group, queue_id)
    if offset is not None and offset > queue_offset:
        return Verdict(group, "consumed", f"the group is past {where}: its consumer offset of {topic}:{queue_id} "
                       f"is {offset}", None, standing.attempts)
    if progress.handed_out_past(topic, group, queue_id, queue_offset):
        return Verdict(group, "consumed", f"the group is past {where}: receive handed it out and no longer "
                       "tracks it", None, standing.attempts)
    if offset is not None:
        return Verdict(group, "pending", f"{where} not consumed yet: the consumer offset of {topic}:{queue_id} "
                       f"is {offset}", None, standing.attempts)
    if traced:
        return Verdict(group, "pending", f"{standing.detail}; {where} not consumed yet", None, standing.attempts)
    return Verdict(group, "unknown", f"{standing.detail}. The store has no consumer offset of {group} for "
                   f"{topic}:{queue_id} and no trace events, so whether {group} consumed {where} is unknown",
                   None, standing.attempts)


def retry_topic_owner(topic: str, groups: set[str], message_topics: set[str]) -> str:
    """The group a retry topic belongs to: %RETRY%G (push) or %RETRY%G_T (pop, T a topic of the
    message), a group already known first."""
    name = topic.removeprefix(topics.RETRY_PREFIX)
    candidates = {name} | {name[:-len(t) - 1] for t in message_topics if name.endswith(f"_{t}") and name != f"_{t}"}
    known = sorted(candidates & groups)
    return known[0] if known else min(candidates, key=len)


def _copy_for(hop: Hop, groups: set[str], message_topics: set[str]) -> set[str]:
    """The groups a copy is for: a retry topic's copy (a dead letter resent to it) for its group
    only, a copy in a plain topic for every group."""
    if hop.group is not None:
        return {hop.group}
    if hop.topic and topics.is_retry_topic(hop.topic):
        return {retry_topic_owner(hop.topic, groups, message_topics)}
    return groups


def verdicts(hops: list[Hop], progress: ConsumerProgress, traced: bool) -> list[Verdict]:
    """Each group's standing after the hops (in time order), groups named by the hops or with
    recorded progress on a topic the message was put to, by group name."""
    copy_topics = {hop.topic for hop in hops if hop.kind in COPY_HOPS and hop.topic}
    message_topics = {t for t in copy_topics if not topics.is_retry_topic(t)}
    groups = {hop.group for hop in hops if hop.group} | {g for t in message_topics for g in progress.groups_on(t)}
    copies_for = {id(hop): _copy_for(hop, groups, message_topics) for hop in hops if hop.kind in COPY_HOPS}
    groups |= {g for owners in copies_for.values() for g in owners}
    standing = {group: _Standing("pending", "not delivered yet") for group in groups}
    for hop in hops:
        if hop.kind in COPY_HOPS:
            for group in copies_for[id(hop)]:
                standing[group] = _Standing("pending", f"waiting in {hop.topic}", hop, None, standing[group].attempts)
        elif hop.group is not None:
            standing[hop.group] = _after_hop(standing[hop.group], hop)
        elif hop.kind == "scheduled":
            for group in groups:
                standing[group] = _Standing("pending", f"delayed in {hop.topic} until its due time", None,
                                            hop.due_ms, standing[group].attempts)
    return [_settle(group, standing[group], progress, traced) for group in sorted(groups)]
