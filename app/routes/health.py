"""GET /healthz: the server is up and its store is open."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import StoreDep
from app.schemas import HealthResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz(store: StoreDep) -> HealthResponse:
    return HealthResponse()
