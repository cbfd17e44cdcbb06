"""The RocketMQ 5 clients connected through the gRPC front: GET /api/clients."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.deps import ClientSessionsDep
from app.params import GroupQuery, TopicQuery
from app.presenters import client_counts, client_rows, grpc_access
from app.routes import error_responses
from app.schemas import ClientsResponse
from app.security import READ

router = APIRouter(tags=["clients"])


@router.get("/api/clients", dependencies=[READ], response_model=ClientsResponse, responses=error_responses(400, 422))
def list_clients(request: Request, sessions: ClientSessionsDep,
                 group: Annotated[GroupQuery, Query(description="Only the consumers of this group.")] = None,
                 topic: Annotated[TopicQuery, Query(description="Only the clients producing to or subscribed "
                                                                "to this topic.")] = None) -> dict:
    """The clients known now, online ones first, then by group, kind and client id: each one's
    id, language and version, address, what it produces or subscribes to, when it was first and
    last heard from, its last heartbeat and the receives it has in flight. A client is `gone` once
    it shuts down or stays silent for a while (`MQLENS_CLIENT_SILENT_S`), and is dropped some time
    later (`MQLENS_CLIENT_FORGET_S`). Kept in memory: a restart starts an empty list, refilled
    as the clients call again. Clients of this REST API are not listed."""
    return {"ok": True, "clients": client_rows(sessions, group=group, topic=topic),
            "counts": client_counts(sessions), "grpc_endpoint": grpc_access(request.app.state.settings)["endpoint"]}
