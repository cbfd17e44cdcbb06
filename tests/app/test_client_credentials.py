"""Client credentials of the gRPC front: the table's migration, the server key (setting or key
file, a wrong one stops the start), making, listing and revoking them through the REST API, the
admin page and its JSON twin, and `mqlens client-credentials`; the secret shown once and nowhere else."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
import time

import httpx
import pytest
from alembic import command
from cryptography.fernet import Fernet
from sqlalchemy import inspect, select

from app.cli import main
from app.db import alembic_config, current_revision, make_engine, migrate
from app.models import AuditEntry, ClientCredential
from app.services.client_credentials import CREATE_CLIENT_CREDENTIAL, REVOKE_CLIENT_CREDENTIAL
from app.services.client_secret_key import SecretKeyError
from app.services.credential_verifier import REVOKED, ClientAuthError
from tests.app.conftest import TEST_HOST, assert_error, bearer, make_settings, running
from tests.app.test_access import CROSS_ORIGIN_REQUESTS, ORIGIN, login

pytestmark = pytest.mark.anyio
HTML = {"Accept": "text/html"}
KEY_FILE = "client-secret.key"


def signed_call(access_key: str, secret: str, now_ms: int) -> tuple[str, str]:
    """The authorization and x-mq-date-time metadata of a call signed at `now_ms`."""
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms // 1000))
    signature = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}", date_time


def file_mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def audit_of(api, *actions: str) -> list[AuditEntry]:
    with api.sessions() as s:
        return list(s.scalars(select(AuditEntry).where(AuditEntry.action.in_(actions)).order_by(AuditEntry.id)))


def test_the_migration_adds_the_table_and_takes_it_away_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'op.db'}"
    migrate(url, "0008")
    engine = make_engine(url)
    try:
        assert "client_credentials" not in inspect(engine).get_table_names()
        migrate(url, "0009")
        columns = {c["name"] for c in inspect(engine).get_columns("client_credentials")}
        assert columns == {"id", "access_key", "secret_encrypted", "role", "topics", "groups", "description",
                           "created_at_ms", "created_by", "revoked_at_ms", "last_used_at_ms"}
        command.downgrade(alembic_config(url), "0008")
        assert current_revision(url) == "0008"
        assert "client_credentials" not in inspect(engine).get_table_names()
        assert "api_tokens" in inspect(engine).get_table_names()
        migrate(url)
        assert "client_credentials" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


async def test_credentials_are_made_listed_and_revoked_through_the_api(api, clock):
    r = await api.client.post("/api/client-credentials", json={"role": "consumer", "topics": ["Orders", "Orders"],
                                                               "groups": ["GID_billing"],
                                                               "description": "billing service"})
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "no-store"
    made = r.json()
    access_key, secret = made["credential"]["access_key"], made["secret"]
    assert access_key.startswith("AK") and len(access_key) == 26 and len(secret) == 40
    assert made["credential"] == {"access_key": access_key, "role": "consumer", "topics": ["Orders"],
                                  "groups": ["GID_billing"], "description": "billing service",
                                  "created_at_ms": clock.now_ms(), "created_by": "bootstrap-admin",
                                  "revoked_at_ms": None, "last_used_at_ms": None}
    other = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()["credential"]
    listed = await api.client.get("/api/client-credentials")
    assert listed.status_code == 200 and secret not in listed.text
    assert [c["access_key"] for c in listed.json()["credentials"]] == [other["access_key"], access_key]
    with api.sessions() as s:
        stored = s.scalars(select(ClientCredential).where(ClientCredential.access_key == access_key)).one()
        assert secret not in stored.secret_encrypted
    # this server knows it at once, and refuses it at once when revoked
    verifier = api.app.state.credential_verifier
    call = signed_call(access_key, secret, clock.now_ms())
    principal = verifier.verify(*call, "ipv4:127.0.0.1:40000")
    assert (principal.access_key, principal.can_produce, principal.can_consume) == (access_key, False, True)
    clock.advance(1000)
    r = await api.client.delete(f"/api/client-credentials/{access_key}")
    assert r.status_code == 200 and r.json()["credential"]["revoked_at_ms"] == clock.now_ms()
    with pytest.raises(ClientAuthError) as refused:
        verifier.verify(*call)
    assert refused.value.reason == REVOKED
    revoked_at_ms = clock.now_ms()
    clock.advance(1000)
    again = await api.client.delete(f"/api/client-credentials/{access_key}")  # a repeat changes nothing
    assert again.status_code == 200 and again.json()["credential"]["revoked_at_ms"] == revoked_at_ms
    listed = (await api.client.get("/api/client-credentials")).json()["credentials"]
    assert [c["access_key"] for c in listed] == [other["access_key"], access_key]  # active ones first
    rows = audit_of(api, CREATE_CLIENT_CREDENTIAL, REVOKE_CLIENT_CREDENTIAL)
    assert [(e.action, e.target, e.actor, e.role) for e in rows] == [
        (CREATE_CLIENT_CREDENTIAL, f"client:{access_key}", "bootstrap-admin", "admin"),
        (CREATE_CLIENT_CREDENTIAL, f"client:{other['access_key']}", "bootstrap-admin", "admin"),
        (REVOKE_CLIENT_CREDENTIAL, f"client:{access_key}", "bootstrap-admin", "admin")]
    assert json.loads(rows[0].detail)["after"] == {"role": "consumer", "topics": ["Orders"], "groups": ["GID_billing"],
                                                   "description": "billing service"}
    assert all(secret not in e.detail for e in rows)
    audit_page = await api.client.get("/api/audit", params={"target": "client:"})
    assert audit_page.status_code == 200 and access_key in audit_page.text and secret not in audit_page.text


async def test_bad_requests_are_4xx_with_a_message(api):
    cases = [
        ({"role": "admin"}, 422, "role"),
        ({"role": "producer", "groups": ["GID_a"]}, 400, "groups limit consumers only"),
        ({"role": "both", "topics": ["bad topic!"]}, 400, "invalid topic"),
        ({"role": "both", "topics": []}, 400, "at least one"),
        ({"role": "both", "groups": ["bad group!"]}, 400, "invalid group"),
        ({"role": "both", "topics": [f"T{n}" for n in range(101)]}, 422, "topics"),
        ({"role": "both", "description": "x" * 201}, 422, "description"),
        ({"role": "both", "description": "two\nlines"}, 400, "one line"),
        ({"role": "both", "secret": "mine"}, 422, "secret"),
        ({}, 422, "role"),
    ]
    for body, status, fragment in cases:
        assert_error(await api.client.post("/api/client-credentials", json=body), status, fragment)
    assert_error(await api.client.delete("/api/client-credentials/AKNOSUCHKEY"), 404, "no client credential")
    assert_error(await api.client.delete("/api/client-credentials/bad%20key"), 400, "invalid access key")
    assert_error(await api.client.delete("/api/client-credentials/" + "A" * 65), 400, "invalid access key")
    assert (await api.client.get("/api/client-credentials")).json()["credentials"] == []


async def test_only_admins_manage_credentials(api):
    tokens = {}
    for role in ("viewer", "support", "operator", "client"):
        r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
        tokens[role] = bearer(r.json()["value"])
    made = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()["credential"]
    for role, headers in tokens.items():
        assert_error(await api.client.get("/api/client-credentials", headers=headers), 403, f"t-{role} ({role})")
        assert_error(await api.client.post("/api/client-credentials", json={"role": "both"}, headers=headers), 403)
        assert_error(await api.client.delete(f"/api/client-credentials/{made['access_key']}", headers=headers), 403)
        page = await api.client.get("/admin/client-credentials.json", headers=headers)
        assert_error(page, 403)
    assert_error(await api.client.get("/api/client-credentials", headers={"Authorization": ""}), 401)
    listed = (await api.client.get("/api/client-credentials")).json()["credentials"]
    assert len(listed) == 1 and listed[0]["revoked_at_ms"] is None


@pytest.mark.parametrize("kind", ["form", "origin only", "same-site page"])
async def test_a_signed_in_admin_is_not_made_to_change_credentials_from_another_site(api, kind):
    access_key = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()["credential"][
        "access_key"]
    browser = httpx.AsyncClient(transport=api.client._transport, base_url=ORIGIN)
    async with browser:
        assert (await login(browser, "admin", "first-admin-password")).status_code == 303
        headers = CROSS_ORIGIN_REQUESTS[kind]
        for method, path in [("POST", "/api/client-credentials"), ("DELETE", f"/api/client-credentials/{access_key}"),
                             ("POST", "/admin/client-credentials"),
                             ("POST", f"/admin/client-credentials/{access_key}/revoke")]:
            r = await browser.request(method, path, content=b"role=both", headers=headers)
            assert_error(r, 403, "refused")
        # the same browser from the console's own pages may
        r = await browser.post(f"/admin/client-credentials/{access_key}/revoke",
                               headers={"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", **HTML})
        assert r.status_code == 303 and r.headers["location"] == "/admin/client-credentials"
    listed = (await api.client.get("/api/client-credentials")).json()["credentials"]
    assert len(listed) == 1 and listed[0]["revoked_at_ms"] is not None


async def test_the_admin_page_makes_a_credential_shown_once_and_revokes_it(api, clock):
    page = await api.client.get("/admin/client-credentials", headers=HTML)
    assert page.status_code == 200 and 'data-testid="client-credentials"' in page.text
    assert "No client credentials yet" in page.text and 'data-testid="anonymous-policy">accepted' in page.text
    assert 'href="/admin/client-credentials"' in (await api.client.get("/admin", headers=HTML)).text
    made = await api.client.post("/admin/client-credentials", headers=HTML,
                                 data={"role": "producer", "topics": "Orders, Payments", "groups": "",
                                       "description": "checkout"})
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    assert 'data-testid="new-credential"' in made.text
    access_key, secret = [part.split('"')[0] for part in made.text.split('data-copy="')[1:3]]
    assert access_key.startswith("AK")
    principal = api.app.state.credential_verifier.verify(*signed_call(access_key, secret, clock.now_ms()))
    assert principal.topics == frozenset({"Orders", "Payments"}) and not principal.can_consume
    page = await api.client.get("/admin/client-credentials", headers=HTML)
    assert access_key in page.text and "checkout" in page.text and "topics Orders, Payments" in page.text
    assert secret not in page.text
    twin = await api.client.get("/admin/client-credentials.json")
    assert twin.status_code == 200 and secret not in twin.text
    data = twin.json()
    assert data["new_credential"] is None and data["anonymous"] == {
        "allowed": True, "why": "the server listens on this machine only"}
    [listed] = data["credentials"]
    assert (listed["access_key"], listed["role"], listed["topics"], listed["groups"]) == (
        access_key, "producer", ["Orders", "Payments"], None)
    # the twin of the form's answer is the one other place the secret shows, not cached either
    made_twin = await api.client.post("/admin/client-credentials.json", data={"role": "both"})
    assert made_twin.status_code == 200 and made_twin.headers["cache-control"] == "no-store"
    assert len(made_twin.json()["new_credential"]["secret"]) == 40
    revoked = await api.client.post(f"/admin/client-credentials/{access_key}/revoke", headers=HTML)
    assert revoked.status_code == 303
    page = await api.client.get("/admin/client-credentials", headers=HTML)
    assert "revoked" in page.text
    bad = await api.client.post("/admin/client-credentials", data={"role": "superuser"}, headers=HTML)
    assert bad.status_code == 400 and "unknown client role" in bad.text
    missing = await api.client.post("/admin/client-credentials/AKNONE/revoke", headers=HTML)
    assert missing.status_code == 404


async def test_the_last_use_shows_after_the_server_writes_it(data_dir, clock):
    async with running(make_settings(data_dir), clock) as api:
        made = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()
        access_key = made["credential"]["access_key"]
        api.app.state.credential_verifier.verify(*signed_call(access_key, made["secret"], clock.now_ms()))
    async with running(make_settings(data_dir), clock) as api:  # stopping wrote what was pending
        [listed] = (await api.client.get("/api/client-credentials")).json()["credentials"]
        assert listed["last_used_at_ms"] == clock.now_ms()


async def test_the_key_file_is_made_private_once_and_kept(data_dir, clock):
    before = os.umask(0o022)
    try:
        async with running(make_settings(data_dir), clock) as api:
            made = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()
    finally:
        os.umask(before)
    key_file = data_dir / KEY_FILE
    assert file_mode(key_file) == 0o600
    key = key_file.read_text()
    Fernet(key.strip())
    os.chmod(key_file, 0o644)  # loosened by hand: tightened again
    async with running(make_settings(data_dir), clock) as api:
        verifier = api.app.state.credential_verifier
        assert verifier.verify(*signed_call(made["credential"]["access_key"], made["secret"], clock.now_ms()))
    assert key_file.read_text() == key and file_mode(key_file) == 0o600


async def test_the_configured_key_wins_over_a_file(data_dir, clock):
    key = Fernet.generate_key().decode()
    async with running(make_settings(data_dir, client_secret_key=key), clock) as api:
        made = (await api.client.post("/api/client-credentials", json={"role": "both"})).json()
        assert api.app.state.credential_verifier.cipher.source == "MQLENS_CLIENT_SECRET_KEY"
    assert not (data_dir / KEY_FILE).exists()
    async with running(make_settings(data_dir, client_secret_key=key), clock) as api:
        assert api.app.state.credential_verifier.verify(
            *signed_call(made["credential"]["access_key"], made["secret"], clock.now_ms()))


async def test_a_wrong_or_lost_key_stops_the_start_in_words(data_dir, clock, caplog):
    async with running(make_settings(data_dir), clock) as api:
        await api.client.post("/api/client-credentials", json={"role": "both"})
    wrong = Fernet.generate_key().decode()
    with caplog.at_level(logging.ERROR, logger="mqlens.app"), pytest.raises(SecretKeyError) as refused:
        async with running(make_settings(data_dir, client_secret_key=wrong), clock):
            pytest.fail("the server started with a key that cannot read the stored secrets")
    assert "cannot be decrypted with the key in MQLENS_CLIENT_SECRET_KEY" in str(refused.value)
    assert "cannot start: " in caplog.text and wrong not in caplog.text
    key = (data_dir / KEY_FILE).read_text()
    (data_dir / KEY_FILE).unlink()
    with pytest.raises(SecretKeyError, match="key file .* is missing: restore it"):
        async with running(make_settings(data_dir), clock):
            pytest.fail("the server made a new key though secrets are stored")
    assert not (data_dir / KEY_FILE).exists()
    (data_dir / KEY_FILE).write_text("not a key\n")
    with pytest.raises(SecretKeyError, match="is not a Fernet key"):
        async with running(make_settings(data_dir), clock):
            pytest.fail("the server started with a malformed key file")
    (data_dir / KEY_FILE).write_text(key)
    async with running(make_settings(data_dir), clock) as api:
        assert len((await api.client.get("/api/client-credentials")).json()["credentials"]) == 1


async def test_the_anonymous_policy_reaches_the_verifier(data_dir, clock, caplog):
    settings = make_settings(data_dir, host="0.0.0.0", allowed_hosts=TEST_HOST)
    async with running(settings, clock) as api:
        assert api.app.state.credential_verifier.allow_anonymous is False
        page = (await api.client.get("/admin/client-credentials.json")).json()
        assert page["anonymous"] == {"allowed": False, "why": "the server listens beyond this machine"}
        with pytest.raises(ClientAuthError):
            api.app.state.credential_verifier.verify(None, None)
    with caplog.at_level(logging.WARNING, logger="mqlens.app"):
        async with running(make_settings(data_dir, host="0.0.0.0", grpc_anonymous=True), clock) as api:
            assert api.app.state.credential_verifier.verify(None, None).access_key is None
            assert "without credentials are accepted from anyone who reaches 0.0.0.0" in caplog.text
            assert (await api.client.get("/admin/client-credentials.json")).json()["anonymous"]["why"] == \
                "as MQLENS_GRPC_ANONYMOUS says"


def test_credentials_on_the_command_line(tmp_path, capsys, monkeypatch):
    data = ["--data", str(tmp_path)]
    assert main(["client-credentials", "list", *data]) == 0
    assert capsys.readouterr().out.strip() == "no client credentials"
    assert main(["client-credentials", "add", "--role", "Consumer", "--topic", "Orders", "--group", "GID_a",
                 "--description", "billing", *data]) == 0
    out = capsys.readouterr().out.splitlines()
    access_key, secret = out[0].split()[-1], out[1].split()[-1]
    assert out[0].startswith("access key AK") and out[1].startswith("secret ") and "shown this once" in out[2]
    assert file_mode(tmp_path / KEY_FILE) == 0o600
    assert main(["client-credentials", "add", "--role", "producer", "--json", *data]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["credential"]["role"] == "producer" and len(made["secret"]) == 40
    assert main(["client-credentials", "list", *data]) == 0
    listing = capsys.readouterr().out
    assert access_key in listing and "topic=Orders group=GID_a" in listing and "(billing)" in listing
    assert secret not in listing and made["secret"] not in listing
    assert main(["client-credentials", "revoke", access_key, *data]) == 0
    assert capsys.readouterr().out.strip() == f"revoked {access_key}"
    assert main(["client-credentials", "list", "--json", *data]) == 0
    listed = {c["access_key"]: c for c in json.loads(capsys.readouterr().out)["credentials"]}
    assert listed[access_key]["revoked_at_ms"] is not None and listed[access_key]["created_by"] == "mqlens"
    # refusals: one line on standard error, exit status 2
    for argv, fragment in [(["add", "--role", "root"], "unknown client role"),
                           (["add", "--role", "producer", "--group", "GID_a"], "consumers only"),
                           (["add", "--role", "both", "--topic", "bad topic"], "topic"),
                           (["revoke", "AKNOBODY"], "no client credential")]:
        assert main(["client-credentials", *argv, *data]) == 2
        assert fragment in capsys.readouterr().err
    # a key that cannot read what is stored: nothing is added with it
    with monkeypatch.context() as patched:
        patched.setenv("MQLENS_CLIENT_SECRET_KEY", Fernet.generate_key().decode())
        assert main(["client-credentials", "add", "--role", "both", *data]) == 2
        assert "cannot be decrypted" in capsys.readouterr().err
    assert main(["client-credentials", "list", "--json", *data]) == 0
    assert len(json.loads(capsys.readouterr().out)["credentials"]) == 2


async def test_credentials_made_on_the_command_line_reach_a_running_server(data_dir, clock, capsys):
    async with running(make_settings(data_dir), clock) as api:
        assert main(["client-credentials", "add", "--role", "both", "--json", "--data", str(data_dir)]) == 0
        made = json.loads(capsys.readouterr().out)
        verifier = api.app.state.credential_verifier
        call = signed_call(made["credential"]["access_key"], made["secret"], clock.now_ms())
        verifier.sync()  # what its background thread does every few seconds
        assert verifier.verify(*call).access_key == made["credential"]["access_key"]
