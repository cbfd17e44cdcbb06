"""RocketMQ's ACL request signature (AclClientRPCHook), for clusters with ACL on.

Before a request is sent: AccessKey (and SecurityToken, if any) join the extFields; the values of the
extFields, ordered by their keys as Java's TreeMap orders strings, are concatenated, the body appended,
and HMAC-SHA1 under the secret key, base64, goes into the Signature field. Left out of the content:
Signature itself and _UNIQUE_KEY_QUERY, which the broker (PlainAccessValidator) leaves out when it checks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field

from cluster.remoting.codes import UNIQUE_KEY_QUERY_FIELD
from cluster.remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
UNSIGNED_FIELDS = frozenset({SIGNATURE, UNIQUE_KEY_QUERY_FIELD})


def _java_string_order(text: str) -> bytes:
    """Java compares strings by UTF-16 code units; big-endian UTF-16 bytes sort the same way."""
    return text.encode("utf-16-be", "surrogatepass")


def signature(ext_fields: dict[str, str], body: bytes, secret_key: str) -> str:
    signed = sorted((key for key in ext_fields if key not in UNSIGNED_FIELDS), key=_java_string_order)
    content = "".join(ext_fields[key] for key in signed)
    digest = hmac.new(secret_key.encode("utf-8"), content.encode("utf-8") + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True)
class AclCredentials:
    """The keys a request is signed with. The secret never appears in repr or logs."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def sign(self, cmd: RemotingCommand) -> None:
        cmd.ext_fields[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            cmd.ext_fields[SECURITY_TOKEN] = self.security_token
        cmd.ext_fields[SIGNATURE] = signature(cmd.ext_fields, cmd.body, self.secret_key)
