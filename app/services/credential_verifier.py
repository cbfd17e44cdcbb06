"""Who signed a gRPC call, and may they produce or consume what they ask for.

The official RocketMQ 5 clients send, on every call, `x-mq-date-time` (their local time as
yyyyMMddTHHmmss followed by a literal Z) and `authorization: MQv2-HMAC-SHA1 Credential=<access
key>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the date-time, keyed with the
secret>`; the header comes even without credentials, with `Credential=` empty.

verify() runs on the gRPC server's event loop for every call, so it never touches the database:
the secrets are decrypted into memory when the server starts (reload), again right after a
credential is made or revoked in this process (the routes call reload), and every few seconds by
a background thread of the verifier (start), which sees what another process changed (`mqlens
client-credentials`). The same thread writes when each access key was last used (at most once a
minute each) and the refused calls (RefusalLog), so a caller never waits for the database.

A signature covers the date-time only (the protocol's choice): a call overheard can be replayed
while its date-time is within the allowed skew."""

from __future__ import annotations

import calendar
import hmac
import logging
import re
import threading
from dataclasses import dataclass, field
from hashlib import sha1
from typing import Literal, NoReturn

from sqlalchemy.orm import Session, sessionmaker

from app.services import client_credentials
from app.services.client_refusals import RefusalLog
from app.services.client_secret_key import SecretCipher, SecretKeyError
from store.clock import Clock
from store.format import topics as topic_rules

log = logging.getLogger("mqlens.app")

ALGORITHM = "MQv2-HMAC-SHA1"
SIGNED_HEADER = "x-mq-date-time"
MAX_AUTHORIZATION_CHARS = 1024
MAX_ACCESS_KEY_CHARS = 64
_DATE_TIME = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})Z")
_SIGNATURE = re.compile(r"[0-9a-fA-F]{40}")
QUARTER_HOUR_MS = 15 * 60_000
MAX_ZONE_OFFSET_MS = 14 * 3_600_000  # local times from UTC-12 to UTC+14, all whole quarter-hours
REFRESH_MS = 5_000
MAX_CHECKED = 4_096  # signatures remembered as good (a second's calls of every client, usually)
LAST_USED_EVERY_MS = 60_000

# Why a call was refused, as the audit log records it.
NO_CREDENTIALS = "no credentials"
MALFORMED = "malformed credentials"
UNKNOWN_KEY = "unknown access key"
REVOKED = "revoked access key"
WRONG_SIGNATURE = "wrong signature"
CLOCK_SKEW = "date-time out of range"
NOT_ALLOWED = "not allowed"

SIGN_HOW = (f"the official clients send it when given Credentials(access_key, secret): '{ALGORITHM} Credential=<access "
            f"key>, SignedHeaders={SIGNED_HEADER}, Signature=<hex HMAC-SHA1 of {SIGNED_HEADER}>'")


class ClientAuthError(Exception):
    """A call refused: kind "unauthorized" (who signed it is not known for sure) or "forbidden"
    (known, but not allowed this); `reason` is one of the reasons above."""

    def __init__(self, kind: Literal["unauthorized", "forbidden"], message: str, reason: str | None = None):
        super().__init__(message)
        self.kind, self.message = kind, message
        self.reason = reason or (NOT_ALLOWED if kind == "forbidden" else MALFORMED)


@dataclass(frozen=True)
class ClientPrincipal:
    """Who makes a gRPC call: a credential's access key, or None for an anonymous client."""

    access_key: str | None
    can_produce: bool
    can_consume: bool
    topics: frozenset[str] | None = None  # the topics it may use (None: any)
    groups: frozenset[str] | None = None  # the consumer groups it may consume as (None: any)
    address: str = ""  # where the call came from (the refusals of check_* are audited with it)

    @property
    def name(self) -> str:
        return self.access_key or "anonymous client"


@dataclass(frozen=True)
class _Signer:
    access_key: str
    secret: bytes = field(repr=False)
    can_produce: bool
    can_consume: bool
    topics: frozenset[str] | None
    groups: frozenset[str] | None


@dataclass(frozen=True)
class _Known:
    """What the verifier knows since its last reload: a reload replaces it whole."""

    signers: dict[str, _Signer]
    revoked: frozenset[str]
    # (authorization, date-time) -> (signer, signed at): calls checked already, whose signature
    # need not be computed again while the credentials stay as they are.
    checked: dict[tuple[str | None, str | None], tuple[_Signer, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Authorization:
    access_key: str
    signed_headers: str
    signature: str


def _parsed(authorization: str | None) -> _Authorization | None:
    """The fields of an MQv2-HMAC-SHA1 header; None when it is no such header."""
    if not authorization or len(authorization) > MAX_AUTHORIZATION_CHARS:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme != ALGORITHM:
        return None
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    return _Authorization(fields.get("Credential", ""), fields.get("SignedHeaders", ""), fields.get("Signature", ""))


def signed_at_ms(date_time: str) -> int | None:
    """x-mq-date-time (yyyyMMddTHHmmssZ) read as UTC, in epoch ms; None when it is not one."""
    match = _DATE_TIME.fullmatch(date_time)
    if match is None:
        return None
    year, month, day, hour, minute, second = map(int, match.groups())
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour < 24 and minute < 60 and second < 60):
        return None
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) * 1000


def skew_ms(signed_ms: int, now_ms: int) -> int:
    """How far a signed time is from now, beyond the whole quarter-hour time-zone offset (up to
    14 h either way) nearest to it: the clients sign their local time as if it were UTC."""
    difference = signed_ms - now_ms
    max_steps = MAX_ZONE_OFFSET_MS // QUARTER_HOUR_MS
    steps = max(-max_steps, min(max_steps, round(difference / QUARTER_HOUR_MS)))
    return abs(difference - steps * QUARTER_HOUR_MS)


def peer_address(peer: str) -> str:
    """The address of a gRPC peer without its port ("ipv4:10.0.0.5:51234" -> "10.0.0.5"), so the
    calls of one client on its many connections count together."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]") or rest
    return peer[:128]


class CredentialVerifier:
    """Checks gRPC calls' signatures against the client credentials kept in memory (see the module)."""

    def __init__(self, sessions: sessionmaker[Session], clock: Clock, cipher: SecretCipher, allow_anonymous: bool,
                 max_skew_ms: int, *, refresh_ms: int = REFRESH_MS, refusals: RefusalLog | None = None):
        self.sessions, self.clock, self.cipher = sessions, clock, cipher
        self.allow_anonymous, self.max_skew_ms, self.refresh_ms = allow_anonymous, max_skew_ms, refresh_ms
        self.refusals = refusals or RefusalLog(clock)
        self._known = _Known({}, frozenset())
        self._decrypted: dict[str, bytes] = {}  # secret by its encrypted form: a reload decrypts the new ones only
        self._reloading = threading.Lock()
        self._used: dict[str, int] = {}  # access key -> when last verified
        self._used_written: dict[str, int] = {}
        self._used_lock = threading.Lock()
        self._undecryptable: set[str] = set()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the calls ---------------------------------------------------------------------------
    def verify(self, authorization: str | None, date_time: str | None, peer: str = "") -> ClientPrincipal:
        """The principal of a call from its `authorization` and `x-mq-date-time` metadata; raises
        ClientAuthError("unauthorized") when it is not signed as it must be."""
        address = peer_address(peer)
        known = self._known
        checked = known.checked.get((authorization, date_time))  # a client signs one date-time per second
        if checked is None:
            checked = self._signer_of(known, authorization, date_time, address)
            if checked is None:
                return ClientPrincipal(None, True, True, address=address)
            if len(known.checked) >= MAX_CHECKED:
                known.checked.clear()
            known.checked[(authorization, date_time)] = checked
        signer, signed_ms = checked
        now_ms = self.clock.now_ms()
        off_ms = skew_ms(signed_ms, now_ms)
        if off_ms > self.max_skew_ms:
            self._refuse(signer.access_key, address, CLOCK_SKEW, f"{SIGNED_HEADER} {date_time} is {off_ms // 1000} s "
                         f"further from the server's clock than any time-zone offset and the "
                         f"{self.max_skew_ms // 1000} s allowed: set the client's clock right")
        with self._used_lock:
            self._used[signer.access_key] = now_ms
        return ClientPrincipal(signer.access_key, signer.can_produce, signer.can_consume, signer.topics, signer.groups,
                               address)

    def _signer_of(self, known: _Known, authorization: str | None, date_time: str | None,
                   address: str) -> tuple[_Signer, int] | None:
        """Who signed the call, and when it says it was signed; None for an anonymous call allowed."""
        signed = _parsed(authorization)
        if signed is None or not signed.access_key:
            if self.allow_anonymous:
                return None
            if signed is not None or not authorization:
                self._refuse(None, address, NO_CREDENTIALS, "this server takes signed calls only: give the client "
                             "an access key and secret an admin made (Credentials(access_key, secret) in its "
                             "configuration)")
            self._refuse(None, address, MALFORMED, f"the authorization metadata is not {ALGORITHM}: {SIGN_HOW}")
        access_key = signed.access_key
        if len(access_key) > MAX_ACCESS_KEY_CHARS or not access_key.isprintable():
            self._refuse(access_key, address, MALFORMED, "the access key (Credential=) is not one this server "
                         f"makes: at most {MAX_ACCESS_KEY_CHARS} printable characters")
        if signed.signed_headers.lower() != SIGNED_HEADER or not _SIGNATURE.fullmatch(signed.signature):
            self._refuse(access_key, address, MALFORMED, f"the authorization metadata of access key {access_key} "
                         f"must sign {SIGNED_HEADER} with a 40-digit hex Signature: {SIGN_HOW}")
        signer = known.signers.get(access_key)
        if signer is None:
            if access_key in known.revoked:
                self._refuse(access_key, address, REVOKED, f"access key {access_key} is revoked")
            self._refuse(access_key, address, UNKNOWN_KEY, f"access key {access_key} is unknown to this server")
        signed_ms = signed_at_ms(date_time) if date_time else None
        if signed_ms is None or date_time is None:
            self._refuse(access_key, address, MALFORMED, f"the {SIGNED_HEADER} metadata is missing or not "
                         "yyyyMMddTHHmmssZ")
        expected = hmac.new(signer.secret, date_time.encode("ascii"), sha1).hexdigest()
        if not hmac.compare_digest(expected, signed.signature.lower()):
            self._refuse(access_key, address, WRONG_SIGNATURE, f"the signature does not match: the call was not "
                         f"signed with the secret of access key {access_key}")
        return signer, signed_ms

    def check_produce(self, principal: ClientPrincipal, topic: str) -> None:
        """The principal may send messages to `topic`; raises ClientAuthError("forbidden")."""
        if not principal.can_produce:
            self._forbid(principal, f"{principal.name} may not produce: its credential is for consuming only")
        if topic_rules.is_system_topic(topic):
            self._forbid(principal, f"no client produces to {topic[:200]}: the broker writes it")
        self._check_topic(principal, topic)

    def check_consume(self, principal: ClientPrincipal, group: str, topic: str) -> None:
        """The principal may consume `topic` as `group` (receive, ack, change the invisible time,
        forward to the dead-letter queue); the group's own retry topics count as the topics they
        retry. Raises ClientAuthError("forbidden")."""
        if not principal.can_consume:
            self._forbid(principal, f"{principal.name} may not consume: its credential is for producing only")
        if principal.groups is not None and group not in principal.groups:
            self._forbid(principal, f"{principal.name} may not consume as group {group[:200]}: its credential is "
                         f"for group {', '.join(sorted(principal.groups))} only")
        own_retry = topic_rules.retry_topic(group)
        if topic == own_retry:
            return
        if topic.startswith(own_retry + "_"):
            topic = topic[len(own_retry) + 1:]  # the pop retry topic %RETRY%group_topic
        if topic_rules.is_system_topic(topic):
            self._forbid(principal, f"{principal.name} may not consume {topic[:200]}: a client consumes its topics "
                         f"and the retry topics of its own group ({own_retry}) only")
        self._check_topic(principal, topic)

    def _check_topic(self, principal: ClientPrincipal, topic: str) -> None:
        if principal.topics is not None and topic not in principal.topics:
            self._forbid(principal, f"{principal.name} may not use topic {topic[:200]}: its credential is for "
                         f"topic {', '.join(sorted(principal.topics))} only")

    def _forbid(self, principal: ClientPrincipal, message: str) -> NoReturn:
        self.refusals.note(principal.access_key, principal.address, NOT_ALLOWED, message)
        raise ClientAuthError("forbidden", message, NOT_ALLOWED)

    def _refuse(self, access_key: str | None, address: str, reason: str, message: str) -> NoReturn:
        self.refusals.note(access_key, address, reason, message)
        raise ClientAuthError("unauthorized", message, reason)

    # -- what it knows, and what it writes ----------------------------------------------------
    def reload(self, *, strict: bool = False) -> None:
        """Read the credentials again and decrypt the new secrets. `strict` (at start-up): a secret
        the server key cannot decrypt raises SecretKeyError; later it is logged, and its calls refused."""
        with self._reloading:
            signers: dict[str, _Signer] = {}
            revoked: set[str] = set()
            decrypted: dict[str, bytes] = {}
            for credential in client_credentials.stored_credentials(self.sessions):
                if credential.revoked:
                    revoked.add(credential.access_key)
                    continue
                secret = self._decrypted.get(credential.secret_encrypted)
                if secret is None:
                    try:
                        secret = self.cipher.decrypt(credential.secret_encrypted).encode("utf-8")
                    except SecretKeyError as exc:
                        if strict:
                            raise
                        if credential.access_key not in self._undecryptable:
                            self._undecryptable.add(credential.access_key)
                            log.error("client credential %s refused: %s", credential.access_key, exc)
                        continue
                decrypted[credential.secret_encrypted] = secret
                signers[credential.access_key] = _Signer(credential.access_key, secret, credential.role.can_produce,
                                                         credential.role.can_consume, credential.topics,
                                                         credential.groups)
            self._decrypted = decrypted
            if signers != self._known.signers or revoked != self._known.revoked:
                self._known = _Known(signers, frozenset(revoked))  # and the signatures checked are forgotten

    def flush(self) -> None:
        """Write when each access key was last used (once a minute at most each), and the refusals."""
        with self._used_lock:
            due = {key: used_ms for key, used_ms in self._used.items()
                   if used_ms - self._used_written.get(key, -LAST_USED_EVERY_MS) >= LAST_USED_EVERY_MS}
        if due:
            client_credentials.record_uses(self.sessions, due)
            with self._used_lock:
                self._used_written.update(due)
        self.refusals.flush(self.sessions)

    def sync(self) -> None:
        """What the background thread does every refresh: reload, then flush; a failure (a busy
        database) is logged, and the next round tries again."""
        for step in (self.reload, self.flush):
            try:
                step()
            except Exception:
                log.exception("client credentials: %s failed (tried again in %d ms)", step.__name__, self.refresh_ms)

    def start(self) -> CredentialVerifier:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="mqlens-client-credentials", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopping.wait(self.refresh_ms / 1000):
            self.sync()

    def stop(self) -> None:
        """End the background thread, after one last flush."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            self.flush()
        except Exception:
            log.exception("client credentials: the last flush failed")
