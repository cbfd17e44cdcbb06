"""GET /healthz: the server is up with its backend (the store open, or the cluster's client
running); and the console's icon."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.deps import BackendDep
from app.render import project_dir
from app.schemas import HealthResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz(backend: BackendDep) -> HealthResponse:
    """200 once the server serves requests. Attached to a live cluster it does not ask the
    cluster (GET /api/clusters does): a cluster that is down is not a console that is down."""
    return HealthResponse()


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> FileResponse:
    """Browsers ask for /favicon.ico on their own: the console's icon (an SVG)."""
    return FileResponse(project_dir() / "static" / "favicon.svg", media_type="image/svg+xml",
                        headers={"Cache-Control": "public, max-age=86400"})
