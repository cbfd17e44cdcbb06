"""The hops RocketMQ clients' own message trace tells (RMQ_SYS_TRACE_TOPIC, written with
enableMsgTrace): who sent the message, each delivery to each consumer group with the client that
took it, how long consuming took and how it ended, and a transaction's end. A broadcasting
group leaves no copy and no broker offset, so it shows up only here.

The copies a broker wrote tell some of the same story without its details: a failed attempt
the trace reports is not told again from its retry copy."""

from __future__ import annotations

from app.services.timeline_hops import Hop
from store.format.client_trace import ClientTraceContext, TraceType, TransactionState

TRANSACTION_ENDS = {TransactionState.COMMIT: "committed", TransactionState.ROLLBACK: "rolled back",
                    TransactionState.UNKNOWN: "left unknown (the broker asks the producer again)"}


def _attempt(context: ClientTraceContext) -> int | None:
    return None if context.retry_times is None else context.retry_times + 1


def _client(context: ClientTraceContext) -> str:
    host = context.record.client_host if context.record is not None else None
    return f" at {host}" if host else ""


def client_hops(contexts: list[ClientTraceContext]) -> list[Hop]:
    """The contexts' hops, a delivery's outcome numbered with the attempt its SubBefore gave."""
    attempts = {(c.group, c.request_id): _attempt(c) for c in contexts if c.type == TraceType.SUB_BEFORE}
    hops = []
    for c in contexts:
        time_ms = c.timestamp if c.timestamp is not None else (c.record.store_timestamp if c.record else 0)
        if c.type == TraceType.PUB:
            outcome = "sent" if c.success else "the send failed"
            hops.append(Hop("sent", time_ms, f"{outcome}: producer group {c.group}{_client(c)}, "
                                 f"{c.cost_time} ms to the broker's answer", False, topic=c.topic,
                                 offset_msg_id=c.offset_msg_id if len(c.msg_ids) == 1 else None))
        elif c.type == TraceType.SUB_BEFORE:
            attempt = _attempt(c)
            hops.append(Hop("delivered", time_ms, f"attempt {attempt} handed to {c.group}{_client(c)}",
                                 False, group=c.group, attempt=attempt, reconsume_times=c.retry_times))
        elif c.type == TraceType.SUB_AFTER:
            attempt = attempts.get((c.group, c.request_id))
            if c.success:
                hops.append(Hop("consumed", time_ms, f"{c.group} consumed attempt {attempt} in "
                                     f"{c.cost_time} ms", False, group=c.group, attempt=attempt))
            else:
                why = f"the consumer answered {c.consume_result or 'a failure'} after {c.cost_time} ms"
                hops.append(Hop("failed", time_ms, f"attempt {attempt} failed at {c.group}: {why}", False,
                                     group=c.group, attempt=attempt, reason=why))
        elif c.type == TraceType.END_TRANSACTION:
            how = TRANSACTION_ENDS.get(c.transaction_state, str(c.transaction_state))
            check = " answering the broker's check" if c.from_transaction_check else ""
            hops.append(Hop("transaction", time_ms, f"transaction {how} by {c.group}{check}", False,
                                 reason=how))
    return hops


def merge_hops(derived: list[Hop], traced: list[Hop]) -> list[Hop]:
    """The copies' hops and the client trace's, in time order; a failure the trace reports
    replaces the one a retry or dead-letter copy implies for the same group and attempt."""
    reported = {(h.group, h.attempt) for h in traced if h.kind == "failed"}
    kept = [h for h in derived if not (h.kind == "failed" and (h.group, h.attempt) in reported)]
    return sorted(kept + traced, key=lambda h: h.time_ms)
