"""Request dependencies: what the lifespan put on app.state, typed for routes."""

from __future__ import annotations

import threading
from typing import Annotated

import anyio
from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from app.services.client_sessions import ClientSessions
from app.services.credential_verifier import CredentialVerifier
from app.services.errors import NotOnThisBackendError
from app.services.flow import PutGate
from app.services.pipeline_command import PipelineSetup
from app.services.pipeline_runner import PipelineRunner
from app.services.put_batcher import PutBatcher
from backend.protocol import Backend
from store.clock import Clock
from store.message_store import MessageStore


def _needs_the_store(request: Request) -> NotOnThisBackendError:
    return NotOnThisBackendError(
        f"{request.url.path} needs the embedded store, and this console is attached to a live RocketMQ "
        f"cluster (name servers {request.app.state.settings.namesrv}); the Cluster page shows what it sees")


async def get_store(request: Request) -> MessageStore:
    store = request.app.state.store
    if store is None:
        raise _needs_the_store(request)
    return store


async def get_store_if_any(request: Request) -> MessageStore | None:
    """The embedded store, or None on a live cluster (for routes that serve both)."""
    return request.app.state.store


async def get_put_batcher(request: Request) -> PutBatcher:
    batcher = request.app.state.put_batcher
    if batcher is None:
        raise _needs_the_store(request)
    return batcher


async def get_backend(request: Request) -> Backend:
    return request.app.state.backend


async def get_sessions(request: Request) -> sessionmaker[Session]:
    return request.app.state.sessions


async def get_clock(request: Request) -> Clock:
    return request.app.state.clock


async def get_put_gate(request: Request) -> PutGate:
    return request.app.state.put_gate


async def get_receive_gate(request: Request) -> PutGate:
    return request.app.state.receive_gate


async def get_receive_threads(request: Request) -> anyio.CapacityLimiter:
    return request.app.state.receive_threads


async def get_config_lock(request: Request) -> threading.Lock:
    return request.app.state.config_lock


async def get_pipeline_setup(request: Request) -> PipelineSetup:
    return request.app.state.pipeline_setup


async def get_pipeline_runner(request: Request) -> PipelineRunner:
    return request.app.state.pipeline_runner


async def get_credential_verifier(request: Request) -> CredentialVerifier:
    return request.app.state.credential_verifier


async def get_client_sessions(request: Request) -> ClientSessions:
    return request.app.state.client_sessions


StoreDep = Annotated[MessageStore, Depends(get_store)]
StoreIfAnyDep = Annotated[MessageStore | None, Depends(get_store_if_any)]
BackendDep = Annotated[Backend, Depends(get_backend)]
PutBatcherDep = Annotated[PutBatcher, Depends(get_put_batcher)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
ClockDep = Annotated[Clock, Depends(get_clock)]
PutGateDep = Annotated[PutGate, Depends(get_put_gate)]
ReceiveGateDep = Annotated[PutGate, Depends(get_receive_gate)]
ReceiveThreadsDep = Annotated[anyio.CapacityLimiter, Depends(get_receive_threads)]
ConfigLockDep = Annotated[threading.Lock, Depends(get_config_lock)]
PipelineSetupDep = Annotated[PipelineSetup, Depends(get_pipeline_setup)]
PipelineRunnerDep = Annotated[PipelineRunner, Depends(get_pipeline_runner)]
CredentialVerifierDep = Annotated[CredentialVerifier, Depends(get_credential_verifier)]
ClientSessionsDep = Annotated[ClientSessions, Depends(get_client_sessions)]
