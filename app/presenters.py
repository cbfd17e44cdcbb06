"""Plain-data views of store objects and of the clients the gRPC front reports, shared by the
command line, the REST API and the pages."""

from __future__ import annotations

import base64
from dataclasses import asdict

from app.config import Settings
from app.masking import Body, show_all
from app.services.client_sessions import ClientSession, ClientSessions
from store.broker.pop import Received
from store.format.codec import StoredMessage
from store.format.topics import message_copy_kind


def body_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def message_dict(msg: StoredMessage) -> dict:
    """Every field of a stored message, its body wrapped (app.masking): body_masked, body_base64
    and body_text (null when the body is not UTF-8) as the caller may see them."""
    body, owner = msg.body, msg.offset_msg_id
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
        "body_masked": Body(owner, False, masked=True),
        "body_base64": Body(owner, base64.b64encode(body).decode("ascii")),
        "body_text": Body(owner, body_text(body)),
    }
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
    """A message handed out by receive, with what acknowledging it takes: delivered to its
    consumer, the body is the point."""
    data = show_all(message_dict(received.message))
    data["receipt_handle"] = received.receipt_handle
    data["delivery_attempt"] = received.delivery_attempt
    data["invisible_until_ms"] = received.invisible_until_ms
    return data


WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def grpc_access(settings: Settings) -> dict:
    """Where a RocketMQ 5 client connects: the endpoint to give it, or none when the front is off."""
    if not settings.grpc_port:
        return {"on": False, "endpoint": None, "beyond_loopback": False}
    host = "127.0.0.1" if settings.host in WILDCARD_HOSTS else settings.host
    if ":" in host:
        host = f"[{host}]"
    return {"on": True, "endpoint": f"{host}:{settings.grpc_port}",
            "beyond_loopback": settings.listens_beyond_loopback()}


def client_row(client: ClientSession) -> dict:
    return {**asdict(client), "topics": list(client.topics)}


def client_rows(sessions: ClientSessions, *, group: str | None = None, topic: str | None = None) -> list[dict]:
    return [client_row(c) for c in sessions.snapshot(group=group, topic=topic)]


def client_counts(sessions: ClientSessions) -> dict:
    counts = sessions.counts()
    return {**asdict(counts), "online": counts.online}


def content_search_dict(view) -> dict:
    """A content search (app.services.content_search.SearchView) with each body snippet wrapped."""
    data = asdict(view)
    del data["owner"]
    data.update(url=f"/content-search/{view.id}", progress=view.progress, mb_per_s=round(view.mb_per_s, 1),
                active=view.active)
    hits = []
    for hit in view.hits:
        shown = {**hit, "message_url": f"/messages/{hit['offset_msg_id']}", "snippet_masked": False}
        if hit["where"] == "body":
            owner = hit["offset_msg_id"]
            shown.update(snippet=Body(owner, hit["snippet"]), snippet_at=Body(owner, hit["snippet_at"]),
                         snippet_masked=Body(owner, False, masked=True))
        hits.append(shown)
    data["hits"] = hits
    return data
