"""HTTP routes: parse the request, call one service, shape the response."""

from __future__ import annotations

from typing import Any

from app.schemas import ErrorResponse


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries of the error statuses a route can answer with (all share one body); every
    route behind an account check can also answer 401 (no or bad credentials) and 403 (a role
    without the permission, or a request from another origin)."""
    return {status: {"model": ErrorResponse} for status in sorted({401, 403, *statuses})}
