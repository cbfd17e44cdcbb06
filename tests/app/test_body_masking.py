"""Message bodies leave only to those who may see them. A viewer (signed in, and with an API
token) walks every route the app serves (pages, JSON twins, htmx fragments, the API, exports and
the audit views, enumerated from the app's route table) and finds no byte of any body; support
sees bodies; a viewer's reveal is an audit row, and then shows that one message only."""

from __future__ import annotations

import base64
import csv
import io
import itertools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute

from app.masking import Body
from app.services.content_search import LogSnapshot, SearchRequest
from store.format import topics
from tests.app.conftest import TEST_HOST, Running, bearer, make_settings, put_messages, running
from tests.app.test_resend import GROUP, receive

pytestmark = pytest.mark.anyio

MARK = b"Zq7Kx"  # in every body below, and in nothing else the test writes
BODIES = {
    "edited": b"Zq7Kx-dead-letter-one-" + b"a" * 20,
    "clicked": b"Zq7Kx-dead-letter-two-" + b"b" * 20,
    "waiting": b'{"order": "Zq7Kx-json-dead-letter", "items": [1, 2]}',
    "binary": b"\x00\xff\x10Zq7Kx-binary-dead-letter\x01",
    "plain": b"Zq7Kx-never-failed-" + b"c" * 20,
}
EDITED_BODY = "Zq7Kx-edited-by-an-operator"


def forms_of(body: bytes) -> set[str]:
    """How a body (or its start) shows in an answer: as text, base64, hex (spaced as the hex view, or not)."""
    return {MARK.decode(), base64.b64encode(body[:15]).decode(), " ".join(f"{b:02x}" for b in MARK), MARK.hex()}


FORBIDDEN = set().union(*(forms_of(b) for b in BODIES.values()), forms_of(EDITED_BODY.encode()))


def leaks(text: str) -> list[str]:
    return sorted(f for f in FORBIDDEN if f in text)


@dataclass
class World:
    dead: dict[str, str]  # name -> the dead letter's offset message id
    unique_keys: dict[str, str]
    plain_id: str
    copy_id: str  # the copy a one-click resend made
    job_id: int
    viewer_token: str
    support_token: str
    search_ids: list[str]  # content searches finding the mark (its text not in the query), one of each viewer


async def dead_letter_of(api: Running, body: bytes, key: str) -> tuple[str, str]:
    """(offset id of the dead letter, unique key) of a message GROUP failed for good."""
    [put] = await put_messages(api, "Orders", {"body_base64": base64.b64encode(body).decode(), "keys": [key]})
    for got in await receive(api, GROUP):
        r = await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": got["receipt_handle"],
                                                                     "reason": f"failed {key}"})
        assert r.status_code == 200
    [event] = [e for e in api.store.timeline(put["unique_key"]) if e.kind.value == "dead_letter"]
    return event.offset_msg_id, put["unique_key"]


async def build(api: Running) -> World:
    tokens = {}
    for name, role in (("vera", "viewer"), ("sam", "support")):
        r = await api.client.post("/api/tokens", json={"name": name, "role": role})
        assert r.status_code == 201, r.text
        tokens[role] = r.json()["value"]
    r = await api.client.post("/api/users", json={"name": "violet", "password": "violet-password-1", "role": "viewer"})
    assert r.status_code in (200, 201), r.text
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    dead, keys = {}, {}
    for n, name in enumerate(("edited", "clicked", "waiting", "binary")):
        dead[name], keys[name] = await dead_letter_of(api, BODIES[name], f"order-{n}")
    [plain] = await put_messages(api, "Orders", {"body_base64": base64.b64encode(BODIES["plain"]).decode(),
                                                 "keys": ["order-plain"]})
    # an operator edits one dead letter and resends it: the audit holds the diff of its body
    r = await api.client.post(f"/api/dlq/{GROUP}/resend", json={"message_ids": [dead["edited"]], "reason": "fixed",
                                                                 "edit": {"body": EDITED_BODY}})
    assert r.status_code == 200, r.text
    # support resends another with one click
    r = await api.client.post(f"/api/messages/{dead['clicked']}/resend", headers=bearer(tokens["support"]))
    assert r.status_code == 200, r.text
    copy_id = r.json()["result"]["offset_msg_id"]
    r = await api.client.post("/api/redrive-jobs", json={"group": GROUP, "dry_run": True})
    assert r.status_code == 201, r.text
    assert (await api.client.put("/api/config/delay-levels", json={"levels": "1s 2s 3s"})).status_code == 200
    searches = api.app.state.content_searches
    search_ids = []
    for owner in ("user:violet", "token:vera"):
        view = searches.start(LogSnapshot.of(api.store.commitlog), SearchRequest("Zq7K[x]", regex=True), owner)
        assert searches.wait(view.id, timeout_s=30).hits
        search_ids.append(view.id)
    return World(dead, keys, plain["offset_msg_id"], copy_id, r.json()["job"]["id"], tokens["viewer"],
                 tokens["support"], search_ids)


@pytest.fixture
async def world(data_dir, clock) -> AsyncIterator[tuple[Running, World]]:
    async with running(make_settings(data_dir), clock) as api:
        yield api, await build(api)


def path_values(w: World) -> dict[str, list[str]]:
    """A value for each path parameter of the app's routes (a route with another fails the walk)."""
    return {
        "offset_msg_id": [*w.dead.values(), w.plain_id, w.copy_id],
        "message_id": [w.unique_keys["edited"], w.dead["waiting"]],
        "unique_key": [w.unique_keys["edited"], w.unique_keys["binary"]],
        "group": [GROUP],
        "topic": ["Orders", topics.dlq_topic(GROUP), topics.pop_retry_topic(GROUP, "Orders")],
        "queue_id": ["0"],
        "queue_offset": ["0", "1"],
        "job_id": [str(w.job_id)],
        "run_id": ["1"],
        "name": ["mqlens"],
        "broker_id": ["0"],
        "search_id": w.search_ids,
    }


def query_values(w: World) -> dict[str, list[str]]:
    """Query parameters worth setting (each alone; a route is also asked without any)."""
    return {
        "view": ["text", "json", "hex", "base64"],
        "key": ["order-0", "order-3"],
        "q": [w.unique_keys["edited"], w.dead["waiting"], "order-2"],
        "message": [w.dead["edited"]],
        "action": ["resend_dead_letters"],
        "state": ["waiting", "resent"],
        "levels": ["1s 2s"],
        "group": [GROUP],
        "offset": ["0"],
    }


def _params(dependant, kind: str) -> list[str]:
    return [p.alias for p in getattr(dependant, kind)] + [
        name for sub in dependant.dependencies for name in _params(sub, kind)]


def get_routes(app) -> list[APIRoute]:
    found = []
    for route in app.routes:
        nested = route.original_router.routes if hasattr(route, "original_router") else [route]
        found += [r for r in nested if isinstance(r, APIRoute) and "GET" in r.methods]
    return found


def urls_of(route: APIRoute, w: World) -> list[str]:
    names = _params(route.dependant, "path_params")
    values = path_values(w)
    missing = [n for n in names if n not in values]
    assert not missing, f"{route.path}: give the walk values for {missing}"
    queries = query_values(w)
    urls = []
    for combo in itertools.product(*(values[n] for n in names)):
        path = route.path
        for name, value in zip(names, combo, strict=True):
            path = path.replace("{" + name + "}", quote(value, safe=""))
        urls.append(path)
        urls += [f"{path}?{name}={quote(v)}" for name in _params(route.dependant, "query_params")
                 if name in queries for v in queries[name]]
    return urls


def is_page(route: APIRoute) -> bool:
    return not route.include_in_schema and not route.path.startswith("/api/")


def twin_of(url: str) -> str:
    path, sep, query = url.partition("?")
    return (path.rstrip("/") or "/index") + ".json" + sep + query


async def walk(client: httpx.AsyncClient, app, w: World, headers: dict[str, str]) -> dict[str, set[int]]:
    """GET every URL of every route in every form it answers in; fail on a body byte. Returns the
    statuses each route answered."""
    statuses: dict[str, set[int]] = {}
    for route in get_routes(app):
        for url in urls_of(route, w):
            asks = [(url, {})]
            if is_page(route):
                asks += [(url, {"Accept": "text/html"}), (twin_of(url), {}), (url, {"HX-Request": "true"})]
            for target, extra in asks:
                r = await client.get(target, headers={**headers, **extra})
                statuses.setdefault(route.path, set()).add(r.status_code)
                assert r.status_code < 500, (target, extra, r.text[-500:])
                assert not leaks(r.text), (target, extra, leaks(r.text))
                if extra.get("Accept") == "text/html" and r.status_code == 200:
                    # every block the page names as a target, as an htmx fragment
                    for element_id in sorted(set(re.findall(r'\bid="([^"]+)"', r.text))):
                        part = await client.get(target, headers={**headers, "HX-Request": "true",
                                                                 "HX-Target": element_id})
                        assert part.status_code < 500, (target, element_id)
                        assert not leaks(part.text), (target, element_id, leaks(part.text))
    return statuses


# What a viewer may not open at all (the rest answers 2xx at least once).
NOT_FOR_VIEWERS = {"/api/users", "/api/tokens", "/admin", "/messages/{offset_msg_id}/body", "/api/client-credentials",
                   "/admin/client-credentials"}
NOTHING_THERE = {"/api/pipeline/runs/{run_id}", "/api/pipeline/runs/{run_id}/results", "/analytics/runs/{run_id}"}


async def test_a_viewer_walk_over_every_route_finds_no_body_byte(world):
    api, w = world
    transport = httpx.ASGITransport(app=api.app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{TEST_HOST}") as browser:
        r = await browser.post("/login", data={"name": "violet", "password": "violet-password-1", "next": "/"})
        assert r.status_code == 303, r.text
        for headers in ({}, bearer(w.viewer_token)):
            client = browser if not headers else api.client
            statuses = await walk(client, api.app, w, headers)
            silent = {path for path, seen in statuses.items() if not any(200 <= s < 300 for s in seen)}
            assert silent == NOT_FOR_VIEWERS | NOTHING_THERE, silent


async def test_support_sees_bodies_and_the_edit_diff(world):
    api, w = world
    support = bearer(w.support_token)
    twin = (await api.client.get(f"/messages/{w.dead['edited']}.json", headers=support)).json()
    assert twin["body"]["masked"] is False and twin["body"]["text"] == BODIES["edited"].decode()
    got = (await api.client.get(f"/api/messages/by-id/{w.dead['binary']}", headers=support)).json()["message"]
    assert base64.b64decode(got["body_base64"]) == BODIES["binary"] and got["body_masked"] is False
    entries = (await api.client.get("/api/audit", params={"action": "resend_dead_letters"}, headers=support)).json()
    diffs = [e["detail"]["result"]["edit"]["body"]["diff"] for e in entries["entries"] if e["detail"]["result"]["edit"]]
    assert diffs and f"+{EDITED_BODY}" in diffs[0]
    rows = list(csv.DictReader(io.StringIO((await api.client.get("/api/audit.csv", headers=support)).text)))
    assert any(EDITED_BODY in row["detail"] for row in rows)


async def test_a_viewers_reveal_is_audited_and_shows_that_message_only(world):
    api, w = world
    viewer = bearer(w.viewer_token)
    masked = (await api.client.get(f"/messages/{w.dead['edited']}.json", headers=viewer)).json()
    assert masked["body"] == {"masked": True, "size": len(BODIES["edited"])}
    assert masked["dead_letter"]["body_text"] is None
    assert (await api.client.get(f"/messages/{w.dead['edited']}/body", headers=viewer)).status_code == 403
    r = await api.client.post(f"/api/messages/{w.dead['edited']}/reveal", json={"reason": "ticket 9"}, headers=viewer)
    assert r.status_code == 200 and r.json()["message"]["body_text"] == BODIES["edited"].decode()
    shown = (await api.client.get(f"/messages/{w.dead['edited']}.json", headers=viewer)).json()
    assert shown["body"]["text"] == BODIES["edited"].decode()
    assert (await api.client.get(f"/messages/{w.dead['edited']}/body", headers=viewer)).content == BODIES["edited"]
    reveals = (await api.client.get("/api/audit", params={"action": "reveal_body"}, headers=viewer)).json()["entries"]
    assert [(e["actor"], e["target"], e["reason"]) for e in reveals] == [("vera", f"message:{w.dead['edited']}",
                                                                          "ticket 9")]
    # the edit of the revealed dead letter shows in the audit; the others stay masked
    audit = (await api.client.get("/api/audit", headers=viewer)).text
    assert EDITED_BODY in audit
    other = (await api.client.get(f"/messages/{w.dead['waiting']}.json", headers=viewer)).text
    assert not leaks(other)


async def test_the_audit_views_show_a_viewer_an_edits_sizes_not_its_diff(world):
    api, w = world
    viewer = bearer(w.viewer_token)
    for url in ("/api/audit", "/api/audit.csv", "/audit", "/audit.json"):
        r = await api.client.get(url, headers={**viewer, "Accept": "text/html"} if url == "/audit" else viewer)
        assert r.status_code == 200 and not leaks(r.text), (url, leaks(r.text))
    [entry] = [e for e in (await api.client.get("/api/audit", params={"action": "resend_dead_letters"},
                                                headers=viewer)).json()["entries"] if e["detail"]["result"]["edit"]]
    sizes = {"size_before": len(BODIES["edited"]), "size_after": len(EDITED_BODY)}
    assert entry["detail"]["result"]["edit"]["body"] == entry["detail"]["request"]["edit"]["body"] == {
        "masked": True, **sizes}


def test_a_body_left_wrapped_gives_nothing_away():
    """Data that misses the edge fails closed: no encoder turns a wrapped body into its content."""
    wrapped = {"message": {"body_text": Body("ID", "Zq7Kx-content")}}
    assert not leaks(str(wrapped)) and not leaks(repr(wrapped)) and not leaks(f"{wrapped}")
    with pytest.raises(TypeError):
        json.dumps(wrapped)
    with pytest.raises(ValueError):
        jsonable_encoder(wrapped)
