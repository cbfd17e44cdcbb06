"""Console page: the cluster the console is attached to (/cluster): brokers, roles, versions and
rates, or the embedded store as its one broker; re-fetched every few seconds by htmx, so a name
server or broker that comes back is shown again by itself."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import BackendDep
from app.pages import RendererDep
from app.params import BrokerId, BrokerName
from app.security import READ
from app.services.cluster_view import broker_settings, cluster_state

router = APIRouter(include_in_schema=False)

REFRESH_SECONDS = 5


@router.get("/cluster", dependencies=[READ])
def cluster_page(request: Request, backend: BackendDep, renderer: RendererDep):
    data = {"nav": "cluster", "now_ms": request.app.state.clock.now_ms(), "refresh_seconds": REFRESH_SECONDS,
            **cluster_state(backend)}
    return renderer.page(request, "cluster/cluster.html", data, fragment="cluster")


@router.get("/cluster/brokers/{name}/{broker_id}", dependencies=[READ])
def broker_page(name: BrokerName, broker_id: BrokerId, request: Request, backend: BackendDep, renderer: RendererDep):
    data = {"nav": "cluster", "now_ms": request.app.state.clock.now_ms(), **broker_settings(backend, name, broker_id)}
    return renderer.page(request, "cluster/broker.html", data)
