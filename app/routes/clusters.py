"""What the console is attached to: GET /api/clusters."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import BackendDep
from app.routes import error_responses
from app.schemas import ClustersResponse
from app.security import READ
from app.services.cluster_view import cluster_state

router = APIRouter(tags=["clusters"])


@router.get("/api/clusters", dependencies=[READ], response_model=ClustersResponse, responses=error_responses())
def list_clusters(backend: BackendDep) -> dict:
    """The backend (`embedded`: this server's own store, one broker; `cluster`: a live RocketMQ
    cluster through its name servers), its clusters and their brokers: name, id and role, address,
    version, put and get rates (messages/s over the last 10 s), commit log size. A broker or name
    server that did not answer in time is named in `problems` with the reason, and `complete` is
    false; the answer never waits longer than MQLENS_CLUSTER_DEADLINE_MS."""
    return {"ok": True, **cluster_state(backend)}
