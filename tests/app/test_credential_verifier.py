"""The gRPC calls' signature check (CredentialVerifier) over a real migrated SQLite: signatures as
the official client makes them, every way a call is refused, the time-zone tolerance of the date
check, the anonymous policy, topic and group limits, the refusals in the audit log (coalesced),
the last-used time, and no database work per call."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import make_engine, migrate, session_factory
from app.models import AuditEntry
from app.roles import SYSTEM
from app.services import client_credentials
from app.services.client_refusals import OTHERS, REFUSE_CLIENT, RefusalLog
from app.services.client_secret_key import SecretCipher, SecretKeyError
from app.services.credential_verifier import (
    CLOCK_SKEW,
    MALFORMED,
    NO_CREDENTIALS,
    NOT_ALLOWED,
    REVOKED,
    UNKNOWN_KEY,
    WRONG_SIGNATURE,
    ClientAuthError,
    ClientPrincipal,
    CredentialVerifier,
    peer_address,
)
from store.clock import FakeClock, SystemClock

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
MAX_SKEW_MS = 5 * MINUTE_MS
PEER = "ipv4:10.1.2.3:50123"


@pytest.fixture
def sessions(tmp_path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'op.db'}"
    migrate(url)
    engine = make_engine(url)
    try:
        yield session_factory(engine)
    finally:
        engine.dispose()


@pytest.fixture
def cipher() -> SecretCipher:
    return SecretCipher(Fernet.generate_key(), "the test key")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_795_744_068_000)  # 2026-11-27 01:47:48 UTC


def make_verifier(sessions, clock, cipher, *, allow_anonymous: bool = False, **options) -> CredentialVerifier:
    verifier = CredentialVerifier(sessions, clock, cipher, allow_anonymous, MAX_SKEW_MS, **options)
    verifier.reload(strict=True)
    return verifier


def make_credential(sessions, clock, cipher, role: str = "both", **limits) -> tuple[str, str]:
    credential, secret = client_credentials.create_credential(sessions, clock, cipher, role, actor=SYSTEM, **limits)
    return credential.access_key, secret


def date_time(epoch_ms: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch_ms // 1000))


def authorization(access_key: str, secret: str, signed: str) -> str:
    signature = hmac.new(secret.encode(), signed.encode(), hashlib.sha1).hexdigest()
    return f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}"


def refusal(verifier: CredentialVerifier, header: str | None, signed: str | None, peer: str = PEER) -> ClientAuthError:
    with pytest.raises(ClientAuthError) as caught:
        verifier.verify(header, signed, peer)
    return caught.value


def refusal_rows(sessions) -> list[AuditEntry]:
    with sessions() as s:
        return list(s.scalars(select(AuditEntry).where(AuditEntry.action == REFUSE_CLIENT).order_by(AuditEntry.id)))


def official_client_metadata(access_key: str, secret: str, tz: str) -> dict[str, str]:
    """The metadata the official Python client (rocketmq-python-client) signs a call with, made
    in a process of its own (its generated stubs clash with ours) whose local time zone is `tz`."""
    script = ("import json, sys\nfrom types import SimpleNamespace as N\n"
              "from rocketmq.v5.util.signature import Signature\n"
              "config = N(credentials=N(ak=sys.argv[1], sk=sys.argv[2]), namespace='')\n"
              "print(json.dumps(dict(Signature.metadata(config, 'host@1@0@x'))))\n")
    done = subprocess.run([sys.executable, "-c", script, access_key, secret], capture_output=True, text=True,
                          env={"TZ": tz, "PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("tz", ["UTC0", "NPT-5:45", "HST10", "LINT-14"])
def test_a_call_signed_by_the_official_client_in_any_time_zone_passes(sessions, cipher, tz):
    clock = SystemClock()
    access_key, secret = make_credential(sessions, clock, cipher, "producer", topics=["Orders"])
    verifier = make_verifier(sessions, clock, cipher)
    metadata = official_client_metadata(access_key, secret, tz)
    principal = verifier.verify(metadata["authorization"], metadata["x-mq-date-time"], PEER)
    assert principal == ClientPrincipal(access_key, True, False, frozenset({"Orders"}), None, "10.1.2.3")
    # the same client with another secret, or no credentials at all (Credential= empty)
    wrong = official_client_metadata(access_key, secret + "x", tz)
    assert refusal(verifier, wrong["authorization"], wrong["x-mq-date-time"]).reason == WRONG_SIGNATURE
    anonymous = official_client_metadata("", "", tz)
    assert "Credential=," in anonymous["authorization"]
    assert refusal(verifier, anonymous["authorization"], anonymous["x-mq-date-time"]).reason == NO_CREDENTIALS
    assert make_verifier(sessions, clock, cipher, allow_anonymous=True).verify(
        anonymous["authorization"], anonymous["x-mq-date-time"]).access_key is None


def test_a_good_signature_gives_the_credentials_role_and_limits(sessions, clock, cipher):
    producer = make_credential(sessions, clock, cipher, "producer")
    consumer = make_credential(sessions, clock, cipher, "consumer", topics=["Orders", "Refunds"], groups=["GID_a"])
    both = make_credential(sessions, clock, cipher, "both")
    verifier = make_verifier(sessions, clock, cipher)
    signed = date_time(clock.now_ms())
    assert verifier.verify(authorization(*producer, signed), signed, PEER) == ClientPrincipal(
        producer[0], True, False, None, None, "10.1.2.3")
    got = verifier.verify(authorization(*consumer, signed), signed, "ipv6:[2001:db8::7]:443")
    assert got == ClientPrincipal(consumer[0], False, True, frozenset({"Orders", "Refunds"}), frozenset({"GID_a"}),
                                  "2001:db8::7")
    assert (got := verifier.verify(authorization(*both, signed), signed)).can_produce and got.can_consume
    # the hex may come in upper case, the header name too; spaces around the fields do not matter
    signature = hmac.new(both[1].encode(), signed.encode(), hashlib.sha1).hexdigest().upper()
    header = f"MQv2-HMAC-SHA1 Credential={both[0]} ,SignedHeaders=X-MQ-DATE-TIME,Signature={signature}"
    assert verifier.verify(header, signed).access_key == both[0]


@pytest.mark.parametrize(("header", "signed", "reason"), [
    (None, None, NO_CREDENTIALS),
    ("", None, NO_CREDENTIALS),
    ("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=00", "20261127T014748Z", NO_CREDENTIALS),
    ("Bearer mql_abc", None, MALFORMED),
    ("MQv2-HMAC-SHA1", None, NO_CREDENTIALS),
    ("MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=x-mq-date-time", "20261127T014748Z", MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=host, Signature=" + "0" * 40, "20261127T014748Z", MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=x-mq-date-time, Signature=" + "g" * 40, "20261127T014748Z",
     MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=" + "A" * 65 + ", SignedHeaders=x-mq-date-time, Signature=" + "0" * 40, None,
     MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=A\x00K, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40, None, MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=AK1, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40 + "x" * 2000, None,
     MALFORMED),
    ("MQv2-HMAC-SHA1 Credential=AKNOBODY, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40, "20261127T014748Z",
     UNKNOWN_KEY),
])
def test_malformed_missing_and_unknown_credentials_are_unauthorized(sessions, clock, cipher, header, signed, reason):
    error = refusal(make_verifier(sessions, clock, cipher), header, signed)
    assert (error.kind, error.reason) == ("unauthorized", reason)
    assert error.message and str(error) == error.message


def test_a_wrong_date_time_or_secret_or_a_revoked_key_is_unauthorized(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher)
    other_key, other_secret = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)
    signed = date_time(clock.now_ms())
    header = authorization(access_key, secret, signed)
    for bad_date in (None, "", "2026-11-27T01:47:48Z", "20261327T014748Z", "20260230T014748Z", "20261127T246000Z",
                     "٢٠٢٦١١٢٧T014748Z", "00000101T000000Z"):
        assert refusal(verifier, header, bad_date).reason == MALFORMED, bad_date
    # signed with another credential's secret, or the signature of another date-time
    assert refusal(verifier, authorization(access_key, other_secret, signed), signed).reason == WRONG_SIGNATURE
    later = date_time(clock.now_ms() + 1000)
    assert refusal(verifier, header, later).reason == WRONG_SIGNATURE
    assert verifier.verify(authorization(other_key, other_secret, signed), signed).access_key == other_key
    client_credentials.revoke_credential(sessions, clock, access_key, actor=SYSTEM)
    assert verifier.verify(header, signed).access_key == access_key  # not reloaded yet: this process did not say
    verifier.reload()
    error = refusal(verifier, header, signed)
    assert (error.kind, error.reason) == ("unauthorized", REVOKED) and "revoked" in error.message


@pytest.mark.parametrize(("offset_ms", "passes"), [
    (0, True),
    (MAX_SKEW_MS, True),
    (-MAX_SKEW_MS, True),
    (MAX_SKEW_MS + 1000, False),
    (-MAX_SKEW_MS - 1000, False),
    (7 * MINUTE_MS + 30_000, False),  # halfway between two quarter hours: 7.5 min from either
    (5 * HOUR_MS + 45 * MINUTE_MS, True),  # Nepal
    (5 * HOUR_MS + 45 * MINUTE_MS + 4 * MINUTE_MS, True),  # ... with a clock 4 min fast
    (5 * HOUR_MS + 30 * MINUTE_MS - 4 * MINUTE_MS, True),  # India, with a clock 4 min slow
    (-10 * HOUR_MS, True),  # Hawaii
    (14 * HOUR_MS, True),  # Kiribati (Line Islands)
    (-14 * HOUR_MS, True),
    (14 * HOUR_MS + MAX_SKEW_MS + 1000, False),
    (14 * HOUR_MS + 15 * MINUTE_MS, False),
    (-14 * HOUR_MS - 15 * MINUTE_MS, False),
    (3 * 24 * HOUR_MS, False),
])
def test_the_date_time_may_be_off_by_a_time_zone_and_the_skew_allowed(sessions, clock, cipher, offset_ms, passes):
    access_key, secret = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)
    signed = date_time(clock.now_ms() + offset_ms)
    header = authorization(access_key, secret, signed)
    if passes:
        assert verifier.verify(header, signed).access_key == access_key
    else:
        error = refusal(verifier, header, signed)
        assert (error.kind, error.reason) == ("unauthorized", CLOCK_SKEW) and "clock" in error.message
    clock.advance(offset_ms)  # the same call when the server's clock agrees: it passes
    assert verifier.verify(header, signed).access_key == access_key


def test_the_anonymous_policy_follows_where_the_server_listens(tmp_path):
    def allows(**given) -> bool:
        return Settings(data_dir=tmp_path, **given).grpc_allows_anonymous()

    assert allows(host="127.0.0.1") and allows(host="localhost") and allows(host="::1") and allows(host="127.0.0.2")
    assert not allows(host="0.0.0.0") and not allows(host="::") and not allows(host="10.0.0.5")
    assert allows(host="0.0.0.0", grpc_anonymous=True)
    assert not allows(host="127.0.0.1", grpc_anonymous=False)


def test_anonymous_clients_when_allowed_but_a_named_key_is_always_checked(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher, "producer")
    verifier = make_verifier(sessions, clock, cipher, allow_anonymous=True)
    anonymous = ClientPrincipal(None, True, True, None, None, "10.1.2.3")
    signed = date_time(clock.now_ms())
    for header in (None, "", "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40,
                   "Basic abc"):
        assert verifier.verify(header, None, PEER) == anonymous
    assert verifier.verify(authorization(access_key, secret, signed), signed).access_key == access_key
    assert refusal(verifier, authorization(access_key, "wrong", signed), signed).reason == WRONG_SIGNATURE
    assert refusal(verifier, authorization("AKNOBODY", secret, signed), signed).reason == UNKNOWN_KEY
    # an anonymous client is limited by nothing but the broker's own topics
    verifier.check_produce(anonymous, "Orders")
    verifier.check_consume(anonymous, "GID_any", "Orders")
    with pytest.raises(ClientAuthError):
        verifier.check_produce(anonymous, "%DLQ%GID_any")


def test_roles_topics_and_groups_limit_what_a_credential_may_do(sessions, clock, cipher):
    verifier = make_verifier(sessions, clock, cipher)
    producer = ClientPrincipal("AKP", True, False, frozenset({"Orders"}), None, "10.1.2.3")
    consumer = ClientPrincipal("AKC", False, True, frozenset({"Orders"}), frozenset({"GID_a"}), "10.1.2.3")
    anything = ClientPrincipal("AKB", True, True)
    verifier.check_produce(producer, "Orders")
    verifier.check_consume(consumer, "GID_a", "Orders")
    verifier.check_consume(consumer, "GID_a", "%RETRY%GID_a")  # its own group's retries
    verifier.check_consume(consumer, "GID_a", "%RETRY%GID_a_Orders")  # ... of a topic of its own
    verifier.check_produce(anything, "Payments")
    verifier.check_consume(anything, "GID_z", "Payments")
    refused = [
        (lambda: verifier.check_produce(producer, "Payments"), "topic Payments"),
        (lambda: verifier.check_consume(producer, "GID_a", "Orders"), "may not consume"),
        (lambda: verifier.check_produce(consumer, "Orders"), "may not produce"),
        (lambda: verifier.check_consume(consumer, "GID_b", "Orders"), "group GID_b"),
        (lambda: verifier.check_consume(consumer, "GID_a", "Payments"), "topic Payments"),
        (lambda: verifier.check_consume(consumer, "GID_a", "%RETRY%GID_b"), "%RETRY%GID_b"),
        (lambda: verifier.check_consume(consumer, "GID_a", "%RETRY%GID_a_Payments"), "topic Payments"),
        (lambda: verifier.check_consume(anything, "GID_z", "%DLQ%GID_z"), "%DLQ%GID_z"),
        (lambda: verifier.check_consume(anything, "GID_z", "RMQ_SYS_TRACE_TOPIC"), "RMQ_SYS_TRACE_TOPIC"),
        (lambda: verifier.check_produce(anything, "SCHEDULE_TOPIC_XXXX"), "the broker writes it"),
        (lambda: verifier.check_produce(anything, "%RETRY%GID_z"), "the broker writes it"),
    ]
    for check, fragment in refused:
        with pytest.raises(ClientAuthError) as caught:
            check()
        assert (caught.value.kind, caught.value.reason) == ("forbidden", NOT_ALLOWED)
        assert fragment in caught.value.message
    verifier.flush()
    rows = refusal_rows(sessions)
    assert {(row.actor, json.loads(row.detail)["reason"]) for row in rows} == {
        ("AKP", NOT_ALLOWED), ("AKC", NOT_ALLOWED), ("AKB", NOT_ALLOWED)}


def count_statements(sessions) -> list[str]:
    statements: list[str] = []
    event.listen(sessions.kw["bind"], "before_cursor_execute",
                 lambda _conn, _cursor, statement, *_: statements.append(statement))
    return statements


def test_verifying_touches_no_database(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher, "producer", topics=["Orders"])
    revoked_key, revoked_secret = make_credential(sessions, clock, cipher)
    client_credentials.revoke_credential(sessions, clock, revoked_key, actor=SYSTEM)
    verifier = make_verifier(sessions, clock, cipher)
    statements = count_statements(sessions)
    signed = date_time(clock.now_ms())
    good = authorization(access_key, secret, signed)
    for n in range(300):
        principal = verifier.verify(good, signed, f"ipv4:10.0.0.{n % 7}:{n}")
        verifier.check_produce(principal, "Orders")
        for header in (authorization(access_key, "wrong", signed), authorization(revoked_key, revoked_secret, signed),
                       authorization(f"AK{n}", secret, signed), "junk", None):
            with pytest.raises(ClientAuthError):
                verifier.verify(header, signed, PEER)
        with pytest.raises(ClientAuthError):
            verifier.check_produce(principal, "Payments")
    assert statements == []
    verifier.flush()  # the writes come here, off the callers' path
    assert statements


def test_signatures_checked_once_are_remembered_within_a_bound(sessions, clock, cipher, monkeypatch):
    monkeypatch.setattr("app.services.credential_verifier.MAX_CHECKED", 8)
    access_key, secret = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)
    for second in range(20):
        signed = date_time(clock.now_ms() + second * 1000)
        for _ in range(3):
            assert verifier.verify(authorization(access_key, secret, signed), signed).access_key == access_key
        assert 1 <= len(verifier._known.checked) <= 8
    for _ in range(20):  # refusals are never remembered
        refusal(verifier, authorization(access_key, "wrong", signed), signed)
    assert all(key[0] == authorization(access_key, secret, key[1]) for key in verifier._known.checked)


def test_refusals_are_audited_coalesced_per_key_address_reason_and_minute(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)
    clock.set(clock.now_ms() // MINUTE_MS * MINUTE_MS)  # the start of a minute
    signed = date_time(clock.now_ms())
    wrong = authorization(access_key, "wrong-secret", signed)
    for _ in range(500):
        refusal(verifier, wrong, signed, "ipv4:10.1.2.3:1000")
        refusal(verifier, wrong, signed, "ipv4:10.1.2.3:2000")  # another connection of the same host
    refusal(verifier, wrong, signed, "ipv4:10.9.9.9:1000")
    refusal(verifier, "MQv2-HMAC-SHA1 Credential=AKGHOST, SignedHeaders=x-mq-date-time, Signature=" + "0" * 40, signed)
    refusal(verifier, None, None, PEER)
    assert verifier.refusals.pending() == 1003
    verifier.flush()
    assert verifier.refusals.pending() == 0
    rows = refusal_rows(sessions)
    shown = {(row.actor, row.target, json.loads(row.detail)["address"], json.loads(row.detail)["reason"],
              json.loads(row.detail)["count"]) for row in rows}
    assert shown == {(access_key, f"client:{access_key}", "10.1.2.3", WRONG_SIGNATURE, 1000),
                     (access_key, f"client:{access_key}", "10.9.9.9", WRONG_SIGNATURE, 1),
                     ("AKGHOST", "client:AKGHOST", "10.1.2.3", UNKNOWN_KEY, 1),
                     ("anonymous", "client:10.1.2.3", "10.1.2.3", NO_CREDENTIALS, 1)}
    assert all(row.outcome == "failed" and row.role is None and row.outcome_detail for row in rows)
    assert all(secret not in row.detail and secret not in row.outcome_detail for row in rows)
    # more of them in the same minute: the same row counts them; the next minute: a new row
    clock.advance(30_000)
    refusal(verifier, wrong, signed, "ipv4:10.1.2.3:3000")
    verifier.flush()
    assert len(refusal_rows(sessions)) == 4
    row = next(r for r in refusal_rows(sessions) if json.loads(r.detail)["count"] > 1)
    assert json.loads(row.detail)["count"] == 1001 and json.loads(row.detail)["last_at_ms"] == clock.now_ms()
    clock.advance(MINUTE_MS)
    verifier.flush()  # nothing new: nothing written
    assert len(refusal_rows(sessions)) == 4
    refusal(verifier, wrong, signed, "ipv4:10.1.2.3:3000")
    verifier.flush()
    assert len(refusal_rows(sessions)) == 5


def test_a_flood_of_ever_new_keys_is_counted_together_past_a_bound(sessions, clock):
    refusals = RefusalLog(clock, max_kinds=10)
    for n in range(1000):
        refusals.note(f"AKRANDOM{n}", "10.1.2.3", UNKNOWN_KEY, "unknown")
    refusals.flush(sessions)
    rows = refusal_rows(sessions)
    assert len(rows) == 11
    assert json.loads(rows[-1].detail) | {"first_at_ms": 0, "last_at_ms": 0} == {
        "access_key": OTHERS, "address": OTHERS, "reason": UNKNOWN_KEY, "count": 990, "first_at_ms": 0,
        "last_at_ms": 0}
    refusals.note("AK\x00\x1b[31m" + "x" * 500, "10.1.2.3", UNKNOWN_KEY, "unknown")  # what a hostile client sends
    refusals.flush(sessions)
    shown = refusal_rows(sessions)[-1].actor
    assert shown.isprintable() and len(shown) <= 128


def test_the_last_use_is_written_at_most_once_a_minute(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher)
    idle_key, _ = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)

    def last_used() -> dict[str, int | None]:
        return {c.access_key: c.last_used_at_ms for c in client_credentials.list_credentials(sessions)}

    statements = count_statements(sessions)
    first = clock.now_ms()
    signed = date_time(first)
    verifier.verify(authorization(access_key, secret, signed), signed)
    verifier.flush()
    assert last_used() == {access_key: first, idle_key: None}
    statements.clear()
    clock.advance(30_000)
    verifier.verify(authorization(access_key, secret, signed), signed)
    verifier.flush()
    assert not [s for s in statements if s.startswith("UPDATE")] and last_used()[access_key] == first
    clock.advance(30_000)
    verifier.verify(authorization(access_key, secret, signed), signed)
    verifier.flush()
    assert last_used()[access_key] == first + 60_000


def test_the_background_thread_learns_what_another_process_changed(sessions, clock, cipher):
    verifier = make_verifier(sessions, clock, cipher, refresh_ms=20)
    access_key, secret = make_credential(sessions, clock, cipher)  # as `mqlens client-credentials add` would
    signed = date_time(clock.now_ms())
    header = authorization(access_key, secret, signed)
    assert refusal(verifier, header, signed).reason == UNKNOWN_KEY
    verifier.start()
    try:
        assert wait_for(lambda: passes(verifier, header, signed))
        client_credentials.revoke_credential(sessions, clock, access_key, actor=SYSTEM)
        assert wait_for(lambda: not passes(verifier, header, signed))
        assert wait_for(lambda: len(refusal_rows(sessions)) >= 2)  # the refusals reach the audit log by themselves
    finally:
        verifier.stop()


def passes(verifier: CredentialVerifier, header: str, signed: str) -> bool:
    try:
        verifier.verify(header, signed)
    except ClientAuthError:
        return False
    return True


def wait_for(condition, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_secret_the_key_cannot_read_stops_a_start_and_is_refused_later(sessions, clock, cipher, caplog):
    access_key, secret = make_credential(sessions, clock, cipher)
    other = SecretCipher(Fernet.generate_key(), "MQLENS_CLIENT_SECRET_KEY")
    with pytest.raises(SecretKeyError, match="cannot be decrypted with the key in MQLENS_CLIENT_SECRET_KEY"):
        make_verifier(sessions, clock, other)
    with pytest.raises(SecretKeyError):
        client_credentials.check_key(sessions, other)
    # made by another process with another key while this one runs: that credential only is refused
    verifier = make_verifier(sessions, clock, cipher)
    foreign_key, foreign_secret = make_credential(sessions, clock, other)
    with caplog.at_level(logging.ERROR, logger="mqlens.app"):
        verifier.reload()
        verifier.reload()
    [logged] = [r.getMessage() for r in caplog.records if foreign_key in r.getMessage()]  # once, not per reload
    assert "cannot be decrypted" in logged
    signed = date_time(clock.now_ms())
    assert refusal(verifier, authorization(foreign_key, foreign_secret, signed), signed).reason == UNKNOWN_KEY
    assert verifier.verify(authorization(access_key, secret, signed), signed).access_key == access_key
    assert secret not in caplog.text and foreign_secret not in caplog.text


def test_secrets_stay_out_of_reprs(sessions, clock, cipher):
    access_key, secret = make_credential(sessions, clock, cipher)
    verifier = make_verifier(sessions, clock, cipher)
    assert secret not in repr(verifier._known) and access_key in repr(verifier._known)
    assert repr(cipher) == "SecretCipher(source='the test key')"


def test_peer_addresses_lose_their_port():
    assert peer_address("ipv4:127.0.0.1:5555") == "127.0.0.1"
    assert peer_address("ipv6:[::1]:5555") == "::1"
    assert peer_address("unix:/run/mq.sock") == "unix:/run/mq.sock"
    assert peer_address("") == ""
    assert len(peer_address("x" * 1000)) == 128


def test_settings_take_a_fernet_key_only(tmp_path):
    key = Fernet.generate_key().decode()
    assert Settings(data_dir=tmp_path, client_secret_key=f" {key}\n").client_secret_key.get_secret_value() == key
    assert Settings(data_dir=tmp_path, client_secret_key="").client_secret_key is None
    with pytest.raises(ValueError, match="URL-safe base64"):
        Settings(data_dir=tmp_path, client_secret_key="not-a-key")
    assert key not in repr(Settings(data_dir=tmp_path, client_secret_key=key))

