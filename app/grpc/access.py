"""Who may call: the caller's signature checked by the credential verifier (client credentials
made by an admin), or an anonymous caller where anonymous clients are allowed; and what the
credential allows (produce, consume; topics and groups)."""

from __future__ import annotations

from typing import Any, Protocol

from app.grpc.calls import Caller
from app.grpc.statuses import Code, RpcRefusal


class Verifier(Protocol):
    """app.services.credential_verifier.CredentialVerifier"""

    def verify(self, authorization: str | None, date_time: str | None, peer: str | None = None) -> Any: ...
    def check_produce(self, principal: Any, topic: str) -> None: ...
    def check_consume(self, principal: Any, group: str, topic: str) -> None: ...


class Access:
    def __init__(self, verifier: Verifier):
        self._verifier = verifier

    def principal(self, caller: Caller) -> Any:
        return self._guard(self._verifier.verify, caller.authorization, caller.date_time, caller.peer)

    def may_produce(self, principal: Any, topic: str) -> None:
        self._guard(self._verifier.check_produce, principal, topic)

    def may_consume(self, principal: Any, group: str, topic: str) -> None:
        self._guard(self._verifier.check_consume, principal, group, topic)

    @staticmethod
    def _guard(check, *args):
        try:
            return check(*args)
        except RpcRefusal:
            raise
        except Exception as exc:
            kind = getattr(exc, "kind", None)
            if kind == "unauthorized":
                raise RpcRefusal(Code.UNAUTHORIZED, str(exc)) from None
            if kind == "forbidden":
                raise RpcRefusal(Code.FORBIDDEN, str(exc)) from None
            raise
