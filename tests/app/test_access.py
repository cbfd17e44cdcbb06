"""Who may do what: every mutating endpoint against every role, no credentials, another
origin's requests and a foreign Host; tokens for scripts; signing in and out."""

from __future__ import annotations

import dataclasses
import hashlib
import io

import httpx
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import select

from app.models import ApiToken, User
from app.roles import Role
from app.security import required_permission
from app.services.accounts import TOKEN_PREFIX
from tests.app.conftest import ADMIN_TOKEN, TEST_HOST, assert_error, audit_rows, bearer, make_settings, running

pytestmark = pytest.mark.anyio

ORIGIN = f"http://{TEST_HOST}"
EVIL = "http://evil.example"
ROLES = [role.value for role in Role]
PUBLIC_UNSAFE = {("POST", "/login"), ("POST", "/logout")}


@dataclasses.dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    allowed: frozenset[str]  # the roles let through
    json: object = None

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


MESSAGING = frozenset({"operator", "admin", "client"})
RESEND = frozenset({"support", "operator", "admin"})
CONFIGURE = frozenset({"operator", "admin"})
ADMIN = frozenset({"admin"})
READERS = frozenset({"viewer", "support", "operator", "admin"})
DEAD = "7F00000100002A9F0000000000000000"

# Every route that changes something, the roles it lets through, and a body it accepts.
MUTATING = [
    Endpoint("POST", "/api/topics/Orders/messages", MESSAGING, {"body": "x"}),
    Endpoint("PUT", "/api/topics/Orders", CONFIGURE, {"queues": 4}),
    Endpoint("PUT", "/api/groups/g1", CONFIGURE, {"max_reconsume_times": 3}),
    Endpoint("POST", "/api/groups/g1/offsets/reset", CONFIGURE, {"topic": "Orders", "to": "latest"}),
    Endpoint("PUT", "/api/config/delay-levels", CONFIGURE, {"levels": "1s 5s"}),
    Endpoint("POST", "/api/groups/g1/receive", MESSAGING, {"topic": "Orders"}),
    Endpoint("POST", "/api/groups/g1/ack", MESSAGING, {"receipt_handle": "x"}),
    Endpoint("POST", "/api/groups/g1/nack", MESSAGING, {"receipt_handle": "x"}),
    Endpoint("POST", "/api/groups/g1/change-invisible", MESSAGING, {"receipt_handle": "x", "invisible_ms": 10_000}),
    Endpoint("PUT", "/api/groups/g1/offsets", CONFIGURE, {"topic": "Orders", "queue_id": 0, "offset": 0}),
    Endpoint("POST", f"/api/messages/{DEAD}/resend", RESEND),
    Endpoint("POST", "/api/dlq/g1/resend", RESEND, {"message_ids": [DEAD]}),
    Endpoint("POST", "/dead-letters/resend", RESEND),
    Endpoint("POST", "/api/redrive-jobs", CONFIGURE, {"group": "g1"}),
    Endpoint("POST", "/api/redrive-jobs/1/pause", CONFIGURE),
    Endpoint("POST", "/redrive-jobs", CONFIGURE),
    Endpoint("POST", "/api/config/delay-levels/rollback", CONFIGURE, {"version": 1}),
    Endpoint("POST", "/config/delay-levels", CONFIGURE),
    Endpoint("POST", "/groups/g1/settings", CONFIGURE),
    Endpoint("POST", "/groups/g1/offsets/reset", CONFIGURE),
    Endpoint("POST", "/config/delay-levels/rollback", CONFIGURE),
    Endpoint("POST", "/redrive-jobs/1/cancel", CONFIGURE),
    # a job no registry knows: the allowed roles get 400, and no Spark job starts
    Endpoint("POST", "/api/pipeline/runs", CONFIGURE, {"job": "no-such-job"}),
    Endpoint("POST", "/api/pipeline/runs/1/cancel", CONFIGURE),
    Endpoint("POST", "/analytics/runs", CONFIGURE),
    Endpoint("POST", "/analytics/runs/1/cancel", CONFIGURE),
    Endpoint("POST", f"/api/messages/{DEAD}/reveal", READERS),
    Endpoint("POST", f"/messages/{DEAD}/reveal", READERS),
    Endpoint("POST", "/api/content-searches", READERS, {"text": "x"}),
    Endpoint("POST", "/api/content-searches/0123456789abcdef/cancel", READERS),
    Endpoint("POST", "/content-search", READERS),
    Endpoint("POST", "/content-search/0123456789abcdef/cancel", READERS),
    Endpoint("POST", "/api/users", ADMIN, {"name": "newbie", "password": "long-enough-password", "role": "viewer"}),
    Endpoint("PATCH", "/api/users/nobody", ADMIN, {"role": "viewer"}),
    Endpoint("POST", "/api/tokens", ADMIN, {"name": "script", "role": "client"}),
    Endpoint("DELETE", "/api/tokens/999", ADMIN),
    Endpoint("POST", "/admin/users", ADMIN),
    Endpoint("POST", "/admin/users/nobody", ADMIN),
    Endpoint("POST", "/admin/tokens", ADMIN),
    Endpoint("POST", "/admin/tokens/1/revoke", ADMIN),
    Endpoint("POST", "/api/client-credentials", ADMIN, {"role": "producer"}),
    Endpoint("DELETE", "/api/client-credentials/AKNOSUCHKEY", ADMIN),
    Endpoint("POST", "/admin/client-credentials", ADMIN),
    Endpoint("POST", "/admin/client-credentials/AKNOSUCHKEY/revoke", ADMIN),
]


@pytest.fixture
async def api_with_tokens(data_dir, clock):
    """The app, and a token of each role (made through the API, as an admin would)."""
    async with running(make_settings(data_dir), clock) as api:
        tokens = {}
        for role in ROLES:
            r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
            assert r.status_code == 201, r.text
            tokens[role] = r.json()["value"]
        yield api, tokens


async def send(client: httpx.AsyncClient, endpoint: Endpoint, headers: dict[str, str]) -> httpx.Response:
    return await client.request(endpoint.method, endpoint.path, json=endpoint.json, headers=headers)


def api_routes(app) -> list[tuple[APIRoute, list]]:
    """Every API route of the app with the dependencies its router adds (routers stay nested)."""
    found = []
    for route in app.routes:
        if isinstance(route, APIRoute):
            found.append((route, []))
        elif hasattr(route, "original_router"):
            router = route.original_router
            found += [(r, list(router.dependencies)) for r in router.routes if isinstance(r, APIRoute)]
    return found


def test_every_mutating_route_is_in_the_matrix_and_checks_a_permission(tmp_path):
    from app.main import create_app

    routes = api_routes(create_app(make_settings(tmp_path)))
    assert len(routes) > 40
    listed = set()
    for endpoint in MUTATING:
        matched = [route for route, _ in routes if endpoint.method in route.methods
                   and route.path_regex.match(endpoint.path)]
        assert matched, f"{endpoint} matches no route"
        listed.add((endpoint.method, matched[0].path))
    open_paths = {"/healthz", "/docs", "/openapi.json", "/favicon.ico", "/login", "/logout", "/api/me"}
    for route, router_dependencies in routes:
        for method in route.methods - {"GET", "HEAD", "OPTIONS"}:
            if (method, route.path) not in PUBLIC_UNSAFE:
                assert (method, route.path) in listed, f"{method} {route.path} is missing from the matrix"
        if route.path in open_paths:
            continue
        checks = [required_permission(d.call) for d in route.dependant.dependencies]
        checks += [required_permission(d.dependency) for d in router_dependencies]
        assert any(checks), f"{route.path} checks no permission"


@pytest.mark.parametrize("endpoint", MUTATING, ids=str)
async def test_each_role_is_allowed_or_refused_as_designed(api_with_tokens, endpoint):
    api, tokens = api_with_tokens
    for role in ROLES:
        r = await send(api.client, endpoint, bearer(tokens[role]))
        if role in endpoint.allowed:
            assert r.status_code not in (401, 403), (role, r.text)
        else:
            assert_error(r, 403, f"t-{role} ({role}) may not do this", "role")
    # no credentials at all: 401 and told how to sign in
    r = await api.client.request(endpoint.method, endpoint.path, json=endpoint.json, headers={"Authorization": ""})
    assert r.status_code == 401


async def test_refusals_come_before_the_body_is_checked(api_with_tokens):
    api, tokens = api_with_tokens
    r = await api.client.post("/api/users", json={"name": 5, "smuggled": True}, headers=bearer(tokens["viewer"]))
    assert_error(r, 403)


async def test_no_credentials_and_bad_tokens(data_dir, clock):
    async with running(make_settings(data_dir), clock, as_admin=False) as api:
        for method, path in [("GET", "/api/topics"), ("POST", "/api/topics/Orders/messages"), ("GET", "/metrics")]:
            r = await api.client.request(method, path, json={"body": "x"})
            assert_error(r, 401, "sign in first")
            assert r.headers["www-authenticate"] == "Bearer"
        r = await api.client.get("/api/topics", headers=bearer("mql_not-a-real-token-at-all"))
        assert_error(r, 401, "unknown, revoked or expired")
        r = await api.client.get("/api/topics", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
        assert_error(r, 401, "Bearer")
        # a browser is sent to the sign-in page, and back afterwards
        r = await api.client.get("/topics?x=1", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Ftopics%3Fx%3D1"
        # what stays open without an account
        for path in ("/healthz", "/login", "/docs", "/openapi.json", "/favicon.ico", "/static/app.css"):
            assert (await api.client.get(path)).status_code == 200, path
        me = (await api.client.get("/api/me")).json()
        assert me == {"ok": True, "name": "anonymous", "role": None, "kind": "anonymous", "permissions": [],
                      "topics": None, "groups": None}


async def test_the_anonymous_viewer_setting_lets_visitors_read_only(data_dir, clock):
    async with running(make_settings(data_dir, anonymous_viewer=True), clock, as_admin=False) as api:
        assert (await api.client.get("/api/topics")).status_code == 200
        assert_error(await api.client.post("/api/topics/Orders/messages", json={"body": "x"}), 403,
                     "anonymous (viewer) may not do this")


async def test_tokens_are_shown_once_stored_hashed_revocable_and_expire(api_with_tokens, clock):
    api, tokens = api_with_tokens
    value = tokens["client"]
    assert value.startswith(TOKEN_PREFIX) and len(value) > 40
    listed = (await api.client.get("/api/tokens")).json()["tokens"]
    assert value not in str(listed) and {t["name"] for t in listed} >= {"t-client", "bootstrap-admin"}
    with api.sessions() as s:
        stored = s.scalars(select(ApiToken).where(ApiToken.name == "t-client")).one()
        assert stored.token_sha256 == hashlib.sha256(value.encode()).hexdigest()
    # a client token produces; the message records nothing about the token but the audit does for admin acts
    r = await api.client.post("/api/topics/Orders/messages", json={"body": "x"}, headers=bearer(value))
    assert r.status_code == 200
    token_id = next(t["id"] for t in listed if t["name"] == "t-client")
    r = await api.client.delete(f"/api/tokens/{token_id}")
    assert r.status_code == 200 and r.json()["token"]["revoked_at_ms"] == clock.now_ms()
    assert_error(await api.client.post("/api/topics/Orders/messages", json={"body": "x"}, headers=bearer(value)),
                 401, "revoked")
    # an expiring token works until its time, then is refused
    r = await api.client.post("/api/tokens", json={"name": "short", "role": "viewer",
                                                   "expires_at_ms": clock.now_ms() + 60_000})
    short = r.json()["value"]
    assert (await api.client.get("/api/topics", headers=bearer(short))).status_code == 200
    clock.advance(60_000)
    assert_error(await api.client.get("/api/topics", headers=bearer(short)), 401, "expired")
    # bad requests are 4xx with a message
    assert_error(await api.client.post("/api/tokens", json={"name": "short", "role": "viewer"}), 409, "exists")
    assert_error(await api.client.post("/api/tokens", json={"name": "x", "role": "root"}), 422)
    assert_error(await api.client.post("/api/tokens", json={"name": "bad name!", "role": "viewer"}), 400)
    assert_error(await api.client.post("/api/tokens", json={"name": "past", "role": "viewer", "expires_at_ms": 1}),
                 400, "future")
    assert_error(await api.client.delete("/api/tokens/0"), 422)
    actions = [(e.action, e.target, e.actor) for e in audit_rows(api.sessions, accounts=True)
               if e.target in ("token:t-client", "token:short")]
    assert actions == [("create_token", "token:t-client", "bootstrap-admin"),
                       ("revoke_token", "token:t-client", "bootstrap-admin"),
                       ("create_token", "token:short", "bootstrap-admin")]


async def test_the_bootstrap_token_is_refreshed_at_start(data_dir, clock):
    async with running(make_settings(data_dir), clock) as api:
        assert (await api.client.get("/api/me")).json()["name"] == "bootstrap-admin"
    changed = "another-bootstrap-value-0123"
    async with running(make_settings(data_dir, bootstrap_admin_token=changed), clock, as_admin=False) as api:
        assert_error(await api.client.get("/api/me", headers=bearer(ADMIN_TOKEN)), 401)
        me = (await api.client.get("/api/me", headers=bearer(changed))).json()
        assert (me["name"], me["role"]) == ("bootstrap-admin", "admin")


async def login(client: httpx.AsyncClient, name: str, password: str, next_url: str = "/") -> httpx.Response:
    return await client.post("/login", data={"name": name, "password": password, "next": next_url},
                             headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"})


async def test_sign_in_sessions_and_sign_out(api, clock):
    r = await api.client.post("/api/users", json={"name": "sam", "password": "sam-password-1", "role": "support"})
    assert r.status_code == 201 and r.json()["user"] == {"name": "sam", "role": "support",
                                                         "created_at_ms": clock.now_ms(), "disabled": False}
    with api.sessions() as s:
        assert s.scalars(select(User.password_hash).where(User.name == "sam")).one().startswith("$argon2id$")
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        r = await login(browser, "sam", "wrong-password", "/topics")
        assert r.status_code == 401 and "wrong user name or password" in r.text
        r = await login(browser, "sam", "sam-password-1", "/topics")
        assert r.status_code == 303 and r.headers["location"] == "/topics"
        cookie = r.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower() and "max-age=28800" in cookie.lower()
        me = (await browser.get("/api/me")).json()
        assert (me["name"], me["role"], me["kind"]) == ("sam", "support", "user")
        page = await browser.get("/topics", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "sam" in page.text and "Sign out" in page.text
        saved = dict(browser.cookies)
        r = await browser.post("/logout", headers={"Origin": ORIGIN})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert (await browser.get("/api/me")).json()["name"] == "anonymous"
        # the cookie from before signing out is dead: the session ended on the server
        browser.cookies.clear()
        browser.cookies.update(saved)
        assert (await browser.get("/api/me")).json()["name"] == "anonymous"
        browser.cookies.clear()
        # sessions expire
        await login(browser, "sam", "sam-password-1")
        assert (await browser.get("/api/me")).json()["name"] == "sam"
        clock.advance(8 * 3600 * 1000)
        assert (await browser.get("/api/me")).json()["name"] == "anonymous"
        # disabling a user ends their sessions at once
        await login(browser, "sam", "sam-password-1")
        r = await api.client.patch("/api/users/sam", json={"disabled": True})
        assert r.status_code == 200 and r.json()["user"]["disabled"] is True
        assert (await browser.get("/api/me")).json()["name"] == "anonymous"
        assert (await login(browser, "sam", "sam-password-1")).status_code == 401


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example", "/\\evil.example", "javascript:x"])
async def test_sign_in_never_sends_a_browser_to_another_site(api, target):
    await api.client.post("/api/users", json={"name": "vic", "password": "vic-password-1", "role": "viewer"})
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        r = await login(browser, "vic", "vic-password-1", target)
        assert r.status_code == 303 and r.headers["location"] == "/"


async def test_failed_sign_ins_are_rate_limited(api):
    await api.client.post("/api/users", json={"name": "ann", "password": "ann-password-1", "role": "viewer"})
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        for _ in range(5):
            assert (await login(browser, "ann", "guess-guess-guess")).status_code == 401
        r = await login(browser, "ann", "ann-password-1")  # even the right password waits now
        assert r.status_code == 429 and "too many failed sign-ins" in r.text and int(r.headers["retry-after"]) >= 1
        # another user name is not held up by ann's
        await api.client.post("/api/users", json={"name": "bob", "password": "bob-password-1", "role": "viewer"})
        assert (await login(browser, "bob", "bob-password-1")).status_code == 303


async def test_bad_account_requests_are_4xx(api):
    cases = [
        ({"name": "x", "password": "short", "role": "viewer"}, 400, "password"),
        ({"name": "", "password": "long-enough-pw", "role": "viewer"}, 400, "user name"),
        ({"name": "x", "password": "long-enough-pw", "role": "god"}, 422, "role"),
        ({"name": "x", "password": "p" * 300, "role": "viewer"}, 422, "password"),
        ({"name": "x", "password": "long-enough-pw", "role": "viewer", "extra": 1}, 422, "extra"),
    ]
    for body, status, fragment in cases:
        assert_error(await api.client.post("/api/users", json=body), status, fragment)
    await api.client.post("/api/users", json={"name": "dup", "password": "long-enough-pw", "role": "viewer"})
    assert_error(await api.client.post("/api/users", json={"name": "dup", "password": "long-enough-pw",
                                                           "role": "viewer"}), 409, "exists")
    assert_error(await api.client.patch("/api/users/ghost", json={"role": "viewer"}), 404, "no user")
    r = await api.client.post("/login", data={"name": "n" * 100, "password": "x"}, headers={"Origin": ORIGIN})
    assert r.status_code == 422


CROSS_ORIGIN_REQUESTS = {
    # a plain HTML form posted from another site
    "form": {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate",
             "Content-Type": "application/x-www-form-urlencoded"},
    # fetch(url, {mode: "no-cors", method: "POST", credentials: "include"})
    "no-cors fetch": {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
                      "Content-Type": "text/plain"},
    # navigator.sendBeacon(url, data)
    "beacon": {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
               "Content-Type": "text/plain;charset=UTF-8"},
    # another port of the same host: same-site, so a SameSite=Lax cookie goes along
    "same-site page": {"Origin": "http://mqlens.test:9999", "Sec-Fetch-Site": "same-site"},
    # an older browser that sends Origin but no fetch metadata
    "origin only": {"Origin": EVIL},
    "opaque origin": {"Origin": "null"},
}


@pytest.mark.parametrize("kind", CROSS_ORIGIN_REQUESTS)
async def test_state_changes_from_another_origin_are_refused_even_signed_in(api, kind):
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        assert (await login(browser, "admin", "first-admin-password")).status_code == 303
        headers = CROSS_ORIGIN_REQUESTS[kind]
        for endpoint in MUTATING:
            r = await browser.request(endpoint.method, endpoint.path, content=b"levels=1s", headers=headers)
            assert_error(r, 403, "refused")
        r = await browser.post("/logout", headers=headers)
        assert r.status_code == 403
        assert (await browser.get("/api/me")).json()["name"] == "admin"  # still signed in: nothing changed
    assert api.store.topics() == {}
    assert audit_rows(api.sessions) == []


async def test_a_same_origin_browser_request_passes(api):
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        await login(browser, "admin", "first-admin-password")
        r = await browser.put("/api/config/delay-levels", json={"levels": "1s 2s"},
                              headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200
        [entry] = audit_rows(api.sessions)
        assert (entry.actor, entry.role) == ("admin", "admin")


async def test_a_foreign_host_header_is_refused(api):
    # a DNS rebinding page reaches the server by IP with its own host name in Host
    for method, path in [("GET", "/api/topics"), ("PUT", "/api/config/delay-levels"), ("GET", "/messages/x")]:
        r = await api.client.request(method, path, json={"levels": "1s"}, headers={"Host": "attacker.example"})
        assert r.status_code == 400
    assert (await api.client.get("/api/topics", headers={"Host": f"{TEST_HOST}:8080"})).status_code == 200


async def test_read_only_serving_still_lets_people_sign_in(tmp_path, golden_store_dir, clock):
    from tests.conftest import GOLDEN_GEOMETRY

    settings = make_settings(tmp_path / "data", store_dir=golden_store_dir, read_only=True,
                             **dataclasses.asdict(GOLDEN_GEOMETRY))
    async with running(settings, clock) as api:
        browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
        async with browser:
            assert (await login(browser, "admin", "first-admin-password")).status_code == 303
            assert (await browser.get("/api/me")).json()["name"] == "admin"
        r = await api.client.post("/api/users", json={"name": "ro", "password": "long-enough-pw", "role": "viewer"})
        assert r.status_code == 201
        assert_error(await api.client.put("/api/config/delay-levels", json={"levels": "1s"}), 409, "read-only")


def test_users_add_on_the_command_line(tmp_path, capsys, monkeypatch):
    from app.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("a-long-enough-password\n"))
    assert main(["users", "add", "carol", "--role", "operator", "--data", str(tmp_path), "--password-stdin"]) == 0
    assert capsys.readouterr().out.strip() == "added carol (operator)"
    assert main(["users", "add", "dave", "--role", "Viewer", "--data", str(tmp_path)]) == 0
    made = capsys.readouterr().out
    assert made.startswith("added dave (viewer) with password ") and len(made.split()[-1]) >= 16
    assert main(["users", "add", "carol", "--role", "viewer", "--data", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["users", "add", "eve", "--role", "root", "--data", str(tmp_path)]) == 2
    assert "unknown role" in capsys.readouterr().err


def test_serving_beyond_loopback_refuses_anonymous_viewing(tmp_path, capsys, monkeypatch):
    from app.cli import main

    monkeypatch.setenv("MQLENS_ANONYMOUS_VIEWER", "true")
    assert main(["serve", "--data", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert "anyone on the network" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


async def test_the_admin_page_adds_users_and_makes_tokens_shown_once(api, clock):
    html = {"Accept": "text/html"}
    page = await api.client.get("/admin", headers=html)
    assert page.status_code == 200 and 'data-testid="users"' in page.text and "admin" in page.text
    r = await api.client.post("/admin/users", data={"name": "pat", "role": "support", "password": "pat-password-1"},
                              headers=html)
    assert r.status_code == 303
    r = await api.client.post("/admin/users/pat", data={"disabled": "true"}, headers=html)
    assert r.status_code == 303 and next(u for u in (await api.client.get("/api/users")).json()["users"]
                                         if u["name"] == "pat")["disabled"] is True
    made = await api.client.post("/admin/tokens", data={"name": "cron", "role": "client", "expires_in_days": "30"},
                                 headers=html)
    assert made.status_code == 200 and 'data-testid="new-token"' in made.text
    value = made.text.split('data-copy="')[1].split('"')[0]
    assert value.startswith(TOKEN_PREFIX)
    assert (await api.client.get("/api/me", headers=bearer(value))).json()["name"] == "cron"
    assert value not in (await api.client.get("/admin", headers=html)).text
    token_id = next(t["id"] for t in (await api.client.get("/api/tokens")).json()["tokens"] if t["name"] == "cron")
    assert (await api.client.post(f"/admin/tokens/{token_id}/revoke", headers=html)).status_code == 303
    assert_error(await api.client.get("/api/me", headers=bearer(value)), 401)
    bad = await api.client.post("/admin/users", data={"name": "x", "role": "viewer", "password": "short"},
                                headers=html)
    assert bad.status_code == 400 and "password" in bad.text


async def test_a_request_body_over_the_limit_is_refused_before_it_is_read(data_dir, clock):
    async with running(make_settings(data_dir, max_request_bytes=4096), clock) as api:
        big = {"body": "x" * 5000}
        assert_error(await api.client.post("/api/topics/Orders/messages", json=big), 413, "larger than 4096 bytes")

        async def chunks():
            for _ in range(10):
                yield b"x" * 1000

        r = await api.client.post("/api/topics/Orders/messages", content=chunks(),
                                  headers={"content-type": "application/json"})
        assert_error(r, 413, "larger than 4096")
        assert (await api.client.post("/api/topics/Orders/messages", json={"body": "small"})).status_code == 200
        assert_error(await api.client.post("/api/topics/Orders/messages", content=b"{}",
                                           headers={"content-length": "nope", "content-type": "application/json"}),
                     413)
