"""What the console is attached to, for the Cluster page and GET /api/clusters: the clusters,
their brokers with role, version and rates, and what could not be seen."""

from __future__ import annotations

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
