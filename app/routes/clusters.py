"""What the console is attached to: GET /api/clusters, and one broker's settings."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import BackendDep
from app.params import BrokerId, BrokerName
from app.routes import error_responses
from app.schemas import BrokerSettingsResponse, ClustersResponse
from app.security import READ
from app.services.cluster_view import broker_settings, cluster_state

router = APIRouter(tags=["clusters"])


@router.get("/api/clusters", dependencies=[READ], response_model=ClustersResponse, responses=error_responses())
def list_clusters(backend: BackendDep) -> dict:
    """The backend (`embedded`: this server's own store, one broker; `cluster`: a live RocketMQ
    cluster through its name servers), its clusters and their brokers: name, id and role, address,
    version, put and get rates (messages/s over the last 10 s), commit log size. A broker or name
    server that did not answer in time is named in `problems` with the reason, and `complete` is
    false; the answer never waits longer than MQLENS_CLUSTER_DEADLINE_MS."""
    return {"ok": True, **cluster_state(backend)}


@router.get("/api/clusters/brokers/{name}/{broker_id}/settings", dependencies=[READ],
            response_model=BrokerSettingsResponse, responses=error_responses(404, 422))
def get_broker_settings(name: BrokerName, broker_id: BrokerId, backend: BackendDep) -> dict:
    """Every setting of one broker (`broker_id` 0: its master), as `mqadmin getBrokerConfig` prints
    them; on the embedded store, the store's own configuration (broker `mqlens`, id 0). A broker that
    does not answer gives no settings, `complete: false` and the reason."""
    return {"ok": True, **broker_settings(backend, name, broker_id)}
