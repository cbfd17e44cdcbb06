"""Plain-data views of store objects, shared by the command line and the REST API."""

from __future__ import annotations

import base64
import contextlib

from store.broker.pop import Received
from store.format.codec import StoredMessage
from store.format.topics import message_copy_kind


def message_dict(msg: StoredMessage, show_body: bool = True) -> dict:
    """Every field of a stored message; the body only when `show_body` (else body_masked)."""
    body = msg.body
    data = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "phys_offset": msg.phys_offset,
        "size": msg.size,
        "offset_msg_id": msg.offset_msg_id,
        "unique_key": msg.unique_key,
        "keys": msg.keys,
        "tags": msg.tags,
        "properties": dict(msg.properties),
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "born_host": str(msg.born_host),
        "store_host": str(msg.store_host),
        "reconsume_times": msg.reconsume_times,
        "sys_flag": msg.sys_flag,
        "flag": msg.flag,
        "body_crc": msg.body_crc,
        "compressed": msg.compressed,
        "copy": message_copy_kind(msg.topic, msg.properties),
        "body_masked": not show_body,
        "body_base64": base64.b64encode(body).decode("ascii") if show_body else None,
    }
    if show_body:
        with contextlib.suppress(UnicodeDecodeError):
            data["body_text"] = body.decode("utf-8")
    return data


def message_summary(msg: StoredMessage) -> dict:
    """One row of a result list: where the copy is, when, and what it carries, without the body."""
    return {
        "offset_msg_id": msg.offset_msg_id,
        "unique_key": msg.unique_key,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "store_timestamp": msg.store_timestamp,
        "born_timestamp": msg.born_timestamp,
        "tags": msg.tags,
        "keys": msg.keys,
        "reconsume_times": msg.reconsume_times,
        "size": msg.size,
        "copy": message_copy_kind(msg.topic, msg.properties),
    }


def received_dict(received: Received) -> dict:
    """A message handed out by receive, with what acknowledging it takes."""
    data = message_dict(received.message)
    data["receipt_handle"] = received.receipt_handle
    data["delivery_attempt"] = received.delivery_attempt
    data["invisible_until_ms"] = received.invisible_until_ms
    return data
