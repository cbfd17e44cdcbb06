"""The client credentials page under Admin: the access keys the official RocketMQ 5 clients sign
their gRPC calls with (make one, its secret shown once; revoke one)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse

from app.deps import ClockDep, CredentialVerifierDep, SessionsDep
from app.headers import NO_STORE
from app.pages import RendererDep
from app.pages.admin import SCOPE_TEXT_MAX, name_list
from app.params import AccessKeyPath
from app.security import Admin
from app.services import client_credentials
from app.services.client_credentials import MAX_DESCRIPTION

router = APIRouter(include_in_schema=False)
PAGE = "/admin/client-credentials"


def _anonymous_policy(request: Request) -> str:
    """Why gRPC clients without credentials are accepted or refused."""
    settings = request.app.state.settings
    if settings.grpc_anonymous is not None:
        return "as MQLENS_GRPC_ANONYMOUS says"
    return "the server listens beyond this machine" if settings.listens_beyond_loopback() else \
        "the server listens on this machine only"


def _page_data(request: Request, sessions, verifier) -> dict:
    return {"nav": "admin", "credentials": [asdict(c) for c in client_credentials.list_credentials(sessions)],
            "roles": client_credentials.CLIENT_ROLE_NAMES, "new_credential": None,
            "anonymous": {"allowed": verifier.allow_anonymous,
                          "why": _anonymous_policy(request)},
            "max_skew_ms": verifier.max_skew_ms}


@router.get(PAGE)
def credentials_page(request: Request, sessions: SessionsDep, verifier: CredentialVerifierDep,
                     renderer: RendererDep, _: Admin):
    return renderer.page(request, "admin/client_credentials.html", _page_data(request, sessions, verifier))


@router.post(PAGE)
def create_credential(request: Request, sessions: SessionsDep, clock: ClockDep, verifier: CredentialVerifierDep,
                      renderer: RendererDep, actor: Admin, role: Annotated[str, Form(max_length=16)],
                      topics: Annotated[str | None, Form(max_length=SCOPE_TEXT_MAX)] = None,
                      groups: Annotated[str | None, Form(max_length=SCOPE_TEXT_MAX)] = None,
                      description: Annotated[str | None, Form(max_length=MAX_DESCRIPTION)] = None):
    credential, secret = client_credentials.create_credential(
        sessions, clock, verifier.cipher, role, actor=actor, topics=name_list(topics), groups=name_list(groups),
        description=description)
    verifier.reload()
    shown = {"access_key": credential.access_key, "secret": secret}
    return renderer.page(request, "admin/client_credentials.html",
                         {**_page_data(request, sessions, verifier), "new_credential": shown},
                         headers={"Cache-Control": NO_STORE})  # the secret is shown this once


@router.post(PAGE + "/{access_key}/revoke")
def revoke_credential(access_key: AccessKeyPath, sessions: SessionsDep, clock: ClockDep,
                      verifier: CredentialVerifierDep, actor: Admin):
    client_credentials.revoke_credential(sessions, clock, access_key, actor=actor)
    verifier.reload()
    return RedirectResponse(PAGE, status_code=303)
