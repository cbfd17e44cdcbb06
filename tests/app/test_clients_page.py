"""The RocketMQ 5 clients in the console: the Clients page (its JSON twin and its live table
fragment), the dashboard's count, each group's consumers on its page, and GET /api/clients with
its filters and roles; empty states that say how to connect a client."""

from __future__ import annotations

import pytest

from app.presenters import grpc_access
from app.services.client_sessions import PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER
from tests.app.conftest import assert_error, bearer, make_settings, running
from tests.live_server import free_port


@pytest.fixture
async def api_with_front(data_dir, clock):
    """The app with its gRPC front listening (on a free port), so pages show its endpoint."""
    async with running(make_settings(data_dir, grpc_port=free_port()), clock) as r:
        yield r

pytestmark = pytest.mark.anyio

HTML = {"Accept": "text/html"}
PRODUCER_ID = "app-host@4242@1@2k4xq9ab"
PUSH_ID = "worker-1@77@1@2k4xqa01"
SIMPLE_ID = "worker-2@78@1@2k4xqa02"
HOSTILE_ID = '<script>alert("id")</script>@1@1@1'


def connect_clients(api, clock) -> None:
    """What the gRPC front reports for a producer, two consumers of GID_orders and one gone client."""
    sessions = api.app.state.client_sessions
    sessions.settings(PRODUCER_ID, kind=PRODUCER, topics=["Orders"], language="JAVA", version="5.0.7",
                      address="10.1.0.5:40100")
    sessions.settings(PUSH_ID, kind=PUSH_CONSUMER, group="GID_orders", subscriptions={"Orders": "TagA||TagB"},
                      language="PYTHON", version="5.1.2", address="10.1.0.6:40200")
    sessions.settings(SIMPLE_ID, kind=SIMPLE_CONSUMER, group="GID_orders", subscriptions={"Orders": "*"},
                      language="GOLANG", version="5.1.0", address="10.1.0.7:40300")
    sessions.settings(HOSTILE_ID, kind=PUSH_CONSUMER, group="GID_other", subscriptions={"Payments": "<b>x</b>"})
    clock.advance(3000)
    sessions.heartbeat(PUSH_ID, PUSH_CONSUMER, "GID_orders")
    sessions.receive_started(PUSH_ID)
    sessions.terminated(HOSTILE_ID)


async def html(api, url: str, **headers) -> str:
    r = await api.client.get(url, headers={**HTML, **headers})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    return r.text


async def twin(api, url: str) -> dict:
    r = await api.client.get(url)
    assert r.status_code == 200, r.text
    return r.json()


async def test_the_clients_page_and_its_twin_show_the_same_clients(api, clock):
    connect_clients(api, clock)
    page = await html(api, "/clients")
    data = await twin(api, "/clients.json")
    assert data["ok"] is True and data["nav"] == "clients"
    ids = [c["client_id"] for c in data["clients"]]
    assert ids[-1] == HOSTILE_ID and set(ids) == {PRODUCER_ID, PUSH_ID, SIMPLE_ID, HOSTILE_ID}
    assert data["counts"] == {"producers": 1, "consumers": 2, "others": 0, "gone": 1, "online": 3}
    push = next(c for c in data["clients"] if c["client_id"] == PUSH_ID)
    assert push["subscriptions"] == {"Orders": "TagA||TagB"} and push["in_flight_receives"] == 1
    assert (push["language"], push["version"], push["address"], push["state"]) == (
        "PYTHON", "5.1.2", "10.1.0.6:40200", "online")
    assert push["last_heartbeat_ms"] == clock.now_ms() and push["first_seen_ms"] == clock.now_ms() - 3000
    producer = next(c for c in data["clients"] if c["client_id"] == PRODUCER_ID)
    assert producer["topics"] == ["Orders"] and producer["group"] is None and producer["last_heartbeat_ms"] is None

    for client_id in (PRODUCER_ID, PUSH_ID, SIMPLE_ID):
        assert f'data-client="{client_id}"' in page
    assert "TagA||TagB" in page and "5.1.2" in page and "10.1.0.6:40200" in page and "3s ago" in page
    assert 'href="/groups/GID_orders"' in page and 'href="/topics/Orders"' in page
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert 'data-state="gone"' in page and "terminated" in page
    assert 'href="/clients" aria-current="page"' in page
    assert '1 producer, 2 consumers' in page


async def test_the_table_is_refreshed_as_a_fragment_and_keeps_the_filter(api, clock):
    connect_clients(api, clock)
    page = await html(api, "/clients?group=GID_orders")
    assert 'hx-get="/clients?group=GID_orders" hx-trigger="every 5s"' in page
    for target in ("clients", None):
        headers = {"HX-Request": "true", **({"HX-Target": target} if target else {})}
        fragment = await html(api, "/clients?group=GID_orders", **headers)
        assert "<html" not in fragment and "<h1>" not in fragment and 'data-testid="clients"' in fragment
        assert f'data-client="{PUSH_ID}"' in fragment and f'data-client="{PRODUCER_ID}"' not in fragment


async def test_filters_by_group_and_topic(api, clock):
    connect_clients(api, clock)
    by_group = await twin(api, "/clients.json?group=GID_orders")
    assert [c["client_id"] for c in by_group["clients"]] == [PUSH_ID, SIMPLE_ID]  # by kind, then id
    by_topic = await twin(api, "/clients.json?topic=Orders")
    assert {c["client_id"] for c in by_topic["clients"]} == {PRODUCER_ID, PUSH_ID, SIMPLE_ID}
    both = await twin(api, "/clients.json?group=GID_other&topic=Payments")
    assert [c["client_id"] for c in both["clients"]] == [HOSTILE_ID]
    blank = await twin(api, "/clients.json?group=+&topic=")
    assert blank["filtered"] is False and len(blank["clients"]) == 4
    none = await html(api, "/clients?group=GID_nobody&topic=Nothing")
    assert 'data-testid="no-clients"' in none and "GID_nobody" in none and "Nothing" in none
    assert 'href="/clients">Show every client' in none
    r = await api.client.get("/clients", params={"group": "g" * 256}, headers=HTML)
    assert r.status_code == 422 and "Traceback" not in r.text


async def test_the_empty_page_says_how_to_connect_a_client(api_with_front):
    api = api_with_front
    endpoint = f"127.0.0.1:{api.settings.grpc_port}"
    page = await html(api, "/clients")
    assert 'data-testid="no-clients"' in page and "No RocketMQ 5 client has connected" in page
    assert f'data-testid="grpc-endpoint">{endpoint}<' in page and f'setEndpoints("{endpoint}")' in page
    assert f'ClientConfiguration("{endpoint}", Credentials())' in page
    data = await twin(api, "/clients.json")
    assert data["clients"] == [] and data["grpc"]["endpoint"] == endpoint
    assert (await twin(api, "/api/clients"))["grpc_endpoint"] == endpoint


async def test_with_the_grpc_front_off_the_page_says_how_to_turn_it_on(data_dir, clock):
    async with running(make_settings(data_dir, grpc_port=0), clock) as api:
        page = await html(api, "/clients")
        assert 'data-testid="grpc-off"' in page and "MQLENS_GRPC_PORT" in page
        assert (await twin(api, "/api/clients"))["grpc_endpoint"] is None
        assert (await twin(api, "/clients.json"))["grpc"] == {"on": False, "endpoint": None,
                                                              "beyond_loopback": False}
        r = await api.client.put("/api/groups/GID_quiet", json={"max_reconsume_times": 3})
        assert r.status_code == 200, r.text
        assert "the gRPC front is off" in await html(api, "/groups/GID_quiet")


@pytest.mark.parametrize(("host", "port", "endpoint", "beyond"), [
    ("127.0.0.1", 8081, "127.0.0.1:8081", False),
    ("0.0.0.0", 9876, "127.0.0.1:9876", True),
    ("::", 8081, "127.0.0.1:8081", True),
    ("::1", 8081, "[::1]:8081", False),
    ("10.2.3.4", 18081, "10.2.3.4:18081", True),
])
def test_the_endpoint_shown_follows_the_settings(tmp_path, host, port, endpoint, beyond):
    assert grpc_access(make_settings(tmp_path, host=host, grpc_port=port)) == {
        "on": True, "endpoint": endpoint, "beyond_loopback": beyond}


async def test_the_dashboard_counts_the_clients_online(api, clock):
    before = await twin(api, "/index.json")
    assert before["clients"] == {"producers": 0, "consumers": 0, "others": 0, "gone": 0, "online": 0}
    connect_clients(api, clock)
    api.app.state.client_sessions.seen("unknown-yet@1@1@1")
    after = await twin(api, "/dashboard.json")
    assert after["clients"] == {"producers": 1, "consumers": 2, "others": 1, "gone": 1, "online": 4}
    cards = await html(api, "/dashboard", **{"HX-Request": "true", "HX-Target": "cards"})
    assert 'data-testid="clients-online"><a href="/clients">1 · 2</a>' in cards and "(1 gone)" in cards


async def test_a_groups_page_lists_its_consumers(api_with_front, clock):
    api = api_with_front
    endpoint = f"127.0.0.1:{api.settings.grpc_port}"
    connect_clients(api, clock)
    data = await twin(api, "/groups/GID_orders.json")
    assert {c["client_id"] for c in data["clients"]} == {PUSH_ID, SIMPLE_ID}
    assert data["grpc"]["endpoint"] == endpoint
    page = await html(api, "/groups/GID_orders")
    assert f'data-client="{PUSH_ID}"' in page and f'data-client="{PRODUCER_ID}"' not in page
    assert "TagA||TagB" in page and "5.1.2" in page and "10.1.0.6:40200" in page
    fragment = await html(api, "/groups/GID_orders", **{"HX-Request": "true", "HX-Target": "consumers"})
    assert "<h1>" not in fragment and f'data-client="{SIMPLE_ID}"' in fragment

    # a group the store knows nothing of has a page while clients of it are connected
    assert_error(await api.client.get("/groups/GID_unknown.json"), 404, "no group GID_unknown")
    api.app.state.client_sessions.seen("fresh@1@1@1")
    api.app.state.client_sessions.heartbeat("fresh@1@1@1", PUSH_CONSUMER, "GID_unknown")
    assert [c["client_id"] for c in (await twin(api, "/groups/GID_unknown.json"))["clients"]] == ["fresh@1@1@1"]

    r = await api.client.put("/api/groups/GID_quiet", json={"max_reconsume_times": 3})
    assert r.status_code == 200, r.text
    empty = await html(api, "/groups/GID_quiet")
    assert 'data-testid="no-consumers"' in empty and endpoint in empty and 'href="/clients"' in empty
    assert (await twin(api, "/groups/GID_quiet.json"))["clients"] == []


async def test_the_rest_api_lists_and_filters_the_clients(api, clock):
    connect_clients(api, clock)
    data = await twin(api, "/api/clients")
    assert len(data["clients"]) == 4 and data["counts"]["online"] == 3
    assert data["clients"][-1]["state"] == "gone" and data["clients"][-1]["gone_why"] == "terminated"
    consumers = await twin(api, "/api/clients?group=GID_orders")
    assert {c["client_id"] for c in consumers["clients"]} == {PUSH_ID, SIMPLE_ID}
    assert consumers["counts"]["online"] == 3  # the counts are of every client
    on_topic = await twin(api, "/api/clients?topic=Payments")
    assert [c["client_id"] for c in on_topic["clients"]] == [HOSTILE_ID]
    assert (await twin(api, "/api/clients?topic=Nothing"))["clients"] == []
    assert_error(await api.client.get("/api/clients", params={"group": "bad group!"}), 400, "group name")
    assert_error(await api.client.get("/api/clients", params={"topic": "t" * 300}), 400, "topic")
    assert_error(await api.client.get("/api/clients", params={"group": ""}), 400)
    assert_error(await api.client.post("/api/clients"), 405)


async def test_reading_the_clients_needs_the_viewer_role(api):
    tokens = {}
    for role in ("viewer", "support", "operator", "client"):
        r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
        assert r.status_code == 201, r.text
        tokens[role] = r.json()["value"]
    for url in ("/api/clients", "/clients.json"):
        for role in ("viewer", "support", "operator"):
            assert (await api.client.get(url, headers=bearer(tokens[role]))).status_code == 200, (url, role)
        assert_error(await api.client.get(url, headers=bearer(tokens["client"])), 403, "role")
        assert_error(await api.client.get(url, headers={"Authorization": ""}), 401)


async def test_the_openapi_document_describes_the_clients_route(api):
    document = await twin(api, "/openapi.json")
    operation = document["paths"]["/api/clients"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"group", "topic"}
    assert {"200", "400", "401", "403"} <= set(operation["responses"])
    assert "gone" in operation["description"]
    schema = document["components"]["schemas"]["ClientOut"]
    assert {"client_id", "subscriptions", "last_heartbeat_ms", "in_flight_receives"} <= set(schema["properties"])
