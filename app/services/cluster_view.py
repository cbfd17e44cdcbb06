"""What the console is attached to, for the Cluster page and GET /api/clusters: the clusters,
their brokers with role, version and rates, and what could not be seen; and one broker's settings."""

from __future__ import annotations

from app.services.errors import NotFoundError
from backend.protocol import Backend, BackendUnavailable, BackendView, BrokerView


def _broker(broker: BrokerView) -> dict:
    return {"cluster": broker.cluster, "name": broker.name, "broker_id": broker.broker_id,
            "role": broker.role, "address": broker.address, "answered": broker.answered,
            "version": broker.version, "put_tps": broker.put_tps, "get_tps": broker.get_tps,
            "commitlog_max_offset": broker.commitlog_max_offset, "earliest_message_ms": broker.earliest_message_ms,
            "error": broker.error}


def cluster_state(backend: Backend) -> dict:
    """The backend's view as plain data; a cluster that cannot be reached is a view with problems."""
    try:
        view = backend.describe()
    except BackendUnavailable as exc:
        view = BackendView(kind=backend.kind, problems=[str(exc)])
    return {"backend": view.kind, "name_servers": view.name_servers, "complete": view.complete,
            "problems": view.problems,
            "clusters": [{"name": c.name, "brokers": [_broker(b) for b in c.brokers]} for c in view.clusters]}


def broker_settings(backend: Backend, name: str, broker_id: int) -> dict:
    """Every setting of one broker as plain data (`complete` false and `problems` when it did not answer)."""
    found = backend.broker_settings(name, broker_id)
    if found is None:
        raise NotFoundError(f"no broker {name} with id {broker_id}: the Cluster page lists the brokers")
    return {"name": found.name, "broker_id": found.broker_id, "address": found.address,
            "settings": found.settings, "complete": not found.problems, "problems": found.problems}
