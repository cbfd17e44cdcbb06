"""Client credentials of the gRPC front (the admin role): /api/client-credentials."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Response

from app.deps import ClockDep, CredentialVerifierDep, SessionsDep
from app.headers import NO_STORE
from app.params import AccessKeyPath
from app.routes import error_responses
from app.schemas import (
    ClientCredentialCreate,
    ClientCredentialCreated,
    ClientCredentialOut,
    ClientCredentialResponse,
    ClientCredentialsResponse,
)
from app.security import Admin
from app.services import client_credentials

router = APIRouter(tags=["accounts"])


@router.get("/api/client-credentials", response_model=ClientCredentialsResponse, responses=error_responses())
def list_credentials(sessions: SessionsDep, _: Admin) -> ClientCredentialsResponse:
    """Every client credential, active ones first (never a secret)."""
    return ClientCredentialsResponse(credentials=[ClientCredentialOut(**asdict(c))
                                                  for c in client_credentials.list_credentials(sessions)])


@router.post("/api/client-credentials", response_model=ClientCredentialCreated, status_code=201,
             responses=error_responses(400, 409, 422))
def create_credential(body: ClientCredentialCreate, response: Response, sessions: SessionsDep, clock: ClockDep,
                      verifier: CredentialVerifierDep, actor: Admin) -> ClientCredentialCreated:
    """A new access key and secret for an official RocketMQ 5 client (gRPC), which signs its calls
    with them: `Credentials(access_key, secret)`. The secret is in this answer only. The
    credential may be limited to some `topics` and consumer `groups`."""
    credential, secret = client_credentials.create_credential(
        sessions, clock, verifier.cipher, body.role, actor=actor, topics=body.topics, groups=body.groups,
        description=body.description)
    verifier.reload()
    response.headers["Cache-Control"] = NO_STORE
    return ClientCredentialCreated(credential=ClientCredentialOut(**asdict(credential)), secret=secret)


@router.delete("/api/client-credentials/{access_key}", response_model=ClientCredentialResponse,
               responses=error_responses(400, 404))
def revoke_credential(access_key: AccessKeyPath, sessions: SessionsDep, clock: ClockDep,
                      verifier: CredentialVerifierDep, actor: Admin) -> ClientCredentialResponse:
    """Revoke a credential: its calls are refused from now on (kept in the list, with when)."""
    revoked = client_credentials.revoke_credential(sessions, clock, access_key, actor=actor)
    verifier.reload()
    return ClientCredentialResponse(credential=ClientCredentialOut(**asdict(revoked)))
